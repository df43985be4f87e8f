"""This repository's app, as the operator tooling sees it (`[tool.jobfence]` in pyproject.toml, `jobfence_ops.app`).

Its catalog is `jobs.catalog:CATALOG`; here are its operator hooks: the listings pipelines behind the
batch commands, and for the local runtime the provider stubs (`ops/stubs`) and each club job's event
signing secrets, seeded with the two halves of one Ed25519 pair (its own) instead of random text.
"""

from __future__ import annotations

from collections.abc import Callable

from jobfence_ops.app import Batches, LocalHooks
from jobs.club.catalog import SIGNING_KEY_PREFIX, VERIFY_KEY_PREFIX
from jobs.club.signing import KeyPair, new_key_pair
from jobs.listings.catalog import TOLERATED_FAILURE_PCT
from jobs.listings.pipelines import BATCHES_TABLE, GENERATION, ITEMS_TABLE, PIPELINES
from jobs.listings.stores import build_store, build_wakeups

BATCHES = Batches(
    pipelines=PIPELINES,
    items_table=ITEMS_TABLE,
    batches_table=BATCHES_TABLE,
    build_store=build_store,
    build_wakeups=build_wakeups,
    tolerated_failure_pct=TOLERATED_FAILURE_PCT,
    default_kind=GENERATION,
)


def signing_secret_values() -> Callable[[str], str | None]:
    """A seeder for one runtime: a job's signing and verify secrets get the two halves of the same pair."""
    pairs: dict[str, KeyPair] = {}

    def value(logical: str) -> str | None:
        for prefix, half in ((SIGNING_KEY_PREFIX, "signing_value"), (VERIFY_KEY_PREFIX, "verify_value")):
            if logical.startswith(prefix):
                return str(getattr(pairs.setdefault(logical[len(prefix) :], new_key_pair()), half))
        return None

    return value


LOCAL = LocalHooks(stubs="ops.stubs", secret_values=signing_secret_values)
