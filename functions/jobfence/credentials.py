"""Temporary AWS credentials (an STS session's): what a model bound under `jobfence.binding.bound_with` signs its
requests with. Only the functions that assume a tenant's role make them (`jobfence.tenants`), so only they load
this module (docs/benchmarks.md, "Cold start")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Credentials:
    """Temporary AWS credentials (an STS session's): what a model bound under `bound_with` signs its requests with."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_ms: int  # when STS says they expire (epoch ms)

    def __repr__(self) -> str:  # never the secret in a log line or a traceback
        return f"Credentials(access_key_id={self.access_key_id!r}, expires_ms={self.expires_ms})"
