"""The one HTTP client of the real adapters, and the one mapping of HTTP statuses to provider errors.

`HttpClient` sends one request over a urllib3 pool (the client botocore itself
uses, so the runtime already has it; connections are reused across calls of a
warm function). It never retries on its own: a retry is the adapter's decision,
because only the adapter knows whether its call carries an idempotency key.
A network error becomes `ProviderUnavailable` when the request cannot have
reached the provider (no connection) and `ProviderAmbiguous` when it may have
(a read timeout, a connection dropped mid-answer).

`status_error` is the single mapping from an answer's status to the error
vocabulary (`providers.errors`):

    401, 403          ProviderAuthFailed   (an adapter that can refresh its token does so once first)
    408, 5xx          ProviderAmbiguous    (the provider may have acted)
    409, 425          ProviderUnavailable  (a concurrent request with the same key, too early: come back)
    429               ProviderThrottled    (Retry-After, or the adapter's own reading of the body)
    other 4xx         ProviderRejected     (the request itself is wrong)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3

from providers.errors import (
    ProviderAmbiguous,
    ProviderAuthFailed,
    ProviderError,
    ProviderRejected,
    ProviderThrottled,
    ProviderUnavailable,
)

CONNECT_TIMEOUT_S = 3.0
DEFAULT_TIMEOUT_S = 10.0
MAX_BODY = 1 << 20  # an answer larger than this is refused (a provider's answers here are small)
_NOT_SENT = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)
_AUTH = (401, 403)
_COME_BACK = (409, 425)


@dataclass(frozen=True)
class HttpAnswer:
    """What the provider answered: its status, body and headers (lower-case names)."""

    status: int
    body: bytes
    headers: Mapping[str, str]

    def json(self, provider: str) -> dict[str, Any]:
        """The body as a JSON object (empty body: {}); a provider answer that is not one is a ProviderError."""
        try:
            data = json.loads(self.body or b"{}")
        except ValueError:
            raise ProviderError(f"{provider}: answer is not JSON", provider=provider, status=self.status) from None
        if not isinstance(data, dict):
            raise ProviderError(f"{provider}: answer is not a JSON object", provider=provider, status=self.status)
        return data

    def json_or_empty(self) -> dict[str, Any]:
        """The body as a JSON object when it is one, else {} (error bodies are read for codes only)."""
        try:
            data = json.loads(self.body[:4096] or b"{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


class HttpClient:
    """One provider's HTTP: `send` returns any answer, `call` raises `status_error` for a status >= 400."""

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        pool: urllib3.PoolManager | None = None,
    ) -> None:
        self.provider = provider
        self._base = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._pool = pool or urllib3.PoolManager(retries=False)

    def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> HttpAnswer:
        """One request; network errors as `ProviderUnavailable` (not sent) or `ProviderAmbiguous` (maybe acted)."""
        read = self._timeout_s if timeout_s is None else timeout_s
        timeout = urllib3.Timeout(connect=min(CONNECT_TIMEOUT_S, read), read=read)
        try:
            response = self._pool.request(
                method, self._base + path, body=body, headers=dict(headers or {}), timeout=timeout, retries=False
            )
        except _NOT_SENT as exc:
            raise ProviderUnavailable(
                f"{self.provider}: unreachable ({type(exc).__name__})", provider=self.provider
            ) from None
        except urllib3.exceptions.ReadTimeoutError:
            raise ProviderAmbiguous(f"{self.provider}: no answer within {read:g} s", provider=self.provider) from None
        except urllib3.exceptions.HTTPError as exc:  # dropped mid-request or mid-answer: it may have acted
            raise ProviderAmbiguous(
                f"{self.provider}: connection lost ({type(exc).__name__})", provider=self.provider
            ) from None
        data = response.data or b""
        if len(data) > MAX_BODY:
            raise ProviderAmbiguous(f"{self.provider}: answer over {MAX_BODY} bytes", provider=self.provider)
        return HttpAnswer(response.status, data, {k.lower(): v for k, v in response.headers.items()})

    def call(
        self,
        method: str,
        path: str,
        *,
        payload: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """A JSON request whose answer is a JSON object; any status >= 400 raises `status_error`."""
        sent = dict(headers or {})
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            sent.setdefault("Content-Type", "application/json")
        answer = self.send(method, path, body=body, headers=sent, timeout_s=timeout_s)
        if answer.status >= 400:
            raise status_error(self.provider, answer)
        return answer.json(self.provider)


def status_error(
    provider: str, answer: HttpAnswer, *, code: Any = None, retry_after_s: float | None = None, detail: str = ""
) -> ProviderError:
    """The error for an answer with a status >= 400: the one mapping (see the module's table).

    `code`: the provider's own error code, read from its body by the adapter; `retry_after_s`: the adapter's
    reading of a 429 (else the Retry-After header, else 1 s); `detail`: words for the message (no payload).
    """
    status = answer.status
    said = (
        f"{provider}: HTTP {status}" + (f" {code}" if code not in (None, "") else "") + (f" {detail}" if detail else "")
    )
    if status == 429:
        seconds = retry_after_s if retry_after_s is not None else _seconds(answer.headers.get("retry-after"))
        return ProviderThrottled(seconds, provider=provider)
    if status in _AUTH:
        return ProviderAuthFailed(said, provider=provider, status=status, code=code)
    if status == 408 or status >= 500:
        return ProviderAmbiguous(said, provider=provider, status=status, code=code)
    if status in _COME_BACK:
        return ProviderUnavailable(said, provider=provider, status=status, code=code)
    return ProviderRejected(said, provider=provider, status=status, code=code)


def _seconds(value: Any, default: float = 1.0) -> float:
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return default
