"""Lease-term invariants, shared by every family that runs scheduled ticks (1-4, 12, 13).

Watched on every applied write of the leases table:
    1  an acquire raises the fence by exactly one, over a released term or one
       that expired (the acquirer's clock may run up to half the margin ahead)
    2  any other lease write applies to a term the writer itself took, except a
       settle (it clears only `prev_holder`), which anyone may write once the
       replaced term's run row is final, and a buffer_one tick's pending request
       (it sets only `pending_tick`, while another term is live)
Judged at the end, per tick (an actor that ran `ScheduledRunner.run`):
    3  a tick that reported a skip had no write applied, other than recording an
       earlier crashed term (its run row `died`, then the settle of its copy), or
       its buffer_one pending request (recorded, then served by a term since)
    4  a tick whose job raised re-raises that very error, and its run row says failed
    12 every term has exactly one run row; its outcome is what the tick reported;
       a crashed tick's row is not left `running` once a later term started (the
       last term of a job, if its tick crashed, is recorded only by the next acquire).
       A tick whose every try to finish its row failed is judged like a crashed one
       (its row ends `died`, not what it reported: the documented fallback). A
       tick's later term (a buffer_one holder's run once more) reports nothing of
       its own: its row must only be final once a later term started
    13 nothing but a jobfence error (or the job's own error) escapes a tick
    15 two terms of a gated job whose runs began the job start (their acquires applied) at least
       interval x 0.9 - skew budget - request-age budget apart in true time (docs/guarantees.md,
       "The time budget"), however late an acquire was applied: the runner measures its own
       acquire's age and does not run one answered past the request-age budget
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

from jobfence.clock import REQUEST_AGE_BUDGET_MS, SKEW_BUDGET_MS
from jobfence.errors import JobfenceError, LeaseLost
from jobfence.registry import INTERVAL_TOLERANCE
from jobfence.testing.sim.kernel import Actor
from jobfence.testing.sim.world import MARGIN_MS, World


class TermWatch:
    """Records terms as the leases table changes; judges the ticks at the end."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.terms: dict[tuple[str, int], dict[str, Any]] = {}  # (job, fence) -> who took it, when
        self.holders: dict[str, set[str | None]] = {}  # actor -> lease ids it acquired
        self.ticks: list[Actor] = []
        self.job_errors: dict[str, BaseException] = {}
        self.recorded: dict[str, int] = {}  # actor -> writes that recorded an earlier term (died row, settle)
        self.finished: set[tuple[str, int]] = set()  # (job, fence) of rows their own tick finished
        self.worked: set[str] = set()  # actors whose job began its first batch ("driver": the clean ticks)
        world.wire.on_write.append(self._on_write)

    def tick(self, actor: Actor) -> Actor:
        self.ticks.append(actor)
        return actor

    def guard(self, actor: Actor | None, batches: Iterator[Any]) -> Iterator[Any]:
        """Wrap a job's batches to remember the job's own error (LeaseLost is the runner's)."""
        self.worked.add(actor.name if actor is not None else "driver")  # runs at the first batch
        try:
            yield from batches
        except LeaseLost:
            raise
        except Exception as exc:
            if actor is not None:
                self.job_errors[actor.name] = exc
            raise

    def _on_write(self, write: Any) -> None:
        world = self.world
        for change in write.changes:
            before, after = change.before or {}, change.after or {}
            if change.table == "runs" and after.get("outcome") == "died" and before.get("outcome") != "died":
                self.recorded[write.actor] = self.recorded.get(write.actor, 0) + 1
            if change.table == "runs" and after.get("outcome") not in (None, "running", "died"):
                self.finished.add((after["job"], int(after["fence"])))
            if change.table != "leases":
                continue
            job = (after or before)["job"]  # the leases table's key
            if after.get("fence") != before.get("fence"):
                fence = int(after.get("fence", 0))
                if fence != int(before.get("fence", 0)) + 1:
                    world.violate(1, f"{job}: fence went {before.get('fence')} -> {after.get('fence')}")
                if before.get("holder") and int(before.get("expires_at", 0)) >= write.at + MARGIN_MS // 2:
                    world.violate(
                        1,
                        f"{job}: fence {fence} taken by {write.actor} while {before['holder']} held an "
                        f"unexpired term (expires {before['expires_at']}, now {write.at})",
                    )
                self.terms[(job, fence)] = {
                    "lease_id": after.get("lease_id"),
                    "actor": write.actor,
                    "at": write.at,
                    "age": write.age_ms,
                }
                self.holders.setdefault(write.actor, set()).add(after.get("lease_id"))
            elif _requests(before, after):
                self.recorded[write.actor] = self.recorded.get(write.actor, 0) + 1
                if not before.get("holder"):
                    world.violate(2, f"{write.actor} recorded a pending request on {job} with no holder")
            elif _settles(before, after):
                self.recorded[write.actor] = self.recorded.get(write.actor, 0) + 1
                run_id = before.get("prev_run_id")
                rows = [r for r in world.scan("runs") if r["job"] == job and r.get("run_id") == run_id]
                if not rows or rows[0]["outcome"] == "running":
                    world.violate(
                        2,
                        f"{write.actor} settled the {job} copy of run {run_id} before its row was "
                        f"final ({rows[0]['outcome'] if rows else 'no row'})",
                    )
            elif before.get("lease_id") not in self.holders.get(write.actor, set()):
                world.violate(
                    2,
                    f"{write.actor} changed the {job} lease of another term "
                    f"({before.get('lease_id')}, fence {before.get('fence')})",
                )

    def check(self, ended_before: set[tuple[str, int]] | None = None) -> None:
        """Judge every tick; `ended_before`: terms that a later term followed (their rows must be final)."""
        world = self.world
        rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for row in world.scan("runs"):
            rows.setdefault((row["job"], int(row["fence"])), []).append(row)
        by_actor = {a.name: a for a in self.ticks}
        judged: set[str] = set()  # actors whose first term was judged (a later one is a buffered run)
        actor: Actor | None  # each tick's, then each term's holder (None: the driver's clean tick)
        for actor in self.ticks:
            outcome: Any = getattr(actor.result, "outcome", None)
            own = self.job_errors.get(actor.name)
            own_writes = actor.writes - self.recorded.get(actor.name, 0)
            if outcome_is_skip(actor) and own_writes:
                world.violate(
                    3, f"{actor.name} reported {outcome.value} but {own_writes} write(s) of its own were applied"
                )
            if actor.error is not None and actor.error is not own and not isinstance(actor.error, JobfenceError):
                world.violate(13, f"{actor.name} raised {type(actor.error).__name__} (not classified)")
            if own is not None and not actor.crashed and actor.error is not own:
                world.violate(
                    4,
                    f"{actor.name}: the job raised {type(own).__name__} but the tick "
                    f"{'raised ' + type(actor.error).__name__ if actor.error else 'returned'}",
                )
        self._check_gate()
        latest: dict[str, int] = {}
        last_of: dict[str, int] = {}  # actor -> the last fence it took (a buffer_one holder may take two)
        for (job, fence), term in self.terms.items():
            latest[job] = max(latest.get(job, 0), fence)
            last_of[term["actor"]] = max(last_of.get(term["actor"], 0), fence)
        for (job, fence), term in sorted(self.terms.items()):
            found = rows.get((job, fence), [])
            actor = by_actor.get(term["actor"])
            if not found and actor is not None and actor.crashed and fence == latest[job]:
                continue  # the documented limit: a dead term is recorded by the next acquire or a sweep
            if len(found) != 1:
                world.violate(
                    12,
                    f"{job} fence {fence} (taken by {term['actor']}, which {_fate(actor)}) has {len(found)} run rows",
                )
                continue
            row = found[0]
            if actor is None:
                continue  # the driver's clean tick
            own = self.job_errors.get(actor.name)
            raised_later = fence != last_of[actor.name] and actor.error is not None  # from its run once more
            if actor.name in judged or raised_later:
                # a holder's run once more (buffer_one), or its first run when a later one raised: the tick
                # reported nothing of it; the job's own error belongs to its last run, whose row says failed
                if (
                    fence == last_of[actor.name]
                    and own is not None
                    and actor.error is own
                    and row["outcome"] not in ("failed", "running", "died")
                ):
                    world.violate(4, f"{job} fence {fence}: the job failed, its row says {row['outcome']}")
                if row["outcome"] == "running" and fence < latest[job]:
                    world.violate(
                        12, f"{job} fence {fence}: {actor.name}'s run still `running` after fence {latest[job]}"
                    )
                judged.add(actor.name)
                continue
            judged.add(actor.name)
            outcome = getattr(actor.result, "outcome", None)
            unfinished = (job, fence) not in self.finished and not outcome_is_skip(actor)
            if actor.crashed or (unfinished and row["outcome"] in ("running", "died")):
                # crashed, or every try of its finish failed (the documented fallback: the row is left to
                # the next acquire or the sweep, which record it died once the term is over)
                if row["outcome"] == "running" and fence < latest[job]:
                    world.violate(12, f"{job} fence {fence}: unfinished run still `running` after fence {latest[job]}")
            elif own is not None and actor.error is own:
                if row["outcome"] != "failed":
                    world.violate(4, f"{job} fence {fence}: the job failed, its row says {row['outcome']}")
            elif outcome is not None and row["outcome"] != outcome.value:
                world.violate(
                    12, f"{job} fence {fence}: {actor.name} reported {outcome.value}, row says {row['outcome']}"
                )

    def _check_gate(self) -> None:
        """15: runs of a gated job start the stated bound apart in true time (terms whose job began)."""
        spec = self.world.data.get("spec")
        if spec is None or not spec.interval_s:
            return
        bound = int(spec.interval_s * 1000 * INTERVAL_TOLERANCE) - SKEW_BUDGET_MS - REQUEST_AGE_BUDGET_MS
        ran = [(job, fence, t) for (job, fence), t in sorted(self.terms.items()) if t["actor"] in self.worked]
        for (job, fence, earlier), (job2, fence2, later) in pairwise(ran):
            gap = later["at"] - earlier["at"]
            if job != job2 or gap >= bound:
                continue
            self.world.violate(
                15,
                f"{job}: fence {fence2} ({later['actor']}) started {gap // 1000} s after fence "
                f"{fence} ({earlier['actor']}, its acquire applied {earlier['age'] // 1000} s after "
                f"it was built); the bound is {bound // 1000} s",
            )


def outcome_is_skip(actor: Actor) -> bool:
    outcome = getattr(actor.result, "outcome", None)
    return outcome is not None and outcome.value.startswith("skipped")


def _settles(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """A write that only marks the replaced term's copy settled (`LeaseStore.settle`)."""
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    return changed == {"prev_holder"} and after.get("prev_holder") == "-"


def _requests(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """A write that only records a buffer_one pending request (`LeaseStore.request_pending`)."""
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    return changed <= {"pending_tick"} and after.get("pending_tick") is not None  # a duplicate sets the same value


def _fate(actor: Actor | None) -> str:
    if actor is None:
        return "is the driver"
    if actor.crashed:
        return "crashed"
    if actor.error is not None:
        return f"raised {type(actor.error).__name__}"
    outcome = getattr(actor.result, "outcome", None)
    return f"reported {outcome.value}" if outcome is not None else "ended"
