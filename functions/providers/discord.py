"""The Discord port: the five REST calls the Discord worker makes, and its real adapter (its fake: `providers.discord_fake`).

Only the Discord worker builds a `DiscordRest` (it is the only function given
the bot token). The adapter reads the token on use (`TokenSource`, backed by
the Secrets port with its max age) and, after a 401, re-reads it once without
the cache and retries that call once: a rotated token is picked up at once, a
revoked one fails as `ProviderAuthFailed` (status 401). Errors are the one provider vocabulary
(`providers.errors`): `ProviderThrottled` (retry after `retry_after_s`), `ProviderUnavailable` /
`ProviderAmbiguous` (transient: retry later) and `ProviderRejected` (Discord refused the request
itself, with Discord's own `code`: retrying will not help).

Message posts (channel messages and direct messages) carry Discord's own
idempotency: a `nonce` of at most 25 characters with `enforce_nonce: true`, so
Discord answers a repeat from the same bot with the same nonce, within its
window of a few minutes, with the message it already created instead of a
second one. Role PUT/DELETE are idempotent by nature and an edit converges on
the same content, so those need no nonce.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Protocol

from providers.errors import ProviderAuthFailed, ProviderError, ProviderThrottled
from providers.http import HttpAnswer, HttpClient, status_error

PROVIDER = "discord"
USER_AGENT = "DiscordBot (https://github.com/jobfence/jobfence, 1.0)"
DEFAULT_TIMEOUT_S = 10.0
DISCORD_NONCE_LENGTH = 25  # Discord's limit for a message nonce
UNAUTHORIZED = 401

TokenSource = Callable[[bool], str]  # token(fresh): the bot token; fresh=True skips any cache


def discord_nonce(event_nonce: str) -> str:
    """Discord's message nonce for one of our events: deterministic, within Discord's 25 characters."""
    return hashlib.sha256(event_nonce.encode()).hexdigest()[:DISCORD_NONCE_LENGTH]


class Discord(Protocol):
    """What the Discord worker needs from Discord."""

    def add_role(self, guild_id: str, user_id: str, role_id: str) -> None: ...

    def remove_role(self, guild_id: str, user_id: str, role_id: str) -> None: ...

    def post_message(self, channel_id: str, content: str, nonce: str | None = None) -> str: ...

    def edit_message(self, channel_id: str, message_id: str, content: str) -> None: ...

    def send_direct(self, user_id: str, content: str, nonce: str | None = None) -> str: ...


class DiscordRest:
    """The real adapter: Discord REST v10 with a bot token, over the providers' one HTTP client."""

    def __init__(self, base_url: str, token: str | TokenSource, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if isinstance(token, str):
            if not token:
                raise ValueError("a Discord bot token is required")
            fixed = token
            token = lambda fresh: fixed  # noqa: E731 - a fixed token (tests, tools): nothing to re-read
        self._http = HttpClient(PROVIDER, base_url, timeout_s=timeout_s)
        self._token = token

    def add_role(self, guild_id: str, user_id: str, role_id: str) -> None:
        self._call("PUT", f"/guilds/{guild_id}/members/{user_id}/roles/{role_id}")

    def remove_role(self, guild_id: str, user_id: str, role_id: str) -> None:
        self._call("DELETE", f"/guilds/{guild_id}/members/{user_id}/roles/{role_id}")

    def post_message(self, channel_id: str, content: str, nonce: str | None = None) -> str:
        return str(self._call("POST", f"/channels/{channel_id}/messages", _message(content, nonce))["id"])

    def edit_message(self, channel_id: str, message_id: str, content: str) -> None:
        self._call("PATCH", f"/channels/{channel_id}/messages/{message_id}", _message(content))

    def send_direct(self, user_id: str, content: str, nonce: str | None = None) -> str:
        # opening the DM channel is idempotent (Discord returns the existing one)
        channel = self._call("POST", "/users/@me/channels", {"recipient_id": user_id})
        return self.post_message(str(channel["id"]), content, nonce)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return self._send(method, path, body, self._token(False))
        except ProviderAuthFailed as exc:
            if exc.status != UNAUTHORIZED:
                raise
        # A 401 was not applied: the token may have been rotated since we cached it. Re-read it once.
        return self._send(method, path, body, self._token(True))

    def _send(self, method: str, path: str, body: dict[str, Any] | None, token: str) -> dict[str, Any]:
        if not token:
            raise ProviderAuthFailed(f"{PROVIDER}: empty bot token", provider=PROVIDER, status=UNAUTHORIZED)
        headers = {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        answer = self._http.send(method, path, body=data, headers=headers)
        if answer.status >= 400:
            raise _error(answer)
        return answer.json(PROVIDER)


def _message(content: str, nonce: str | None = None) -> dict[str, Any]:
    # Never let event text ping @everyone or roles.
    body: dict[str, Any] = {"content": content, "allowed_mentions": {"parse": []}}
    if nonce is not None:
        body["nonce"] = nonce
        body["enforce_nonce"] = True
    return body


def _error(answer: HttpAnswer) -> ProviderError:
    """Discord's reading of a refusal: its JSON `code`, and a 429's `retry_after` and `global` flag."""
    body = answer.json_or_empty()
    if answer.status == 429:
        retry_after = body.get("retry_after", answer.headers.get("retry-after", 1))
        try:
            seconds = max(float(retry_after), 0.0)
        except (TypeError, ValueError):
            seconds = 1.0
        return ProviderThrottled(seconds, provider=PROVIDER, scope="global" if body.get("global") else "route")
    return status_error(PROVIDER, answer, code=body.get("code"))
