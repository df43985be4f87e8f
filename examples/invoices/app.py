#!/usr/bin/env python3
"""The invoices app: `npx cdk synth` / `npx cdk deploy` (README.md).

Everything is derived from the catalog by jobfence-cdk; this app only passes its catalog and its code
asset (`functions/`: the handler, the job, the layer's requirements). cdk.json sets the `prefix`.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent
FUNCTIONS = ROOT / "functions"
sys.path.insert(0, str(FUNCTIONS))  # the catalog lives in the code asset, as the functions see it

from aws_cdk import App  # noqa: E402

from jobfence_cdk import build_app  # noqa: E402
from invoices.catalog import CATALOG  # noqa: E402

if __name__ == "__main__":
    app = App()
    build_app(app, CATALOG, functions_dir=FUNCTIONS)
    app.synth()
