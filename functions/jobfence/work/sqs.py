"""The SQS adapter of the wake-up port (`jobfence.work.wakeups.Wakeups`): what a pipeline's producer, worker and
reclaimer send item keys through, on the SQS client of the session the caller gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobfence.work.keys import SEND_CHUNK, ItemKey

MAX_DELAY_S = 900  # SQS's DelaySeconds limit


class SqsWakeups:
    """Wake-ups on the SQS queue at `queue_url`, sent through `client` (an SQS client), 10 to a SendMessageBatch.

    Each carries its tenant as `MessageGroupId`. On a standard queue that makes
    it a fair queue: when one tenant has a backlog, SQS delivers the other
    tenants' messages ahead of it (ordering and deduplication stay those of a
    standard queue). The per-tenant in-flight cap is `jobfence.work.fairness`.
    """

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        """Send one wake-up per key, each delayed `delay_s` seconds (cut to SQS's 0..900); return the keys not sent.

        An error of a whole request counts its ten keys as not sent (the item rows stay the truth: the
        caller decides, and the reclaimer re-sends a pending item's wake-up); nothing is raised.
        """
        failed: list[ItemKey] = []
        for start in range(0, len(keys), SEND_CHUNK):
            chunk = list(keys[start : start + SEND_CHUNK])
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": key.body(),
                    "MessageGroupId": key.tenant,
                    "DelaySeconds": max(0, min(int(delay_s), MAX_DELAY_S)),
                }
                for i, key in enumerate(chunk)
            ]
            try:
                out = self._client.send_message_batch(QueueUrl=self._url, Entries=entries)
            except Exception:  # noqa: BLE001 - the caller decides; the rows stay the truth
                failed += chunk
                continue
            failed += [chunk[int(f["Id"])] for f in out.get("Failed", [])]
        return failed
