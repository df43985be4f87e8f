"""Campaigns: many seeds, one verdict, and the share of runs each fault kind was injected in.

    python -m jobfence_ops sim --seeds 0:1000                 seeds 0..999; seed N runs family N mod #families
    python -m jobfence_ops sim --seeds 0:300 --family work    one family only
    python -m jobfence_ops sim --replay 17 [--family lease]   one seed, printing the trace of every call and fault

A seed always runs the same family with `--family`; without it, the family is
chosen from the seed in the order of `ops.sim.families.FAMILIES`.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from jobfence.testing.sim.faults import FaultKind
from jobfence.testing.sim.world import RunReport


def family_of(seed: int, family: str | None) -> str:
    from ops.sim.families import FAMILIES

    names = list(FAMILIES)
    if family is not None:
        if family not in FAMILIES:
            raise ValueError(f"no simulator family {family!r} (families: {', '.join(names)})")
        return family
    return names[seed % len(names)]


def run_one(seed: int, family: str | None = None, echo: Callable[[str], None] | None = None) -> RunReport:
    from jobfence.testing.sim.world import run_seed
    from ops.sim.families import FAMILIES

    return run_seed(FAMILIES[family_of(seed, family)], seed, echo=echo)


@dataclass
class CampaignResult:
    """What a campaign found."""

    runs: int = 0
    seconds: float = 0.0
    failed: list[RunReport] = field(default_factory=list)
    by_family: Counter = field(default_factory=Counter)
    injected: Counter = field(default_factory=Counter)  # FaultKind -> runs it was injected in
    injected_by_family: Counter = field(default_factory=Counter)  # (family, kind) -> runs
    steps: int = 0
    writes: int = 0
    limited: list[RunReport] = field(default_factory=list)  # runs with a breach beyond the time budget

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.by_family[report.family] += 1
        self.steps += report.steps
        self.writes += report.writes
        for kind in report.injected:
            self.injected[kind] += 1
            self.injected_by_family[(report.family, kind)] += 1
        if not report.ok:
            self.failed.append(report)
        if report.limits:
            self.limited.append(report)

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    def share(self, kind: FaultKind) -> float:
        return self.injected[kind] / self.runs if self.runs else 0.0

    def lines(self, show: int = 10) -> list[str]:
        out = [
            f"{self.runs} runs ({', '.join(f'{f} {n}' for f, n in sorted(self.by_family.items()))}) in "
            f"{self.seconds:.1f} s: {self.runs_per_second:.1f} runs/s, {self.writes} applied writes",
            f"violations: {len(self.failed)} run(s)",
        ]
        for report in self.failed[:show]:
            first = report.violations[0]
            out.append(
                f"  seed {report.seed} ({report.family}): invariant {first.number}: {first.text[:160]}"
                + (f" (+{len(report.violations) - 1} more)" if len(report.violations) > 1 else "")
            )
        out.append(f"beyond the time budget (the fault model's limit, not violations): {len(self.limited)} run(s)")
        for report in self.limited[:show]:
            first = report.limits[0]
            out.append(f"  seed {report.seed} ({report.family}): invariant {first.number}: {first.text[:160]}")
        out.append("fault kind               share of runs injected (all families; per family)")
        for kind in FaultKind:
            per = ", ".join(
                f"{fam} {self.injected_by_family[(fam, kind)] / n:.0%}" for fam, n in sorted(self.by_family.items())
            )
            out.append(f"  {kind.value:<22} {self.share(kind):>5.0%}   ({per})")
        return out


def _slice(args: tuple[Sequence[int], str | None]) -> list[RunReport]:
    seeds, family = args
    return [_without_trace(run_one(seed, family)) for seed in seeds]


def _without_trace(report: RunReport) -> RunReport:
    if report.ok:
        return RunReport(
            report.family,
            report.seed,
            report.violations,
            report.injected,
            report.steps,
            report.writes,
            limits=report.limits,
        )
    return report


def campaign(seeds: Iterable[int], family: str | None = None, jobs: int = 1) -> CampaignResult:
    """Run every seed (in `jobs` processes); traces are kept for failing runs only."""
    seeds = list(seeds)
    result = CampaignResult()
    started = time.perf_counter()
    if jobs <= 1:
        for seed in seeds:
            result.add(_without_trace(run_one(seed, family)))
    else:
        parts = [(seeds[i::jobs], family) for i in range(jobs)]
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for reports in pool.imap_unordered(_slice, parts):
                for report in reports:
                    result.add(report)
        result.failed.sort(key=lambda r: r.seed)
        result.limited.sort(key=lambda r: r.seed)
    result.seconds = time.perf_counter() - started
    return result


def parse_seeds(text: str) -> range:
    """`A:B` (A..B-1) or `N` (just N)."""
    if ":" in text:
        start, _, stop = text.partition(":")
        return range(int(start or 0), int(stop))
    return range(int(text), int(text) + 1)
