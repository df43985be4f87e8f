"""A lease term that ended without a release: what the lease item, its refusals and the run rows name.

A leaf of the package (it imports nothing of jobfence), so the errors that carry a term
(`jobfence.errors`) and the lease item's readers (`jobfence.lease_item`) both use it; callers
import it from `jobfence.lease`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """A term that ended without a release: its holder died, or paused past its expiry."""

    job: str
    run_id: str
    holder: str
    fence: int
    acquired_at: int
    expires_at: int
