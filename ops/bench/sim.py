"""Fault-simulator figures: runs per second, and the verdict of a large campaign.

`SIM_BENCH_SEEDS` (default 0:10000) and `SIM_BENCH_JOBS` (default 2) choose the
campaign; the figures are wall-clock on the machine that ran it, so the page
also says how many processes ran it.
"""

from __future__ import annotations

import os

from jobfence.testing.sim.faults import FaultKind
from ops.sim.campaign import campaign, parse_seeds
from ops.sim.families import FAMILIES


def run() -> str:
    seeds_text = os.environ.get("SIM_BENCH_SEEDS", "0:10000")
    jobs = int(os.environ.get("SIM_BENCH_JOBS", "2"))
    seeds = parse_seeds(seeds_text)
    result = campaign(seeds, None, jobs=jobs)
    return section(result, seeds_text, jobs)


def applicable_share(result, kind: FaultKind) -> float:
    """The share of runs injected with `kind` among the runs of the families that can inject it."""
    families = [name for name in result.by_family if kind in FAMILIES[name].kinds]
    runs = sum(result.by_family[name] for name in families)
    return sum(result.injected_by_family[(name, kind)] for name in families) / runs if runs else 0.0


def section(result, seeds_text: str, jobs: int) -> str:
    """The Markdown section for a finished campaign."""
    families = ", ".join(f"{name} {n}" for name, n in sorted(result.by_family.items()))
    lines = [
        "## Fault simulator",
        "",
        f"Command: `SIM_BENCH_SEEDS={seeds_text} SIM_BENCH_JOBS={jobs} python -m ops.bench ops.bench.sim` "
        f"(the same campaign as `python -m jobfence_ops sim --seeds {seeds_text} --jobs {jobs}`)",
        "",
        f"{result.runs} runs ({families}) in {result.seconds:.0f} s wall-clock with {jobs} process(es): "
        f"**{result.runs_per_second:.2f} runs/s** ({result.runs_per_second / jobs:.2f} per process), "
        f"{result.writes / max(result.runs, 1):.0f} applied writes a run.",
        "",
        f"**Invariant violations: {len(result.failed)} run(s).**",
        "",
    ]
    for report in result.failed[:10]:
        first = report.violations[0]
        lines.append(f"- seed {report.seed} ({report.family}): invariant {first.number}: {first.text[:160]}")
    if result.failed:
        lines.append("")
    lines += [
        "Share of runs injected: of all runs, of the runs of the families the kind applies to (a lease "
        "family has no queue, so no delivery fault), and per family.",
        "",
        "| fault kind | all runs | runs it applies to | " + " | ".join(sorted(result.by_family)) + " |",
        "|---|---:|---:|" + "---:|" * len(result.by_family),
    ]
    for kind in FaultKind:
        per = " | ".join(
            f"{result.injected_by_family[(fam, kind)] / n:.0%}" for fam, n in sorted(result.by_family.items())
        )
        lines.append(f"| {kind.value} | {result.share(kind):.0%} | {applicable_share(result, kind):.0%} | {per} |")
    return "\n".join(lines)
