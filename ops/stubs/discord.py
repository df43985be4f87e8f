"""A loopback stub of the Discord REST endpoints the Discord worker calls.

    stub = DiscordStub(token="local-bot-token")
    base_url = stub.start()          # e.g. http://127.0.0.1:54321/api/v10 -> PROVIDER_DISCORD_URL
    stub.rate_limit(2, retry_after=1.5)   # the next two requests answer 429
    ...
    stub.stop()

Routes (bot token required, as `Authorization: Bot <token>`):
PUT/DELETE /guilds/{guild}/members/{user}/roles/{role} -> 204,
POST /channels/{channel}/messages -> 200 {id, channel_id, content} (with `nonce` and
`enforce_nonce: true`, a repeat in that channel within the nonce window returns the
first message instead of creating one, as Discord does),
PATCH /channels/{channel}/messages/{id} -> 200 (404 code 10008 if unknown),
POST /users/@me/channels {recipient_id} -> 200 {id, type: 1, recipients}.
State is kept in memory and readable through `roles`, `messages`, `requests`,
`created` (messages actually created); `lose_replies(n)` makes the next n requests
act and then drop the connection without an answer (a lost reply).

The local runtime calls `start_local(clock)`: a stub with a fresh bot token,
its base URL, and that token as the value of the `discord_token` secret, so
the real adapter in the Discord worker authenticates against the stub.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from typing import Any

from jobfence.clock import Clock, SystemClock
from ops.stubs.server import LoopbackStub, QuietHandler

API_PREFIX = "/api/v10"
SECRETS = ("discord_token",)  # the secret whose value is the stub's bot token
ROLE = re.compile(r"^/guilds/(\d+)/members/(\d+)/roles/(\d+)$")
MESSAGES = re.compile(r"^/channels/(\d+)/messages$")
MESSAGE = re.compile(r"^/channels/(\d+)/messages/(\d+)$")
DM_CHANNELS = "/users/@me/channels"
# Discord documents the nonce check as covering "the past few minutes" without a number; the stub
# models a conservative two minutes so tests never lean on a longer window than Discord may keep.
NONCE_WINDOW_MS = 120_000


class DropConnection(Exception):
    """The stub acted on the request and will close the connection without answering."""


class DiscordStub(LoopbackStub):
    """Discord's REST API on loopback, in memory."""

    name = "discord"
    url_suffix = API_PREFIX

    def __init__(
        self,
        token: str = "local-bot-token",
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
        nonce_window_ms: int = NONCE_WINDOW_MS,
    ) -> None:
        self.token = token
        self._clock = clock or SystemClock()
        self._nonce_window_ms = nonce_window_ms
        self._nonces: dict[tuple[str, str], tuple[str, int]] = {}  # (channel, nonce) -> (message id, created at)
        self._lose = 0
        self._lose_route = ""
        self.created: list[tuple[str, str]] = []  # (channel, message id) of every message created
        self._address = (host, port)
        self._lock = threading.Lock()
        self._next_id = 1_200_000_000_000_000_000
        self._limited: list[float] = []
        self.roles: dict[tuple[str, str], set[str]] = {}
        self.messages: dict[str, dict[str, str]] = {}  # channel -> message id -> content
        self.dm_channels: dict[str, str] = {}  # user -> channel
        self.requests: list[tuple[str, str]] = []  # (method, path) of every authorised request

    def handler_class(self) -> type[QuietHandler]:
        stub = self

        class Handler(_Handler):
            owner = stub

        return Handler

    def rate_limit(self, count: int = 1, retry_after: float = 1.0) -> None:
        """Answer the next `count` requests with 429 and this retry_after (seconds)."""
        with self._lock:
            self._limited.extend([retry_after] * count)

    def lose_replies(self, count: int = 1, route: str = "") -> None:
        """Act on the next `count` requests (whose route contains `route`), then close without an answer."""
        with self._lock:
            self._lose += count
            self._lose_route = route

    def add_message(self, channel_id: str, content: str = "", message_id: str | None = None) -> str:
        """Seed an existing message (for edits), with a given or a new id; return its id."""
        with self._lock:
            if message_id is None:
                return self._new_message(channel_id, content)
            self.messages.setdefault(channel_id, {})[message_id] = content
            return message_id

    # -- behaviour ------------------------------------------------------------------------

    def _new_message(self, channel_id: str, content: str) -> str:
        self._next_id += 1
        self.messages.setdefault(channel_id, {})[str(self._next_id)] = content
        return str(self._next_id)

    def _post(self, channel: str, content: str, body: dict[str, Any]) -> str:
        """Create a message, or return the one an enforced nonce already created within the window."""
        nonce = body.get("nonce")
        enforced = body.get("enforce_nonce") is True and isinstance(nonce, (str, int)) and len(str(nonce)) <= 25
        now = self._clock.now_ms()
        if enforced:
            seen = self._nonces.get((channel, str(nonce)))
            if seen is not None and now - seen[1] <= self._nonce_window_ms:
                return seen[0]
        message_id = self._new_message(channel, content)
        self.created.append((channel, message_id))
        if enforced:
            self._nonces[(channel, str(nonce))] = (message_id, now)
        return message_id

    def handle(
        self, method: str, path: str, auth: str | None, body: Any
    ) -> tuple[int, dict[str, Any] | None, dict[str, str]]:
        """One request: (status, JSON body or None, extra headers); raises `DropConnection` for a lost reply."""
        answer = self._handle(method, path, auth, body)
        with self._lock:
            if self._lose and answer[0] < 300 and self._lose_route in path:
                self._lose -= 1
                raise DropConnection()
        return answer

    def _handle(
        self, method: str, path: str, auth: str | None, body: Any
    ) -> tuple[int, dict[str, Any] | None, dict[str, str]]:
        with self._lock:
            if auth != f"Bot {self.token}":
                return 401, {"message": "401: Unauthorized", "code": 0}, {}
            if self._limited:
                retry_after = self._limited.pop(0)
                headers = {"Retry-After": str(max(1, int(retry_after + 0.999))), "X-RateLimit-Scope": "user"}
                return (
                    429,
                    {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
                    headers,
                )
            if not path.startswith(API_PREFIX):
                return 404, {"message": "404: Not Found", "code": 0}, {}
            route = path[len(API_PREFIX) :]
            self.requests.append((method, route))
            if match := ROLE.match(route):
                guild, user, role = match.groups()
                if method == "PUT":
                    self.roles.setdefault((guild, user), set()).add(role)
                    return 204, None, {}
                if method == "DELETE":
                    self.roles.setdefault((guild, user), set()).discard(role)
                    return 204, None, {}
            elif (match := MESSAGES.match(route)) and method == "POST":
                channel = match.group(1)
                content = (body or {}).get("content")
                if not isinstance(content, str) or not 0 < len(content) <= 2000:
                    return 400, {"message": "Invalid Form Body", "code": 50035}, {}
                message_id = self._post(channel, content, body or {})
                content = self.messages[channel][message_id]
                return 200, {"id": message_id, "channel_id": channel, "content": content}, {}
            elif (match := MESSAGE.match(route)) and method == "PATCH":
                channel, message_id = match.groups()
                if message_id not in self.messages.get(channel, {}):
                    return 404, {"message": "Unknown Message", "code": 10008}, {}
                self.messages[channel][message_id] = (body or {}).get("content", "")
                return 200, {"id": message_id, "channel_id": channel, "content": self.messages[channel][message_id]}, {}
            elif route == DM_CHANNELS and method == "POST":
                user = str((body or {}).get("recipient_id", ""))
                if not user.isdigit():
                    return 400, {"message": "Invalid Form Body", "code": 50035}, {}
                if user not in self.dm_channels:
                    self._next_id += 1
                    self.dm_channels[user] = str(self._next_id)
                return 200, {"id": self.dm_channels[user], "type": 1, "recipients": [{"id": user}]}, {}
            return 404, {"message": "404: Not Found", "code": 0}, {}

    def direct_messages(self, user_id: str) -> list[str]:
        """Contents sent to a user's DM channel, oldest first."""
        channel = self.dm_channels.get(user_id)
        return list(self.messages.get(channel, {}).values()) if channel else []


def start_local(clock: Any = None) -> tuple[DiscordStub, str, str]:
    """For the local runtime: a running stub, its base URL, and the bot token to store as `discord_token`."""
    stub = DiscordStub(token=secrets.token_hex(24), clock=clock)
    return stub, stub.start(), stub.token


class _Handler(QuietHandler):
    owner: DiscordStub
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        raw = self.read_body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self.reply_json(400, {"message": "400: Bad Request", "code": 50109})
            return
        try:
            status, payload, headers = self.owner.handle(
                self.command, self.path, self.headers.get("Authorization"), body
            )
        except DropConnection:
            self.close_connection = True  # acted on, never answered: the client sees the connection drop
            return
        self.reply_json(status, payload, headers)

    do_GET = do_PUT = do_DELETE = do_POST = do_PATCH = _serve
