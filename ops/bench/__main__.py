"""`python -m ops.bench [module ...]`: run the benchmarks and rewrite docs/benchmarks.md."""

from __future__ import annotations

import importlib
import os
import pathlib
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "functions"))

from ops.bench import MODULES
from ops.bench.coldstart import GoalMissed

OUT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Figures are counts (requests, capacity units) measured against moto with
botocore event hooks, not wall-clock timings, unless a section says otherwise.
Each section names the command that produced it; `make bench` regenerates the
whole page.
"""


def main(argv: list[str]) -> int:
    names = argv or list(MODULES)
    sections, missed = [], []
    for name in names:
        try:
            sections.append(importlib.import_module(name).run().strip())
        except GoalMissed as exc:  # the page still shows the figures; the run fails loudly
            sections.append(exc.section.strip())
            missed.append(f"{name}: {exc}")
    if argv and OUT.exists():  # only some modules: keep the other sections of the page as they are
        sections = _merge(_sections(OUT.read_text()), sections)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(HEADER + "\n" + "\n\n".join(sections) + "\n")
    print(f"wrote {OUT.relative_to(OUT.parents[1])} ({len(sections)} sections)")
    for line in missed:
        print(f"BENCH GOAL MISSED: {line}", file=sys.stderr)
    return 1 if missed else 0


def _sections(page: str) -> list[str]:
    """The page's `## ` sections (the header before the first one is dropped)."""
    parts = ("\n" + page).split("\n## ")[1:]
    return ["## " + part.strip() for part in parts]


def _merge(old: list[str], new: list[str]) -> list[str]:
    """`old` with each section of `new` replacing the one of the same title (or appended)."""
    title = lambda text: text.splitlines()[0]  # noqa: E731
    fresh = {title(s): s for s in new}
    merged = [fresh.pop(title(s), s) for s in old]
    return merged + [s for s in new if title(s) in fresh]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
