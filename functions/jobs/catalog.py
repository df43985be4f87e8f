"""The one catalog: every table, scheduled job and work queue of the system.

Adding a job is one `JobSpec` entry in its subsystem's `catalog.py`; the
runtime registry and the infrastructure (rule, function, environment, grants,
alarms) are both derived from `CATALOG`.
"""

from jobfence.registry import Registry
from jobs.backoffice import catalog as backoffice
from jobs.club import catalog as club
from jobs.commerce import catalog as commerce
from jobs.listings import catalog as listings

CATALOG = Registry(
    tables=[*commerce.TABLES, *backoffice.TABLES, *listings.TABLES, *club.TABLES],
    jobs=[*commerce.JOBS, *backoffice.JOBS, *listings.JOBS, *club.JOBS],
    queues=[*listings.QUEUES, *club.QUEUES],
)
