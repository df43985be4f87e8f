"""The offline fake of the Discord port (`providers.discord`): Discord's state and its nonces, in memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from providers.errors import ProviderAmbiguous, ProviderRejected, ProviderThrottled


@dataclass
class FakeDiscord:
    """Offline fake with Discord's state: member roles, channel messages, DMs.

    Role PUT/DELETE are idempotent as in Discord; a post with a nonce already
    posted in that channel returns the first message (Discord's `enforce_nonce`;
    `forget_nonces()` models its window running out); `rate_limit_next(n, s)` makes
    the next n calls raise `ProviderThrottled(s)` without changing anything;
    `lose_reply_next(n)` makes the next n calls act and then raise
    `ProviderAmbiguous` (the answer was lost).
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
            raise ProviderThrottled(self._limited.pop(0), provider="discord")
        self.calls.append(call)

    def _leave(self) -> None:
        if self._lost:
            self._lost -= 1
            raise ProviderAmbiguous("discord: its answer was lost", provider="discord")

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
                raise ProviderRejected(
                    "discord: HTTP 404 10008", provider="discord", status=404, code=10008
                )  # Unknown Message
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
