"""The Discord port: the five REST calls the Discord worker makes, a real adapter and an offline fake.

Only the Discord worker builds a `DiscordRest` (it is the only function given
the bot token). The adapter reads the token on use (`TokenSource`, backed by
the Secrets port with its max age) and, after a 401, re-reads it once without
the cache and retries that call once: a rotated token is picked up at once, a
revoked one fails as `DiscordRejected(401)`. Errors are split by what the caller should do:
`DiscordRateLimited` (retry after `retry_after_s`), `DiscordUnavailable`
(transient: retry later) and `DiscordRejected` (Discord refused the request
itself: retrying will not help).

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
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from jobfence.errors import JobfenceError

USER_AGENT = "DiscordBot (https://github.com/jobfence/jobfence, 1.0)"
DEFAULT_TIMEOUT_S = 10.0
MAX_ERROR_BODY = 200
DISCORD_NONCE_LENGTH = 25  # Discord's limit for a message nonce
UNAUTHORIZED = 401

TokenSource = Callable[[bool], str]  # token(fresh): the bot token; fresh=True skips any cache


class DiscordError(JobfenceError):
    """A Discord call did not succeed."""


class DiscordRateLimited(DiscordError):
    """429: try again after `retry_after_s` seconds."""

    def __init__(self, retry_after_s: float, scope: str = "route") -> None:
        self.retry_after_s = retry_after_s
        super().__init__(f"rate limited ({scope}) for {retry_after_s:.3f}s")


class DiscordUnavailable(DiscordError):
    """A network error or a 5xx: transient."""


class DiscordRejected(DiscordError):
    """A 4xx other than 429: the request itself is wrong (unknown member, missing permission, ...)."""

    def __init__(self, status: int, code: Any = None) -> None:
        self.status = status
        self.code = code
        super().__init__(f"Discord refused the request: HTTP {status}" + (f" code {code}" if code is not None else ""))


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
    """The real adapter: Discord REST v10 with a bot token (stdlib HTTP, no extra dependency)."""

    def __init__(self, base_url: str, token: str | TokenSource, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if isinstance(token, str):
            if not token:
                raise ValueError("a Discord bot token is required")
            fixed = token
            token = lambda fresh: fixed  # noqa: E731 - a fixed token (tests, tools): nothing to re-read
        self._base = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout_s

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
        except DiscordRejected as exc:
            if exc.status != UNAUTHORIZED:
                raise
        # A 401 was not applied: the token may have been rotated since we cached it. Re-read it once.
        return self._send(method, path, body, self._token(True))

    def _send(self, method: str, path: str, body: dict[str, Any] | None, token: str) -> dict[str, Any]:
        if not token:
            raise DiscordRejected(UNAUTHORIZED, "empty bot token")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self._base + path, data=data, method=method)
        request.add_header("Authorization", f"Bot {token}")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(exc) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise DiscordUnavailable(f"Discord is unreachable: {type(exc).__name__}") from None
        return json.loads(raw) if raw else {}


def _message(content: str, nonce: str | None = None) -> dict[str, Any]:
    # Never let event text ping @everyone or roles.
    body: dict[str, Any] = {"content": content, "allowed_mentions": {"parse": []}}
    if nonce is not None:
        body["nonce"] = nonce
        body["enforce_nonce"] = True
    return body


def _http_error(exc: urllib.error.HTTPError) -> DiscordError:
    try:
        body = json.loads(exc.read()[:4096] or b"{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    if exc.code == 429:
        retry_after = body.get("retry_after", exc.headers.get("Retry-After", 1))
        try:
            seconds = max(float(retry_after), 0.0)
        except (TypeError, ValueError):
            seconds = 1.0
        return DiscordRateLimited(seconds, "global" if body.get("global") else "route")
    if exc.code >= 500:
        return DiscordUnavailable(f"Discord answered HTTP {exc.code}")
    return DiscordRejected(exc.code, body.get("code"))


@dataclass
class FakeDiscord:
    """Offline fake with Discord's state: member roles, channel messages, DMs.

    Role PUT/DELETE are idempotent as in Discord; a post with a nonce already
    posted in that channel returns the first message (Discord's `enforce_nonce`;
    `forget_nonces()` models its window running out); `rate_limit_next(n, s)` makes
    the next n calls raise `DiscordRateLimited(s)` without changing anything;
    `lose_reply_next(n)` makes the next n calls act and then raise
    `DiscordUnavailable` (the answer was lost).
    """

    roles: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    messages: dict[str, dict[str, str]] = field(default_factory=dict)  # channel -> message id -> content
    direct: dict[str, list[str]] = field(default_factory=dict)  # user -> contents
    calls: list[tuple[str, ...]] = field(default_factory=list)
    nonces: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, nonce) -> message id
    _limited: list[float] = field(default_factory=list)
    _lost: int = 0
    _next_id: int = 900_000_000_000_000_000
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_message(self, channel_id: str, message_id: str, content: str = "") -> None:
        """An existing message (so it can be edited)."""
        self.messages.setdefault(channel_id, {})[message_id] = content

    def rate_limit_next(self, n: int, retry_after_s: float) -> None:
        self._limited.extend([retry_after_s] * n)

    def lose_reply_next(self, n: int = 1) -> None:
        self._lost += n

    def forget_nonces(self) -> None:
        """Discord's nonce window ran out: a repeat now creates a new message."""
        with self._lock:
            self.nonces.clear()

    def effects(self) -> int:
        """Calls that changed something visible to people (posts and DMs that created a message)."""
        return sum(1 for c in self.calls if c[0] in ("post_message", "send_direct"))

    def _enter(self, *call: str) -> None:
        if self._limited:
            raise DiscordRateLimited(self._limited.pop(0))
        self.calls.append(call)

    def _leave(self) -> None:
        if self._lost:
            self._lost -= 1
            raise DiscordUnavailable("Discord's answer was lost")

    def add_role(self, guild_id: str, user_id: str, role_id: str) -> None:
        with self._lock:
            self._enter("add_role", guild_id, user_id, role_id)
            self.roles.setdefault((guild_id, user_id), set()).add(role_id)
            self._leave()

    def remove_role(self, guild_id: str, user_id: str, role_id: str) -> None:
        with self._lock:
            self._enter("remove_role", guild_id, user_id, role_id)
            self.roles.setdefault((guild_id, user_id), set()).discard(role_id)
            self._leave()

    def post_message(self, channel_id: str, content: str, nonce: str | None = None) -> str:
        with self._lock:
            if nonce is not None and (channel_id, nonce) in self.nonces:
                self._enter("post_message_deduplicated", channel_id, content)
                message_id = self.nonces[(channel_id, nonce)]
            else:
                self._enter("post_message", channel_id, content)
                self._next_id += 1
                message_id = str(self._next_id)
                self.messages.setdefault(channel_id, {})[message_id] = content
                if nonce is not None:
                    self.nonces[(channel_id, nonce)] = message_id
            self._leave()
            return message_id

    def edit_message(self, channel_id: str, message_id: str, content: str) -> None:
        with self._lock:
            self._enter("edit_message", channel_id, message_id, content)
            if message_id not in self.messages.get(channel_id, {}):
                raise DiscordRejected(404, 10008)  # Unknown Message
            self.messages[channel_id][message_id] = content
            self._leave()

    def send_direct(self, user_id: str, content: str, nonce: str | None = None) -> str:
        with self._lock:
            channel = f"dm-{user_id}"
            if nonce is not None and (channel, nonce) in self.nonces:
                self._enter("send_direct_deduplicated", user_id, content)
                message_id = self.nonces[(channel, nonce)]
            else:
                self._enter("send_direct", user_id, content)
                self.direct.setdefault(user_id, []).append(content)
                self._next_id += 1
                message_id = str(self._next_id)
                if nonce is not None:
                    self.nonces[(channel, nonce)] = message_id
            self._leave()
            return message_id
