"""Benchmarks: request and capacity counts per operation, written to docs/benchmarks.md.

Each module in this package exposes `run() -> str` returning a Markdown section
that starts with the command that produced it. `python -m ops.bench` runs them
all (or the ones named on the command line) and rewrites docs/benchmarks.md.
"""

MODULES = ("ops.bench.lease", "ops.bench.work", "ops.bench.sim")
