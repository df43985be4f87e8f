"""The invoices app's tests use jobfence's test kit: `clock`, `aws`, `dynamodb`, `job_harness` and
`lambda_context` (what Powertools and the runner read of Lambda's context), with pyproject.toml naming
the catalog."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

pytest_plugins = ["jobfence.testing.plugin"]
