"""the invariants of docs/guarantees.md, checked against what the emulator's tables hold.

The driver records what it asked for and what each invocation returned (an
`Observation` per invocation); the checks compare that log with the rows the
system itself wrote (runs table, leases table, a table snapshot around each
skipped tick), so an invariant is judged on stored state, not on the driver's
own bookkeeping alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from jobfence.dynamo import deserialized
from jobfence.testing.sim.batch_checks import Check, check_batches


@dataclass
class Observation:
    """One invocation as the driver saw it."""

    at_ms: int
    job: str
    label: str  # why the driver invoked it: tick, duplicate, concurrent, retry, ...
    outcome: str | None  # the handler's outcome, or None when it raised / died
    run_id: str | None = None
    error: str | None = None  # the raised error (class: message), if any
    raised: bool = False
    died: bool = False  # the isolate died mid-run (no release; its row is left `running`)
    writes: int | None = None  # writes DynamoDB accepted from this invocation, when counted
    refused_writes: int | None = None  # conditional writes DynamoDB refused (they change nothing)
    tables_changed: bool | None = None  # whether a snapshot of every table changed around it
    summary: Mapping[str, Any] = field(default_factory=dict)
    group: str | None = None  # invocations fired together (a concurrent pair)
    lease_after: Mapping[str, Any] | None = None  # the job's lease item read right after, when read


@dataclass(frozen=True)
class StaleTermProbe:
    """What a holder whose term was taken over got back when it tried to act."""

    job: str
    fence: int
    renew: str  # the error class name the call raised, or "accepted"
    release: str
    fenced_write: str
    lease_after: Mapping[str, Any]
    lease_before: Mapping[str, Any]
    write_landed: bool = False  # whether the refused fenced write's item is in its table anyway


def plain_items(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Low-level DynamoDB items as plain Python values (whole numbers as int)."""
    return [deserialized(item) for item in items]


def scan_all(client: Any, table: str) -> list[dict[str, Any]]:
    """Every item of a table, as plain values (strongly consistent)."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items.extend(plain_items(page.get("Items", [])))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def check_lease_invariants(
    observations: list[Observation],
    runs: list[dict[str, Any]],
    leases: list[dict[str, Any]],
    probes: list[StaleTermProbe],
    now_ms: int,
) -> list[Check]:
    """Invariants 1-4 of docs/guarantees.md over the observation log and the stored rows."""
    return [
        _one_holder(observations, runs, leases, probes, now_ms),
        _stale_term(probes),
        _skip_writes_nothing(observations, runs),
        _failure(observations, runs, leases),
    ]


def _one_holder(observations, runs, leases, probes, now_ms) -> Check:
    problems: list[str] = []
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in runs:
        by_job[row["job"]].append(row)
    for job, rows in by_job.items():
        rows.sort(key=lambda r: (r["started_at"], r["fence"]))
        fences = [r["fence"] for r in rows]
        if len(set(fences)) != len(fences) or fences != sorted(fences):
            problems.append(f"{job}: fences not strictly increasing in start order {fences}")
        for a, b in pairwise(rows):
            # on a frozen clock a term can last 0 ms: two terms starting at one instant overlap too
            # a row still `running` has no end yet: its term is judged by its start alone
            if b["started_at"] < a.get("finished_at", a["started_at"]) or b["started_at"] == a["started_at"]:
                problems.append(
                    f"{job}: terms overlap (fence {a['fence']} until {a['finished_at']}, "
                    f"fence {b['fence']} from {b['started_at']})"
                )
    groups: dict[str, list[Observation]] = defaultdict(list)
    for obs in observations:
        if obs.group:
            groups[obs.group].append(obs)
    for name, members in groups.items():
        winners = [o for o in members if o.outcome in ("ran", "failed", "lease_lost") or o.died]
        if len(winners) > 1:
            problems.append(f"concurrent group {name}: {len(winners)} invocations took the lease")
    for probe in probes:
        takeover = [r for r in by_job[probe.job] if r["fence"] == probe.fence + 1]
        dead_expiry = int(probe.lease_before.get("dead_expires_at", 0))
        if not takeover:
            problems.append(f"{probe.job}: no run took over after fence {probe.fence}")
        elif takeover[0]["started_at"] <= dead_expiry:
            problems.append(f"{probe.job}: fence {probe.fence + 1} started before the dead term expired")
    for lease in leases:
        if lease.get("holder") and int(lease.get("expires_at", 0)) >= now_ms:
            problems.append(f"{lease['job']}: still held at the end by {lease['holder']}")
    held_groups = len(groups)
    detail = "; ".join(problems) or (
        f"{len(runs)} run rows: fences strictly increase, no two terms overlap; "
        f"{held_groups} concurrent group(s) had one winner; {len(probes)} takeover(s) after expiry"
    )
    return Check(1, "at most one unexpired holder per job", not problems, detail)


def _stale_term(probes: list[StaleTermProbe]) -> Check:
    problems = []
    for probe in probes:
        for action in ("renew", "release", "fenced_write"):
            if getattr(probe, action) != "LeaseLost":
                problems.append(f"{probe.job} fence {probe.fence}: {action} -> {getattr(probe, action)}")
        if probe.write_landed:
            problems.append(f"{probe.job} fence {probe.fence}: the refused fenced write landed")
        before = {k: v for k, v in probe.lease_before.items() if k != "dead_expires_at"}
        if before != dict(probe.lease_after):
            problems.append(f"{probe.job}: the lease item changed under the stale holder's calls")
    if not probes:
        problems.append("no taken-over holder was probed")
    detail = (
        "; ".join(problems)
        or f"{len(probes)} stale holder(s): renew, release and fenced write all refused, lease unchanged"
    )
    return Check(2, "a taken-over holder cannot renew, release or fenced-write", not problems, detail)


def _skip_writes_nothing(observations: list[Observation], runs: list[dict[str, Any]]) -> Check:
    problems = []
    skipped = [o for o in observations if o.outcome in ("skipped_leased", "skipped_interval")]
    run_ids = {r["run_id"] for r in runs}
    for obs in skipped:
        if obs.writes:
            problems.append(f"{obs.job} {obs.label}: {obs.writes} write request(s)")
        if obs.tables_changed:
            problems.append(f"{obs.job} {obs.label}: a table changed")
        if obs.run_id and obs.run_id in run_ids:
            problems.append(f"{obs.job} {obs.label}: has a run row")
    snapshots = sum(1 for o in skipped if o.tables_changed is not None)
    if not skipped:
        problems.append("no tick was skipped")
    detail = "; ".join(problems) or (
        f"{len(skipped)} skipped invocations got 0 writes accepted; "
        f"{snapshots} with an unchanged snapshot of every table"
    )
    return Check(3, "a skipped tick writes nothing", not problems, detail)


def _failure(observations: list[Observation], runs: list[dict[str, Any]], leases: list[dict[str, Any]]) -> Check:
    problems = []
    failed = [o for o in observations if o.outcome == "failed" or (o.raised and not o.died)]
    rows = {r["run_id"]: r for r in runs}
    for obs in failed:
        if not obs.raised:
            problems.append(f"{obs.job}: failure did not re-raise")
        row = rows.get(obs.run_id or "")
        if row is None:
            # the runner re-raises, so the run id comes from the row itself
            candidates = [
                r for r in runs if r["job"] == obs.job and r["outcome"] == "failed" and r["started_at"] == obs.at_ms
            ]
            row = candidates[0] if candidates else None
        if row is None:
            problems.append(f"{obs.job}: no `failed` run row")
            continue
        if obs.lease_after is None or obs.lease_after.get("holder"):
            problems.append(f"{obs.job}: lease not released after the failure ({obs.lease_after})")
        error = str(row.get("error", ""))
        if not error or len(error) > 300:
            problems.append(f"{obs.job}: error missing or unbounded ({len(error)} chars)")
        later = [o for o in observations if o.job == obs.job and o.at_ms > obs.at_ms and o.outcome == "ran"]
        if not later:
            problems.append(f"{obs.job}: never ran again after failing (lease not released?)")
        others = [o for o in observations if o.at_ms == obs.at_ms and o.job != obs.job and o.outcome == "ran"]
        if not others:
            problems.append(f"{obs.job}: no other job ran at the failing tick")
    if not failed:
        problems.append("no job failed")
    detail = (
        "; ".join(problems)
        or f"{len(failed)} failure(s): re-raised, `failed` row with a bounded error, lease released, other jobs ran"
    )
    return Check(4, "a failing job releases, records `failed`, re-raises, blocks nobody", not problems, detail)


# -- durable batches (5-9) and logs (10) --------------------------------------------------------


def check_batch_invariants(
    runtime: Any, worker: Any, refs: list[Any], stubs: Mapping[str, Any] | None = None
) -> list[Check]:
    """Invariants 5-9 over the batch, item and quota rows of the demo's batches."""
    from jobfence.config import Settings
    from jobs.listings.stores import build_store

    store = build_store(Settings.from_environ(worker.environment), runtime.clock)
    acts = {name: dict(getattr(stub, "ids", {})) for name, stub in (stubs or {}).items()}
    return check_batches(store, refs, acts)


def check_logs(log_dir: Any, markers: list[str], secrets: list[str]) -> Check:
    """Invariant 10 over every isolate's log file: no payload marker, no secret value."""
    import pathlib

    problems = []
    files = sorted(pathlib.Path(log_dir).glob("*.log"))
    lines = 0
    for path in files:
        text = path.read_text(errors="replace")
        lines += text.count("\n")
        for marker in markers:
            if marker and marker in text:
                problems.append(f"{path.name}: a payload marker")
        for secret in secrets:
            for part in _secret_parts(secret):
                if part in text:
                    problems.append(f"{path.name}: a secret value")
    detail = (
        "; ".join(sorted(set(problems))) or f"{lines} log lines in {len(files)} function log(s): no payload, no secret"
    )
    return Check(
        10,
        "logs never contain payloads or secrets",
        not problems and bool(files),
        detail if files else "no logs were written",
    )


def _secret_parts(secret: str) -> list[str]:
    import json

    try:
        value = json.loads(secret)
    except ValueError:
        return [secret]
    if isinstance(value, dict):
        return [str(v) for v in value.values() if len(str(v)) >= 8]
    return [secret]
