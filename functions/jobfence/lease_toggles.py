"""The rule's enable/disable toggles, recorded on each job's lease item: the lease store's, beside `jobfence.lease`.

The leases table is written by the lease store alone: the terms by
`jobfence.lease`, and here the attributes no term write reads or removes. The
toggles live on the job's lease item (`rule_toggles`: a map from the
zero-padded epoch ms of each toggle to "enabled" or "disabled"); writing a map
key is idempotent, so a re-sent toggle record is harmless. Beside them, when
the deployer recorded it, `rule_created_at`: when the rule came to exist. No
tick before it was expected, so a reader starts its ledger there, never
earlier (`RuleHistory.clip`); without the record a ledger starts where asked.
The run ledger (`jobfence.ledger`) labels ticks `disabled` from them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobfence.dynamo import deserialized, raise_store_error, retry_transient, write
from jobfence.errors import ErrorKind, StoreError
from jobfence.ledger import Toggle, enabled_at

MAX_TOGGLES = 10  # kept per job on its lease item (oldest dropped): ~260 bytes, so a lease write stays 1 WCU
TOGGLES_ATTRIBUTE = "rule_toggles"
CREATED_ATTRIBUTE = "rule_created_at"
BATCH_ROUNDS = 5  # BatchGetItem calls for one batch of keys, its unprocessed keys asked again


@dataclass(frozen=True)
class RuleHistory:
    """A job's recorded rule toggles, and when its rule was created (None: not recorded)."""

    toggles: tuple[Toggle, ...]
    created_at: int | None = None

    def clip(self, since_ms: int) -> int:
        """`since_ms`, moved up to the rule's creation: ticks from before the rule existed were never expected."""
        return since_ms if self.created_at is None else max(since_ms, self.created_at)


class RuleToggles:
    """Each enable/disable of a job's rule, recorded on its lease item (see the module docstring)."""

    def __init__(self, client: Any, leases_table: str) -> None:
        self._client = client
        self._table = leases_table

    def record(self, job: str, enabled: bool, at_ms: int) -> None:
        """Record one toggle. Both writes are idempotent: a re-sent copy sets the same key again."""
        key = {"job": {"S": job}}
        names = {"#t": TOGGLES_ATTRIBUTE}
        doing = f"recording the rule toggle of {job!r}"
        # a map key can only be set inside an existing map: make sure it is there first
        self._update(
            doing,
            Key=key,
            UpdateExpression="SET #t = if_not_exists(#t, :empty)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={":empty": {"M": {}}},
        )
        out = self._update(
            doing,
            Key=key,
            UpdateExpression="SET #t.#at = :state",
            ExpressionAttributeNames={**names, "#at": f"{at_ms:015d}"},
            ExpressionAttributeValues={":state": {"S": "enabled" if enabled else "disabled"}},
            ReturnValues="ALL_NEW",
        )  # UPDATED_NEW holds only the key set
        kept = sorted(out.get(TOGGLES_ATTRIBUTE) or {})
        if len(kept) > MAX_TOGGLES:  # drop the oldest; removing a missing key is harmless, so a retry is too
            old = {f"#o{i}": k for i, k in enumerate(kept[: len(kept) - MAX_TOGGLES])}
            self._update(
                doing,
                Key=key,
                UpdateExpression="REMOVE " + ", ".join(f"#t.{n}" for n in old),
                ExpressionAttributeNames={**names, **old},
            )

    def record_created(self, job: str, at_ms: int) -> None:
        """Record when the job's rule was created (the deployer's call); the first record stands, so a retry is harmless."""
        self._update(
            f"recording the rule creation of {job!r}",
            Key={"job": {"S": job}},
            UpdateExpression="SET #c = if_not_exists(#c, :at)",
            ExpressionAttributeNames={"#c": CREATED_ATTRIBUTE},
            ExpressionAttributeValues={":at": {"N": str(at_ms)}},
        )

    def _update(self, doing: str, **request: Any) -> dict[str, Any]:
        """One unconditional UpdateItem of a lease item (`jobfence.dynamo.write`): the attributes it returned."""
        return write(self._client, "update_item", {"TableName": self._table, **request}, doing).item

    def history(self, job: str) -> RuleHistory:
        """The job's recorded toggles, oldest first, and its rule's creation (one strongly consistent read)."""
        try:
            item = retry_transient(
                lambda: self._client.get_item(
                    TableName=self._table,
                    Key={"job": {"S": job}},
                    ConsistentRead=True,
                    ProjectionExpression="#t, #c",
                    ExpressionAttributeNames={"#t": TOGGLES_ATTRIBUTE, "#c": CREATED_ATTRIBUTE},
                )
            ).get("Item", {})
        except Exception as exc:
            raise_store_error(exc, f"reading the rule toggles of {job!r}")
        return _history_of(item)

    def histories(self, jobs: Sequence[str]) -> dict[str, RuleHistory]:
        """Each job's `history`, read together: strongly consistent BatchGetItems of at most 100 keys.

        Keys DynamoDB leaves unprocessed (throttling) are asked again, at most
        `BATCH_ROUNDS` times in all, then it is a `StoreError`.
        """
        out: dict[str, RuleHistory] = {}
        names = {"#t": TOGGLES_ATTRIBUTE, "#c": CREATED_ATTRIBUTE, "#j": "job"}
        for start in range(0, len(jobs), 100):
            keys: list[dict[str, Any]] = [{"job": {"S": job}} for job in jobs[start : start + 100]]
            for _ in range(BATCH_ROUNDS):
                asked = {
                    self._table: {
                        "Keys": keys,
                        "ConsistentRead": True,
                        "ProjectionExpression": "#j, #t, #c",
                        "ExpressionAttributeNames": names,
                    }
                }
                try:
                    answer = retry_transient(functools.partial(self._client.batch_get_item, RequestItems=asked))
                except Exception as exc:
                    raise_store_error(exc, f"reading the rule toggles of {len(keys)} jobs")
                for item in answer.get("Responses", {}).get(self._table, []):
                    out[deserialized(item)["job"]] = _history_of(item)
                keys = answer.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
                if not keys:
                    break
            else:
                raise StoreError(
                    f"reading the rule toggles failed: {len(keys)} keys unprocessed after {BATCH_ROUNDS} rounds",
                    ErrorKind.THROTTLED,
                )
        return {job: out.get(job, RuleHistory((), None)) for job in jobs}

    def read(self, job: str) -> tuple[Toggle, ...]:
        """The job's recorded toggles, oldest first (strongly consistent)."""
        return self.history(job).toggles

    def seen(self, job: str, enabled: bool, at_ms: int) -> bool:
        """The rule was found in this state (a deploy or the console changed it): record it if the record disagrees."""
        if enabled_at(self.read(job), at_ms + 1) == enabled:  # the state after at_ms, its own toggles included
            return False
        self.record(job, enabled, at_ms)
        return True


def _history_of(raw: Mapping[str, Any]) -> RuleHistory:
    """A lease item's toggles and rule creation (a low-level item, read by `jobfence.dynamo.deserialized`)."""
    item = deserialized(raw)
    toggles = tuple(
        Toggle(int(at), state == "enabled") for at, state in sorted((item.get(TOGGLES_ATTRIBUTE) or {}).items())
    )
    created = item.get(CREATED_ATTRIBUTE)
    return RuleHistory(toggles, None if created is None else int(created))
