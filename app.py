#!/usr/bin/env python3
"""The jobfence CDK app: `npx cdk synth` / `npx cdk deploy` (see the Makefile).

It consumes the `jobfence-cdk` package as any app does: its public `build_app`, given this
repository's catalog (`jobs.catalog.CATALOG`) and code asset (`functions/`). The constructs' source is
`infra/jobfence_cdk/`, as the runtime's is `functions/jobfence/`.

Context:
- `schedules=enabled|disabled` (default enabled): the state of every EventBridge rule (kill switch).
- `prefix` (default "jobfence"): the name prefix of rules, functions, queues and tables.
- `nag=false` skips the cdk-nag packs (they run by default, so `make synth` checks them).
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent
FUNCTIONS = ROOT / "functions"
sys.path[:0] = [str(FUNCTIONS), str(ROOT / "infra")]  # the code asset, and the constructs' source (infra/jobfence_cdk)

from aws_cdk import App  # noqa: E402

from jobfence_cdk import build_app  # noqa: E402
from jobs.catalog import CATALOG  # noqa: E402
from jobs.club.catalog import NOTIFICATIONS_QUEUE, REJECTED_METRIC, signing_pairs  # noqa: E402

# What this app passes with its catalog (the tests synthesize with the same): its code asset, the
# club's event signing pairs (one per publishing job), which jobfence rotates on a schedule, and the
# Discord worker's rejection metric, which gets an alarm (docs/operations.md, "Security alarms").
OPTIONS: dict[str, Any] = {
    "functions_dir": FUNCTIONS,
    "signing_keys": signing_pairs(),
    "rejections": {NOTIFICATIONS_QUEUE: REJECTED_METRIC},  # alarmed on the first (docs/operations.md)
}

if __name__ == "__main__":
    app = App()
    build_app(app, CATALOG, **OPTIONS)
    app.synth()
