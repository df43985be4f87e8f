"""A refused write's old image: the UpdateItem that asks for it, and reading one of its attributes.

Both item outcomes (`jobfence.work.items`) and roll-up tallies (`jobfence.work.rollup`) send an
update whose refusal carries the row as it was (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), so
a re-sent copy of their own write, refused by its first application, is recognised without a read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def update_returning_old(row: Any, actions: list[Any], condition: Any) -> None:
    """UpdateItem that returns the row with a refusal (ALL_OLD): read it with `dynamo.old_image`.

    pynamodb's `Model.update` cannot ask for the old image, and its error
    wrapper drops it, so the expression pynamodb builds is sent on the
    model's own botocore client; the raw AWS error is raised.
    """
    kwargs = row.get_update_kwargs_from_instance(
        actions=actions, condition=condition, return_values_on_condition_failure="ALL_OLD"
    )
    type(row)._get_connection().connection.client.update_item(**kwargs)


def image_string(image: Mapping[str, Any] | None, name: str) -> str | None:
    """A string attribute of a low-level item image (an old image returned with a refusal)."""
    value = (image or {}).get(name) or {}
    return value.get("S") if isinstance(value, Mapping) else None
