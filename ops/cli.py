"""The operator CLI: `python -m ops demo` (more commands land with the embedded runtime)."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bootstrap_path() -> None:
    # functions/ is the Lambda asset root: its packages import as top-level modules there.
    functions = str(ROOT / "functions")
    if functions not in sys.path:
        sys.path.insert(0, functions)
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobfence")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run one command; the return value is the exit status."""
    _bootstrap_path()
    parser = argparse.ArgumentParser(prog="jobfence", description="jobfence operator CLI")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the whole scenario on the embedded emulator and check the invariants")
    demo.add_argument("--seed", type=int, default=7, help="makes a run reproducible")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ops.demo import demo as run_demo

        return run_demo(seed=args.seed)
    parser.error(f"unknown command {args.command}")
    return 2
