"""Benchmarks: request and capacity counts per operation, written to docs/benchmarks.md.

Each module in this package exposes `run() -> str` returning a Markdown section
that starts with the command that produced it. `python -m ops.bench` runs them
all (or the ones named on the command line) and rewrites docs/benchmarks.md. A module whose
figure is past its goal raises `GoalMissed` with its section: the page is written, the run exits 1.
"""

MODULES = (
    "ops.bench.coldstart",
    "ops.bench.lease",
    "ops.bench.overlap",
    "ops.bench.takeover",
    "ops.bench.auditor",
    "ops.bench.work",
    "ops.bench.reclaim",
    "ops.bench.fairness",
    "ops.bench.tenants",
    "ops.bench.hotkey",
    "ops.bench.cost",
    "ops.bench.sim",
    "ops.bench.demo",
)
