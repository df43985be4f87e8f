"""A bare row written in a fenced transaction: what the probes, benches and simulator families that test
the fence itself write (they exercise `LeaseStore.transaction`, not a job's store)."""

from __future__ import annotations

from pynamodb.attributes import UnicodeAttribute
from pynamodb.models import Model

from jobfence.transaction import Write, save_write


def marker_write(table: str, only_if_absent: bool = False, **key: str) -> Write:
    """A `Write` putting a row of only its key attributes (strings: the partition key first, a sort key second).

    `only_if_absent`: conditioned on no such row existing (a refusal carries the old image).
    """
    if not 1 <= len(key) <= 2:
        raise ValueError("a marker row has a partition key and at most a sort key")
    attributes = {name: UnicodeAttribute(hash_key=i == 0, range_key=i == 1) for i, name in enumerate(key)}
    model = type(
        "Marker", (Model,), {"Meta": type("Meta", (), {"table_name": table}), "__module__": __name__, **attributes}
    )
    partition = getattr(model, next(iter(key)))
    return save_write(model(**key), partition.does_not_exist() if only_if_absent else None)
