"""Wake-ups: SQS messages that carry only an item's keys (the item row is the truth).

This is the port; its SQS adapter is `jobfence.work.sqs.SqsWakeups`. A test may give any object with this
`send` (one that records the keys, or drops some to play a lost wake-up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from jobfence.work.keys import ItemKey


class Wakeups(Protocol):
    """Where wake-up messages go (one queue per pipeline)."""

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        """Send one wake-up per key; return the keys that could not be sent."""
        ...
