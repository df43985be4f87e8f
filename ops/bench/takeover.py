"""Benchmark: for each catalog job, the worst-case number of ticks lost after a holder dies.

A holder that dies mid-run (the isolate is killed: nothing is released or
recorded) keeps its term until `expires_at`; every tick before that is
refused `skipped_leased`. How many depends on the lease TTL against the
schedule, and on how late EventBridge delivered the tick that died: a term
taken `d` ms after its tick ends `d + ttl` after it, and the next ticks may
arrive on time.

Measured, not computed: for each job the real `LeaseStore` on moto, under a
frozen clock, takes the lease for a tick delivered on time up to two minutes late and then
never releases it; each following tick, delivered on time, tries the same
conditional acquire (interval gate included) until one succeeds. The same
sequence with a holder that releases normally is the baseline: the ticks the
gate would refuse anyway after a late tick are not the death's. A tick is
*lost* when it is refused in the first sequence and not in the second.
For a cron schedule every tick of the first week is tried as the one that dies,
and the worst is reported.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import boto3
from moto import mock_aws

from jobfence.clock import FrozenClock
from jobfence.errors import LeaseRefused
from jobfence.lease import LeaseStore
from jobfence.ledger import DELIVERY_TOLERANCE_MS
from jobfence.registry import JobSpec
from jobfence.schedule import Schedule
from jobfence_ops.tables import create_catalog_tables

COMMAND = "python -m ops.bench ops.bench.takeover"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a Thursday
WEEK_MS = 7 * 86_400_000
# how late the tick that dies was delivered: on time up to the latest a tick's run may start and still be
# that tick's (jobfence.ledger), every 10 s; the ticks after it arrive on time (the worst for a takeover)
DELAYS_MS = tuple(range(0, DELIVERY_TOLERANCE_MS + 1, 10_000))
OLD_DEFAULT_TTL_S = 30 * 60  # the TTL every job had before the default became timeout + margin


@dataclass(frozen=True)
class Takeover:
    """One job's worst case: the ticks refused because a dead term still held the lease."""

    job: str
    ttl_s: int
    lost: int  # ticks refused by the dead term that a normal release would have let run
    takeover_after_ms: int  # from the dead tick's nominal time to the first tick that took over
    delay_ms: int  # how late the tick that died was delivered, in the worst case


class _Trial:
    """A fresh job name and clock per trial on one leases table, so trials never see each other."""

    def __init__(self, client: Any, table: str) -> None:
        self.client, self.table, self.n = client, table, 0

    def first_run(self, spec: JobSpec, ttl_ms: int, taken_at: int, ticks: list[int], *, dies: bool) -> int:
        """The index in `ticks` of the first tick whose acquire succeeds after a term taken at `taken_at`."""
        self.n += 1
        job = f"{spec.name}#{self.n}"
        interval_ms = spec.interval_ms
        clock = FrozenClock(taken_at)
        store = LeaseStore(self.client, self.table, clock)
        lease = store.acquire(job, "dying", ttl_ms, interval_ms, run_id=f"{job}-dying")
        if not dies:
            store.release(lease)
        for index, tick in enumerate(ticks):
            clock.set(max(clock.now_ms(), tick))
            try:
                store.acquire(job, f"tick-{index}", ttl_ms, interval_ms, run_id=f"{job}-{index}")
            except LeaseRefused:
                continue
            return index
        raise AssertionError(f"{spec.name}: no tick took over within {len(ticks)} ticks")


def worst_takeover(trial: _Trial, spec: JobSpec, ttl_s: int) -> Takeover:
    """The worst case over the delivery delays and over the job's first week of ticks.

    Only the gaps after the tick that dies matter, so a death tick whose following gaps were already
    tried (every hourly tick, say) is not tried again.
    """
    schedule = Schedule(spec.schedule, anchor_ms=START_MS)
    deaths = (
        [schedule.next_after(START_MS)]
        if schedule.period_ms()
        else schedule.fires_between(START_MS, START_MS + WEEK_MS)
    )
    worst = Takeover(spec.name, ttl_s, -1, 0, 0)
    tried: set[tuple[int, ...]] = set()
    for dead_at in deaths:
        horizon = dead_at + DELIVERY_TOLERANCE_MS + ttl_s * 1000 + 2 * schedule.longest_gap_ms(8)
        ticks = schedule.fires_between(dead_at, horizon)
        gaps = tuple(t - dead_at for t in ticks)
        if gaps in tried:
            continue
        tried.add(gaps)
        for delay_ms in DELAYS_MS:
            normal = trial.first_run(spec, ttl_s * 1000, dead_at + delay_ms, ticks, dies=False)
            died = trial.first_run(spec, ttl_s * 1000, dead_at + delay_ms, ticks, dies=True)
            case = Takeover(spec.name, ttl_s, died - normal, ticks[died] - dead_at, delay_ms)
            if (case.lost, case.takeover_after_ms) > (worst.lost, worst.takeover_after_ms):
                worst = case
    return worst


def takeovers(jobs: list[JobSpec], *, old_default: bool = False) -> list[Takeover]:
    """Each job's worst case with its catalog TTL, or (old_default) with the former 30-minute default."""
    with mock_aws():
        setup: Any = boto3.client("dynamodb")
        tables = create_catalog_tables(setup, names={"leases"})
        trial = _Trial(boto3.client("dynamodb"), tables["leases"])
        out = []
        for spec in jobs:
            catalog_ttl_s = spec.lease_ttl_ms // 1000
            ttl_s = max(OLD_DEFAULT_TTL_S, catalog_ttl_s) if old_default else catalog_ttl_s
            out.append(worst_takeover(trial, dataclasses.replace(spec, lease_ttl_s=ttl_s), ttl_s))
        return out


def run() -> str:
    from jobs.catalog import CATALOG

    jobs = sorted(CATALOG.jobs.values(), key=lambda s: s.name)
    before = {t.job: t for t in takeovers(jobs, old_default=True)}
    after = takeovers(jobs)
    lines = [
        "## Takeover after a death",
        "",
        f"Command: `{COMMAND}`",
        "",
        "For each catalog job: a tick delivered on time or up to "
        f"{DELIVERY_TOLERANCE_MS // 1000} s late (every 10 s) takes the lease and its isolate dies; the following "
        "ticks arrive on time",
        "and try the real conditional acquire on moto. *Lost* counts the ticks refused by the dead term that a",
        "normal release would have let run; *takeover* is the time from the dead tick to the tick that",
        "takes over (and records the dead run `died`). The worst tick of the first week counts for a cron",
        "schedule. *Before* is the former default TTL of 30 minutes for every job; *after* is the catalog",
        "now: the function timeout plus the 60 s safety margin, except the commerce API's hourly jobs,",
        "whose source sets 30 minutes (`ops/bench/takeover.py`).",
        "",
        "| job | schedule | timeout | TTL before | lost before | "
        "TTL after | lost after | takeover after | worst delay |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in after:
        spec, old = CATALOG.job(t.job), before[t.job]
        lines.append(
            f"| {t.job} | `{spec.schedule}` | {spec.timeout_s} s | {old.ttl_s} s | {old.lost} | "
            f"{t.ttl_s} s | {t.lost} | "
            f"{t.takeover_after_ms / 60_000:g} min | {t.delay_ms // 1000} s |"
        )
    losing = [t for t in after if t.lost]
    lines += [
        "",
        f"Worst case after the change: {max(t.lost for t in after)} tick(s) lost, against "
        f"{max(t.lost for t in before.values())} before.",
    ]
    if losing:
        lines += [
            "A job still loses a tick when its timeout plus the margin is not below its period ("
            + ", ".join(f"{t.job}: {t.ttl_s} s against `{CATALOG.job(t.job).schedule}`" for t in losing)
            + "): the tick that arrives as the dead term expires is refused. Lowering such a job's timeout"
            " below its period minus the margin would let the next tick take over.",
        ]
    lines += [
        "A lost tick is never silent: the ledger labels it `skipped_leased` under the run recorded `died`,",
        "and the run that takes over picks up that run's work (every job resumes from its rows).",
    ]
    return "\n".join(lines)
