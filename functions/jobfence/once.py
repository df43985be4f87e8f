"""A counter write applied once per request id, however often or late its request is sent.

An `ADD` is not idempotent: a copy re-sent after a lost reply (botocore's retry), or delivered
late after newer writes of the same item, would add again. Such a write names its request and
records the id on the item, in the same `UpdateItem`, in a bounded set of applied ids:

    applied     condition: the id in neither `applied_ids` nor `applied_ids_prev`, fewer than KEEP ids
                actions:   the write's own, ADD applied_ids {id}
    full set    condition: the id in neither, KEEP ids or more (read from the refusal's old image)
                actions:   the write's own, SET applied_ids_prev = applied_ids, applied_ids = {id}

A refusal is read from the item DynamoDB returns with it (`ReturnValuesOnConditionCheckFailure`;
one consistent read where none comes back): the id in either set is "already applied". So a copy
is refused however many other writes came after it, up to KEEP to 2 x KEEP of them (a request
re-sent after that many others is outside what is promised: docs/guarantees.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pynamodb.expressions.condition import size

from jobfence.dynamo import Applied, update_row

KEEP = 32  # ids a set holds before it rotates: the newest KEEP to 2 x KEEP applied ids are remembered
IDS = "applied_ids"
PREV = "applied_ids_prev"


def update_once(row: Any, actions: Sequence[Any], condition: Any, request_id: str, what: str) -> bool:
    """Apply `actions` to `row` once for `request_id`, when `condition` holds (None: always).

    The row's model declares `applied_ids` and `applied_ids_prev` (`UnicodeSetAttribute(null=True)`).

    True: applied now, or by an earlier copy of this request (its id is on the item). False:
    refused by `condition` and never applied.
    """
    model = type(row)
    ids, prev = model.applied_ids, model.applied_ids_prev
    fresh = (ids.does_not_exist() | ~ids.contains(request_id)) & (prev.does_not_exist() | ~prev.contains(request_id))
    if condition is not None:
        fresh = condition & fresh
    room = ids.does_not_exist() | (size(ids) < KEEP)

    def ours(seen: Any) -> bool:  # an earlier copy of this very request was applied
        return request_id in (seen.get(IDS) or ()) or request_id in (seen.get(PREV) or ())

    outcome = update_row(row, [*actions, ids.add({request_id})], fresh & room, what, ours=ours)
    for attempt in range(3):  # a full set rotates; a rotation raced by another one is tried once more
        if isinstance(outcome, Applied):
            return True
        if len(outcome.item.get(IDS) or ()) < KEEP or attempt == 2:
            return False  # refused by the caller's condition
        rotate = [*actions, prev.set(ids), ids.set({request_id})]
        outcome = update_row(row, rotate, fresh & ids.exists() & (size(ids) >= KEEP), what, ours=ours)
    return False
