"""What a run, an item or a batch consumed in DynamoDB, from DynamoDB's own answers, and what that cost.

Every DynamoDB call a metered client sends while a `measure()` block is open asks
for `ReturnConsumedCapacity=INDEXES`, and the capacity in its answer is added to
every open meter (a run's, and an item's inside it). The hooks sit on the
botocore event system, so they see every call, the stores' pynamodb calls
included: `meter_session` for a botocore session's clients (pynamodb's sessions,
`jobfence.binding.new_session`), `meter_client` for a client made elsewhere (the
function's own). Outside a `measure()` block nothing is asked or added.

A read's units are read units, a write's write units (a transaction's include
DynamoDB's doubling); the units of the base table and of its indexes are kept
apart, as DynamoDB reports them. The dollar estimate uses the on-demand prices
of `jobfence.prices` (dated): units are what DynamoDB bills on-demand, so the
estimate is the DynamoDB part of the bill for that work, exactly; Lambda
duration is added by the caller that knows the memory size.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from jobfence.prices import PRICES, Prices

READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
ASKS = frozenset({*READS, "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})


@dataclass(frozen=True)
class Units:
    """Capacity units consumed: read and write, of base tables and of their indexes."""

    read: float = 0.0
    write: float = 0.0
    index_read: float = 0.0
    index_write: float = 0.0

    def __add__(self, other: Units) -> Units:
        return Units(
            self.read + other.read,
            self.write + other.write,
            self.index_read + other.index_read,
            self.index_write + other.index_write,
        )

    def dollars(self, prices: Prices = PRICES) -> float:
        """What these units cost at on-demand prices."""
        reads, writes = self.read + self.index_read, self.write + self.index_write
        return reads * prices.read_request_unit + writes * prices.write_request_unit

    def fields(self) -> dict[str, float]:
        """The units as a row records them (`rru`, `wru`, `index_rru`, `index_wru`), rounded to 0.01."""
        return {
            "rru": round(self.read, 2),
            "wru": round(self.write, 2),
            "index_rru": round(self.index_read, 2),
            "index_wru": round(self.index_write, 2),
        }

    @classmethod
    def of_fields(cls, row: Mapping[str, Any] | None) -> Units:
        """The units a row recorded (`fields`), zero where it recorded none."""
        row = row or {}
        return cls(
            float(row.get("rru", 0)),
            float(row.get("wru", 0)),
            float(row.get("index_rru", 0)),
            float(row.get("index_wru", 0)),
        )


@dataclass(frozen=True)
class Cost:
    """What one run, item or batch consumed and its estimate in dollars (`jobfence.prices`).

    `Cost()` is nothing consumed; costs add up (`sum(costs, Cost())`).
    """

    units: Units = field(default_factory=Units)
    requests: int = 0
    dollars: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.units + other.units, self.requests + other.requests, self.dollars + other.dollars)

    def fields(self) -> dict[str, Any]:
        """What a row records: the units (`Units.fields`), `requests` and `cost_usd`."""
        return {**self.units.fields(), "requests": self.requests, "cost_usd": round(self.dollars, 9)}

    @classmethod
    def of_fields(cls, row: Mapping[str, Any] | None) -> Cost | None:
        """The cost a row recorded, or None when it recorded none (a row from before costs were kept)."""
        if not row or row.get("cost_usd") is None:
            return None
        return cls(Units.of_fields(row), int(row.get("requests", 0)), float(row["cost_usd"]))


@dataclass
class Meter:
    """The units and DynamoDB requests counted while its `measure()` block was open.

    `memory_mb` is the Lambda function's memory, when known: the estimate then adds the
    duration's GB-seconds (arm64) to the DynamoDB units.
    """

    units: Units = field(default_factory=Units)
    requests: int = 0
    memory_mb: int | None = None

    def cost(self, duration_ms: int, prices: Prices = PRICES) -> Cost:
        """The units counted so far, and their estimate with `duration_ms` of the function's time."""
        dollars = self.units.dollars(prices)
        if self.memory_mb:
            dollars += self.memory_mb / 1024 * max(duration_ms, 0) / 1000 * prices.lambda_gb_s_arm64
        return Cost(self.units, self.requests, dollars)

    def add(self, operation: str, consumed: Any) -> None:
        """Add one answer's `ConsumedCapacity` (a dict, or a list of them for a batch or transaction)."""
        self.requests += 1
        for entry in consumed if isinstance(consumed, list) else [consumed]:
            if isinstance(entry, Mapping):
                self.units = self.units + consumed_units(operation, entry)


def consumed_units(operation: str, consumed: Mapping[str, Any]) -> Units:
    """The units of one table's `ConsumedCapacity` entry of an `operation`'s answer."""
    read = operation in READS
    table = consumed.get("Table")
    base = _units_of(table, read) if isinstance(table, Mapping) else _units_of(consumed, read)
    index = 0.0
    for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        for one in (consumed.get(kind) or {}).values():
            index += _units_of(one, read)
    if read:
        return Units(read=base, index_read=index)
    return Units(write=base, index_write=index)


def _units_of(entry: Mapping[str, Any], read: bool) -> float:
    named = entry.get("ReadCapacityUnits" if read else "WriteCapacityUnits")
    return float(named if named is not None else entry.get("CapacityUnits") or 0.0)


_meters: contextvars.ContextVar[tuple[Meter, ...]] = contextvars.ContextVar("jobfence_meters", default=())


@contextmanager
def measure(memory_mb: int | None = None, into: Meter | None = None) -> Iterator[Meter]:
    """A meter of every metered DynamoDB call made in this context until the block ends (nested ones too).

    `into` counts into an existing meter instead of a new one: one item's meter, opened again
    in each context its work runs in (a thread of a pool starts with no open meter).
    """
    meter = into if into is not None else Meter(memory_mb=memory_mb)
    token = _meters.set((*_meters.get(), meter))
    try:
        yield meter
    finally:
        _meters.reset(token)


def current() -> Meter | None:
    """The innermost open meter of this context (None outside every `measure()`)."""
    meters = _meters.get()
    return meters[-1] if meters else None


def _ask(params: dict[str, Any], model: Any, **_: Any) -> None:
    if _meters.get() and model.name in ASKS:
        params.setdefault("ReturnConsumedCapacity", "INDEXES")


def _count(parsed: Mapping[str, Any], model: Any, **_: Any) -> None:
    meters = _meters.get()
    if not meters or model.name not in ASKS or "ConsumedCapacity" not in parsed:
        return
    for meter in meters:
        meter.add(model.name, parsed["ConsumedCapacity"])


def meter_client(client: Any) -> Any:
    """Meter a DynamoDB client's calls; returns it. Idempotent, and a client of a metered session counts once."""
    _register(client.meta.events)
    return client


def meter_session(session: Any) -> Any:
    """Meter the DynamoDB calls of every client a botocore session (or a boto3 session's `events`) makes."""
    _register(session)
    return session


def _register(events: Any) -> None:
    # unique ids: registering twice (or on a client whose session did) keeps one handler each
    events.register("provide-client-params.dynamodb", _ask, unique_id="jobfence-capacity-ask")
    events.register("after-call.dynamodb", _count, unique_id="jobfence-capacity-count")
