#!/usr/bin/env python3
"""The jobfence CDK app: `npx cdk synth` / `npx cdk deploy` (see the Makefile).

Context:
- `schedules=enabled|disabled` (default enabled): the state of every EventBridge rule (kill switch).
- `prefix` (default "jobfence"): the name prefix of rules, functions, queues and tables.
- `nag=false` skips the cdk-nag packs (they run by default, so `make synth` checks them).
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "functions"))

from aws_cdk import App  # noqa: E402

from infra.app import build_app  # noqa: E402
from jobs.catalog import CATALOG  # noqa: E402

if __name__ == "__main__":
    app = App()
    build_app(app, CATALOG)
    app.synth()
