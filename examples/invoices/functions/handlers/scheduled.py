"""Every scheduled function of this app: jobfence's handler over this app's catalog.

Which job a function runs is its own `JOB_NAME` (set by jobfence-cdk from the catalog), never an event field.
"""

import os

from jobfence import SystemClock, scheduled_handler
from invoices.catalog import CATALOG

handler = scheduled_handler(CATALOG, os.environ, SystemClock())
