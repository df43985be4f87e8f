"""Shortcuts in moto's DynamoDB and SQS paths that leave every response as moto writes it.

The local runtime, the CLI, the console and the tests answer every DynamoDB
request with moto. Profiling a simulated hour (docs/benchmarks.md, "Local
runtime") put about half of moto's time per request in two generic layers:

- **the response serializer** walks the operation's output shape member by
  member, looking each value up under several spellings, to print a dict that,
  for DynamoDB's data-plane operations, moto already built in the wire's own
  shape (`{"Attributes": {"n": {"S": "x"}}}`). For those operations the body is
  that dict without its `None` members and without the top-level members the
  shape does not name, binary attribute values in base64: what the walk
  prints. Anything else (a timestamp, a set, an error) takes moto's walk.
- **the update-expression validator** runs ten tree walkers over the AST and
  each rebuilds its table of node handlers at every node it visits. The table
  depends on the walker alone, so it is built once per walker.

And two in its SQS path, which the local runtime's queues take at every
delivery: a message's retention was checked by building every attribute of its
queue (counting all its messages, a clock read per message), where it needs
one; and the queue's counts read the clock once per message, where one read
per count gives the same answer.

And one in its TransactWriteItems: to undo a refused transaction moto
deep-copied every table the transaction names (every item of it) before
applying it. The copy it restores from now holds the table's other items by
reference and deep copies of the items the transaction names, the only ones it
can change (a table with a stream still gets the whole copy).

`install()` applies all five (idempotent). Inside `verifying()`, every shortcut
response is also printed by moto's own serializer and an `AssertionError` is
raised if the two differ (body as JSON, headers): the differential test
(tests/unit/test_moto_fast.py) runs the DynamoDB calls the project makes that
way, and counts the shortcuts taken (`taken`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

# The data-plane operations whose output moto builds in the wire's shape.
DATA_PLANE = frozenset(
    {
        "BatchGetItem",
        "BatchWriteItem",
        "DeleteItem",
        "GetItem",
        "PutItem",
        "Query",
        "Scan",
        "TransactGetItems",
        "TransactWriteItems",
        "UpdateItem",
    }
)

_lock = threading.Lock()
_state = {"installed": False, "verify": False}
taken: dict[str, int] = {}  # shortcut responses by operation (counted while verifying)


class _NotPlain(Exception):
    """The value holds something JSON has no type for: moto's walk decides."""


def plain(value: Any) -> Any:
    """`value` with every `None` member dropped and bytes in base64; `_NotPlain` when it holds another type.

    In a DynamoDB data-plane output the only binary members are the attribute
    values `B` and `BS` (blobs), which the wire carries in base64.
    """
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise _NotPlain(type(value).__name__)


def install() -> None:
    """Apply both shortcuts to moto in this process (idempotent)."""
    with _lock:
        if not _state["installed"]:
            _install_serializer()
            _install_traverser()
            _install_sqs()
            _install_transactions()
            _state["installed"] = True


@contextlib.contextmanager
def verifying() -> Iterator[dict[str, int]]:
    """Check every shortcut response against moto's own serializer while inside; yields `taken`."""
    install()
    taken.clear()
    _state["verify"] = True
    try:
        yield taken
    finally:
        _state["verify"] = False


def _install_serializer() -> None:
    from moto.core import serialize

    walk = serialize.JSONSerializer._serialize_result

    def _serialize_result(self: Any, resp: Any, result: Any) -> Any:
        operation = self.operation_model
        shape = operation.output_shape
        if (
            operation.name not in DATA_PLANE
            or operation.service_model.service_name != "dynamodb"
            or shape is None
            or not isinstance(result, dict)
        ):
            return walk(self, resp, result)
        try:
            body = plain({k: v for k, v in result.items() if k in shape.members})
        except _NotPlain:
            return walk(self, resp, result)
        fast = self._serialized_result_to_response(resp, result, shape, body)
        if _state["verify"]:
            taken[operation.name] = taken.get(operation.name, 0) + 1
            slow = walk(self, self._create_default_response(), result)
            assert json.loads(fast["body"]) == json.loads(slow["body"]), (operation.name, fast["body"], slow["body"])
            assert fast["headers"] == slow["headers"], (operation.name, fast["headers"], slow["headers"])
        return fast

    serialize.JSONSerializer._serialize_result = _serialize_result  # type: ignore[method-assign]


def _install_traverser() -> None:
    from moto.dynamodb.parsing import ast_nodes

    def _handlers(self: Any) -> dict[type, Any]:
        handlers = self.__dict__.get("_jobfence_handlers")
        if handlers is None:
            handlers = self.__dict__["_jobfence_handlers"] = self._processing_map()
        return handlers

    def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
        kinds = self.__dict__.get("_jobfence_kinds")
        if kinds is None:
            kinds = self.__dict__["_jobfence_kinds"] = tuple(_handlers(self))
        return kinds

    def process(self: Any, node: Any) -> Any:
        for kind, handler in _handlers(self).items():
            if isinstance(node, kind):
                return handler(node)
        return None

    traverser: Any = getattr(ast_nodes, "DepthFirstTraverser")  # noqa: B009 - the module is untyped for mypy
    traverser.nodes_to_be_processed = nodes_to_be_processed
    traverser.process = process


def _install_sqs() -> None:
    from moto.core.utils import unix_time, unix_time_millis
    from moto.sqs import models

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        retention_period = self.get_queue(queue_name).message_retention_period
        return bool(retention_period + message.sent_timestamp / 1000 > unix_time())

    def visible_now(queue: Any) -> list[Any]:
        now = unix_time_millis()
        return [m for m in queue._messages if now > m.visible_at and not now < m.delayed_until]

    def delayed(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if now < m.delayed_until)

    def not_visible(queue: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in queue._messages if not now > m.visible_at)

    backend: Any = models.SQSBackend
    backend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period
    queue: Any = models.Queue
    queue.messages = property(visible_now)
    queue.approximate_number_of_messages_delayed = property(delayed)
    queue.approximate_number_of_messages_not_visible = property(not_visible)


def _install_transactions() -> None:
    import copy as real_copy

    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    plan = threading.local()  # the keys each table's snapshot must copy, while a transaction is being applied

    def snapshot(table: Any, keys: set[tuple[Any, Any]]) -> Any:
        clone = real_copy.copy(table)
        items = real_copy.copy(table.items)  # the defaultdict: partitions by reference
        for key, value in items.items():
            if isinstance(value, dict):
                items[key] = dict(value)  # a range table's partition: its items by reference
        for hash_value, range_value in keys:
            if table.range_key_attr:
                if range_value in items.get(hash_value, {}):
                    items[hash_value][range_value] = real_copy.deepcopy(items[hash_value][range_value])
            elif hash_value in items:
                items[hash_value] = real_copy.deepcopy(items[hash_value])
        clone.items = items
        return clone

    class _Copy:
        """moto's `copy` module in its DynamoDB backend, with the snapshot for a planned table."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            keys = getattr(plan, "keys", None)
            if keys and isinstance(value, Table) and value.stream_shard is None and value.name in keys:
                return snapshot(value, keys[value.name])
            return real_copy.deepcopy(value, memo)

    apply = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        keys: dict[str, set[tuple[Any, Any]] | None] = {}
        for entry in transact_items:
            op: Any = next(iter(entry.values()), None)
            if not isinstance(op, dict) or (table := self.tables.get(op.get("TableName"))) is None:
                continue
            key = op.get("Key") or op.get("Item") or {}
            try:
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
            except (KeyError, TypeError, AttributeError):
                keys[table.name] = None  # a key moto will refuse: the whole copy, as moto takes it
                continue
            planned = keys.setdefault(table.name, set())
            if planned is not None:
                planned.add((hash_value, range_value))
        plan.keys = {name: planned for name, planned in keys.items() if planned is not None}
        try:
            return apply(self, transact_items)
        finally:
            plan.keys = None

    backend: Any = models.DynamoDBBackend
    backend.transact_write_items = transact_write_items
    module: Any = models
    module.copy = _Copy()
