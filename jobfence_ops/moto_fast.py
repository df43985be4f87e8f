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
  depends on the walker alone, so it is built once per walker; and which handler
  (if any) takes a node depends on the node's class alone, so it is found once
  per (walker class, node class) instead of by `isinstance` against moto's
  abstract node classes at every visit.

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

Then three that a profile of a steady simulated hour named (yappi, docs/benchmarks.md):

- **a query sorted the whole table** (`Table.all_items` sorts every item by its
  keys, comparing moto's typed values) before keeping the queried partition, or
  the index's matches, which moto sorts again by their own keys: a query of a
  table now lists the partition it names, and a query of an index lists the
  items unsorted (moto's sort by the index's keys and the table's is a total
  order, so the earlier sort decided nothing).
- **an update expression was parsed twice a request and its tree deep-copied**,
  then walked by two validators that depend on the expression (and its names)
  alone: the parse is kept per expression string, the copy is made from its
  pickle, and those two validators run once per (expression, names) that passed
  them. A condition expression's tokens are kept per string too (the parse
  that puts the names and values in stays moto's, at every request).
- **moto's dispatch listed the handler class's methods** (`inspect.getmembers`)
  at every request: the list is kept per class; and each response's request id
  (52 random characters) was drawn a `choice()` at a time: it is one `choices()`.

`install()` applies them all (idempotent). Inside `verifying()`, every shortcut
response is also printed by moto's own serializer and an `AssertionError` is
raised if the two differ (body as JSON, headers): the differential test
(tests/unit/test_moto_fast.py) runs the DynamoDB calls the project makes that
way, and counts the shortcuts taken (`taken`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import pickle
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
_UNSEEN = object()
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
            _install_query()
            _install_update_expressions()
            _install_conditions()
            _install_dispatch()
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

    node_class: Any = getattr(ast_nodes, "Node")  # noqa: B009 - the module is untyped for mypy
    kinds: dict[tuple[type, type], Any] = {}  # (walker class, node class) -> the handler's key class, None, or False

    def traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
        # moto's walk, with what each node class is (a Node? handled by which key?) looked up once per class:
        # isinstance against moto's abstract node classes was a third of a walk
        key = (type(self), type(node))
        match = kinds.get(key, _UNSEEN)
        if match is _UNSEEN:
            handled = (kind for kind in _handlers(self) if isinstance(node, kind))
            match = kinds[key] = next(handled, None) if isinstance(node, node_class) else False
        if match is False:
            return node
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                self.pre_processing_of_child(node, i)
                self.traverse_node_recursively(child_node, i)
        if match is not None:
            node = _handlers(self)[match](node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    traverser: Any = getattr(ast_nodes, "DepthFirstTraverser")  # noqa: B009 - the module is untyped for mypy
    traverser.nodes_to_be_processed = nodes_to_be_processed
    traverser.process = process
    traverser.traverse_node_recursively = traverse_node_recursively


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


def _install_query() -> None:
    from moto.dynamodb.models.table import Table

    scope = threading.local()  # the query being answered on this thread: (table, its partition key or None)
    sorted_items = Table.all_items
    query = Table.query

    def all_items(self: Any) -> list[Any]:
        asked = getattr(scope, "query", None)
        if asked is None or asked[0] is not self:
            return sorted_items(self)
        partitions = self.items.values() if asked[1] is None else [self.items.get(asked[1])]
        if not self.range_key_attr:
            return [item for item in partitions if item is not None]
        return [item for partition in partitions if partition for item in partition.values()]

    def fast_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        slow = query(self, hash_key, *args, **kwargs) if _state["verify"] else None
        scope.query = (self, None if index_name else hash_key)
        try:
            fast = query(self, hash_key, *args, **kwargs)
        finally:
            scope.query = None
        if slow is not None:
            taken["Query (partition)"] = taken.get("Query (partition)", 0) + 1
            assert [i.to_json() for i in fast[0]] == [i.to_json() for i in slow[0]], (self.name, index_name)
            assert fast[1:] == slow[1:], (self.name, index_name, fast[1:], slow[1:])
        return fast

    table: Any = Table
    table.all_items = all_items
    table.query = fast_query


PARSED_LIMIT = 4096  # distinct update expressions kept (the project's are a few dozen)


def _install_update_expressions() -> None:
    from moto.dynamodb.parsing import expressions, validators

    parser: Any = getattr(expressions, "UpdateExpressionParser")  # noqa: B009 - the module is untyped for mypy
    parse: Any = parser.make.__func__
    parsed: dict[str, Any] = {}  # expression string -> its tree (never changed: moto's validator copies it)
    pickles: dict[int, tuple[str, bytes]] = {}  # id of a kept tree -> (its string, its pickle)
    checked: set[tuple[str, tuple[tuple[str, str], ...]]] = set()  # passed the validators of the expression alone
    pure = (validators.ActionCountValidator, validators.OverlappingPathsValidator)

    def make(cls: Any, expression_str: str) -> Any:
        tree = parsed.get(expression_str)
        if tree is None:
            tree = parse(cls, expression_str)  # a syntax error raises: nothing kept
            if len(parsed) < PARSED_LIMIT:
                parsed[expression_str] = tree
                pickles[id(tree)] = (expression_str, pickle.dumps(tree))
        return tree

    def init(
        self: Any,
        expression: Any,
        expression_attribute_names: Any,
        expression_attribute_values: Any,
        item: Any,
        table: Any,
    ) -> None:
        kept = pickles.get(id(expression))
        if kept is None or parsed.get(kept[0]) is not expression:
            validator_init(self, expression, expression_attribute_names, expression_attribute_values, item, table)
            return
        # moto's __init__, with the tree's copy made from its pickle instead of deepcopy
        self.expression_attribute_names = expression_attribute_names
        self.expression_attribute_values = expression_attribute_values
        self.item = item
        self.table = table
        self.processors = self.get_ast_processors()
        self.node_to_validate = pickle.loads(kept[1])
        self.__dict__["_jobfence_key"] = (kept[0], tuple(sorted((expression_attribute_names or {}).items())))
        if _state["verify"]:
            taken["UpdateExpression (copy)"] = taken.get("UpdateExpression (copy)", 0) + 1
            # the kept tree is unchanged since it was parsed, and its copy is the one deepcopy makes
            assert pickle.dumps(expression) == kept[1], kept[0]
            assert _same_tree(self.node_to_validate, copy_tree(expression)), kept[0]

    def validate(self: Any) -> Any:
        key = self.__dict__.get("_jobfence_key")
        skip = key in checked and not _state["verify"]
        node = self.node_to_validate
        for processor in self.processors:
            if skip and isinstance(processor, pure):
                continue
            node = processor.traverse(node)
        if key is not None:
            checked.add(key)
        return node

    validator_init = validators.Validator.__init__
    copy_tree = validators.deepcopy
    parser.make = classmethod(make)
    validator: Any = validators.Validator
    validator.__init__ = init
    validator.validate = validate


def _same_tree(a: Any, b: Any) -> bool:
    """Two expression trees alike node by node (a parent link by its node's kind: the walk reaches it anyway)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b, strict=True))
    if not hasattr(a, "__dict__"):
        return bool(a == b)
    if a.__dict__.keys() != b.__dict__.keys():
        return False
    return all(
        type(v) is type(b.__dict__[k]) if k == "parent" else _same_tree(v, b.__dict__[k]) for k, v in a.__dict__.items()
    )


def _install_conditions() -> None:
    from collections import deque

    from moto.dynamodb.comparisons import ConditionExpressionParser

    lex = ConditionExpressionParser._lex_condition_expression
    lexed: dict[str, tuple[Any, ...]] = {}  # expression -> its tokens (immutable tuples), kept while it is short

    def lex_condition_expression(self: Any) -> Any:
        expression = self.condition_expression
        tokens = lexed.get(expression)
        if tokens is None:
            tokens = tuple(lex(self))  # an invalid expression raises: nothing kept
            if len(lexed) < PARSED_LIMIT:
                lexed[expression] = tokens
        elif _state["verify"]:
            taken["ConditionExpression (lex)"] = taken.get("ConditionExpression (lex)", 0) + 1
            assert tuple(lex(self)) == tokens, expression
        return deque(tokens)

    parser: Any = ConditionExpressionParser
    parser._lex_condition_expression = lex_condition_expression


def _install_dispatch() -> None:
    import string

    from moto.core import responses
    from moto.moto_api._internal.moto_random import MotoRandom

    module: Any = responses
    module.method_names_from_class = functools.cache(responses.method_names_from_class)

    def get_random_string(self: Any, length: int = 20, include_digits: bool = True, lower_case: bool = False) -> str:
        pool = string.ascii_letters + (string.digits if include_digits else "")
        drawn = "".join(self.choices(pool, k=length))  # one call, where moto drew each character with choice()
        return drawn.lower() if lower_case else drawn

    random: Any = MotoRandom
    random.get_random_string = get_random_string
