"""One base error and narrow subclasses.

Callers catch the narrow class they can handle; anything else is a `JobfenceError`
and is recorded as a failed run. Lease errors carry the competing lease item
(from `ReturnValuesOnConditionCheckFailure=ALL_OLD`) so no second read is needed
to explain a refusal.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

from jobfence.term import Term


class JobfenceError(Exception):
    """Base of every error this project raises on purpose."""


class Skip(str, enum.Enum):
    """Why a tick does not run, as one type: the pre-gate's prediction and an acquire refusal's `skip`.

    The values are the run outcomes they become (`jobfence.scheduled.Outcome`).
    """

    LEASED = "skipped_leased"  # another holder's term is live
    INTERVAL = "skipped_interval"  # the gate stamp is too recent
    SERVED = "skipped_served"  # a catch-up's or hand-over's tick was served by a run since


class LeaseRefused(JobfenceError):
    """An acquire was refused (the lease is held, the interval has not elapsed, or a copy is unsettled).

    `unanswered` is set when an earlier try of the same acquire may have been
    applied before its reply was lost (a 5xx or a lost reply was retried, by
    botocore or by jobfence): the `jobfence.lease.Term` that try would have
    made (`fence` 0: unknown). If that term was taken over before the retry
    could see it, the refusal is not a skip: the runner looks for the term's
    run row (`ScheduledRunner`).
    """

    unanswered: Any = None
    skip: ClassVar[Skip | None] = None  # the skip this refusal is (None: not a skip, see the subclass)


class LeaseHeld(LeaseRefused):
    """Another holder has an unexpired lease on the job."""

    skip: ClassVar[Skip] = Skip.LEASED

    def __init__(self, job: str, competing: Mapping[str, Any] | None = None) -> None:
        self.job = job
        self.competing = dict(competing or {})
        holder = self.competing.get("holder", "?")
        super().__init__(f"lease on {job!r} is held by {holder!r}")


class IntervalNotElapsed(LeaseRefused):
    """The job's gate stamp is too recent: it ran less than 0.9 x interval ago."""

    skip: ClassVar[Skip] = Skip.INTERVAL

    def __init__(self, job: str, competing: Mapping[str, Any] | None = None) -> None:
        self.job = job
        self.competing = dict(competing or {})
        super().__init__(f"interval of {job!r} has not elapsed since its last start")


class RequestServed(LeaseRefused):
    """A catch-up or buffered request for a tick that a run since then already served.

    A catch-up: a run started at or after the tick (the lease item's `acquired_at`).
    A buffered hand-over: the item no longer holds that tick's pending request
    (a later term consumed it). Nothing was written.
    """

    skip: ClassVar[Skip] = Skip.SERVED

    def __init__(self, job: str, tick: int, competing: Mapping[str, Any] | None = None) -> None:
        self.job = job
        self.tick = tick
        self.competing = dict(competing or {})
        super().__init__(f"the tick {tick} of {job!r} was already served by a run since")


class LeaseLost(JobfenceError):
    """This holder's term is over (taken over, released, or expired)."""

    def __init__(self, job: str, lease_id: str, competing: Mapping[str, Any] | None = None) -> None:
        self.job = job
        self.lease_id = lease_id
        self.competing = dict(competing or {})
        super().__init__(f"lease term {lease_id} on {job!r} is no longer ours")


class TermOvertaken(JobfenceError):
    """This tick's acquire was applied, its reply was lost, and the term was over before a retry could learn it.

    The lease item shows the term replaced by a later acquire (its copy names
    this tick's run), or the run row of the term exists (an observer recorded it
    `died`). The tick reports `lease_lost` for that run: it ran nothing, but a
    term was taken in its name. `term` is the `jobfence.lease.Term`.
    """

    def __init__(self, job: str, term: Term) -> None:
        self.job = job
        self.term = term
        super().__init__(f"the term of fence {term.fence} on {job!r} was taken over before its acquire was answered")


class PredecessorUnrecorded(LeaseRefused):
    """The lease is free, but the term before the last one ended unreleased and its run is not yet recorded.

    An acquire replaces one term at a time and keeps only that term's copy, so it
    waits until the copy it would overwrite is settled: the caller records that
    run `died` (`RunStore.mark_died`), settles the copy (`LeaseStore.settle`) and
    acquires again. `term` is the `jobfence.lease.Term` to record.
    """

    def __init__(self, job: str, term: Term) -> None:
        self.job = job
        self.term = term
        super().__init__(f"the run of fence {term.fence} on {job!r} ended unreleased and is not yet recorded")


class ErrorKind(str, enum.Enum):
    """What an AWS error says about the call that raised it (each kind's meaning for a write: `jobfence.dynamo`)."""

    CONDITION_FAILED = "condition_failed"
    TRANSACTION_CANCELED = "transaction_canceled"
    THROTTLED = "throttled"
    UNAVAILABLE = "unavailable"
    REPLY_LOST = "reply_lost"
    CONNECTION = "connection"
    REJECTED = "rejected"

    @property
    def transient(self) -> bool:
        """Retrying the same call later may succeed."""
        return self in (ErrorKind.THROTTLED, ErrorKind.UNAVAILABLE, ErrorKind.REPLY_LOST, ErrorKind.CONNECTION)

    @property
    def maybe_applied(self) -> bool:
        """A write that raised this may nevertheless have been applied (its outcome is unknown)."""
        return self in (ErrorKind.UNAVAILABLE, ErrorKind.REPLY_LOST)


class StoreError(JobfenceError):
    """A DynamoDB call failed for a reason other than a condition we asked for.

    `kind` is the classification of the AWS error behind it (`ErrorKind` above),
    when there was one. `unanswered` says the write may have landed anyway: every
    try of it ended in a transient error and one of them may have been applied
    (only a read of the item tells).
    """

    def __init__(self, message: str, kind: ErrorKind | None = None, *, unanswered: bool = False) -> None:
        self.kind = kind
        self.unanswered = unanswered
        super().__init__(message)


class ConditionFailed(StoreError):
    """One of the caller's own conditions in a (fenced) transaction was refused."""

    def __init__(self, index: int, item: Mapping[str, Any] | None) -> None:
        self.index = index
        self.item = dict(item or {})
        super().__init__(f"condition of transaction item {index} failed")


class UnknownJob(JobfenceError):
    """A JOB_NAME that is not in the catalog. The system fails closed."""


class InvalidEvent(JobfenceError):
    """An event or message that does not match its contract."""


class SettingsError(JobfenceError):
    """The function's environment is missing or has a bad variable."""


def bounded(text: object, limit: int) -> str:
    """`text` cut to at most `limit` characters (ending "…"): every caller string an error echoes goes through it."""
    text = str(text)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
