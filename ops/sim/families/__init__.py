"""The simulator's families of scenarios, by name.

A family names its catalog and the tables of it it needs, the fault kinds that apply to it,
and three steps (see `jobfence.testing.sim.world.Family`): `setup` seeds data and spawns the
actors, `settle` runs the fault-free sweeps that liveness is judged on, and
`check` judges the invariants at the end (plus whatever it checks on every
applied write through `world.wire.on_write`).

Extension point: a domain family (Discord delivery, the commerce safety net)
is a module with a class of that shape; `register` adds it, and the CLI, the
campaign and the test budget pick it up by name.
"""

from __future__ import annotations

from jobfence.testing.sim.world import Family

FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family (its name must be new)."""
    if family.name in FAMILIES:
        raise ValueError(f"a simulator family named {family.name!r} exists")
    FAMILIES[family.name] = family
    return family


def _builtin() -> None:
    from ops.sim.families.batches import ListingsFamily, WorkFamily
    from ops.sim.families.buffer_one import BufferOneFamily
    from ops.sim.families.club import ClubFamily
    from ops.sim.families.lease import LeaseFamily
    from ops.sim.families.safety_net import SafetyNetFamily

    for family in (LeaseFamily(), WorkFamily(), ListingsFamily(), SafetyNetFamily(), ClubFamily(), BufferOneFamily()):
        register(family)


_builtin()
