"""Fixtures of the functional tests: the durable-batch rig (`ops.harness`) with its grant guard."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from jobfence.testing.grants import within_grant


@pytest.fixture
def work_rig(dynamodb, tables, clock) -> Iterator[Callable[..., Any]]:
    """`work_rig(grants={"acme": 1_000}, **build_rig options)`: the rig, every call checked against its catalog
    grant, with quota granted per tenant; its hung provider calls are released at teardown."""
    from ops.harness import build_rig

    built = []

    def make(grants: dict[str, int], **options: Any) -> Any:
        rig = build_rig(dynamodb, tables, clock, guard=within_grant, **options)
        for tenant, units in grants.items():
            rig.quota.grant(tenant, units)
        built.append(rig)
        return rig

    yield make
    for rig in built:
        rig.release()


@pytest.fixture
def faults(rig) -> Any:
    """Scripted AWS faults (`tests.aws_faults.Faults`) on the clients of the module's `rig`: its work store and quota."""
    from tests.aws_faults import Faults

    return Faults(*rig.store.clients(), *rig.quota.clients())
