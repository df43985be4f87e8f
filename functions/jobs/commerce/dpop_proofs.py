"""Store of the shared DPoP replay record (`dpop_proofs`): one row per proof id (jti).

A proof is recorded when first seen; a second sight of the same jti before it
expires is a replay. Expired rows are dead weight that `clean_dpop_proofs`
deletes through the expiry index; readers ignore them meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import aws_call, get_row, put_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live


class _DpopProof(Model):
    class Meta:
        table_name = "unbound"

    jti = UnicodeAttribute(hash_key=True)
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute()
    ttl = NumberAttribute()
    by_expiry = expiry_index()


class DpopProofStore(ModelStore):
    """Record proofs, detect replays (live rows only), delete expired rows."""

    _model_class = _DpopProof

    def record(self, jti: str, expires_at: int) -> bool:
        """Record a first sight of `jti`; False if a live row says it is a replay."""
        now = self._clock.now_ms()
        row = self._row(jti, expires_at)
        # a row that has expired but not yet been deleted does not count as seen
        fresh = self._model.jti.does_not_exist() | (self._model.expires_at <= now)
        return put_row(row, fresh, "recording a DPoP proof").applied

    def load(self, proofs: Iterable[tuple[str, int]]) -> int:
        """Bulk-load (jti, expires_at) rows unconditionally (seeding a demo or a simulation); how many."""
        count = 0
        with aws_call("bulk-loading DPoP proofs"), self._model.batch_write() as batch:
            for jti, expires_at in proofs:
                batch.save(self._row(jti, expires_at))
                count += 1
        return count

    def _row(self, jti: str, expires_at: int) -> Any:
        return self._model(jti, expires_at=expires_at, expiry_shard=expiry_shard(jti), ttl=ttl_seconds(expires_at))

    def seen(self, jti: str) -> bool:
        """True if a live row for `jti` exists (live expiry: expired rows are not seen)."""
        row = get_row(self._model, jti, what="reading a row of dpop_proofs")
        if row is None:
            return False
        return is_live(row, self._clock.now_ms())

    def delete_expired(self, limit: int) -> int:
        """Delete up to `limit` expired rows; return how many were deleted.

        Unconditional BatchWriteItem deletes (40 requests per 1,000 rows instead of
        1,000): a jti is a random per-proof id, so the only way a row re-appears
        between the index query and the delete is a replay of an already expired
        proof, which the API rejects on the proof's own issue time anyway.
        """
        now = self._clock.now_ms()
        rows = list(expired(self._model, now, limit))
        with aws_call("deleting expired DPoP proofs"), self._model.batch_write() as batch:
            for row in rows:
                batch.delete(self._model(row.jti))
        return len(rows)
