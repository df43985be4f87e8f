"""What a scheduled job yields: each bounded batch's counts, the last one marked when the job knows it.

The runner (`jobfence.scheduled`) renews the lease before every batch after
the first. A job that knows a batch is its last yields `LastBatch(counts)`, and
the runner ends the run there, without the renew that would have preceded a
next batch (one conditional write saved per run). Kept apart from the runner so
that the stores and sweeps that yield batches load nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class LastBatch(Mapping[str, Any]):
    """A batch's counts (a read-only mapping of them) that say no batch follows: the runner ends the run there.

        yield LastBatch({"deleted": n}) if n < page else {"deleted": n}

    No renew comes first, and code after that `yield` does not run: the runner
    closes the generator.
    """

    def __init__(self, counts: Mapping[str, Any]) -> None:
        self._counts = dict(counts)

    def __getitem__(self, key: str) -> Any:
        return self._counts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __repr__(self) -> str:
        return f"LastBatch({self._counts!r})"
