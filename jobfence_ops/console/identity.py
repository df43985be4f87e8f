"""Who a console request acts as: the console's caller identity, or the user a trusted proxy names.

By default every request acts as the console's own caller identity
(`jobfence_ops.audit.operator_of`: STS for a real account, `local:<login>` for
the local runtime), asked once at start. Started with
`--trusted-proxy-header NAME`, the console sits behind an authenticating proxy
(oauth2-proxy, an ALB with OIDC, ...) that sets that header to the signed-in
user: each request must carry the header exactly once, with a printable
value of at most `MAX_USER` characters, and acts as `proxy:<value>` (its AWS
calls still run as the console's caller, recorded beside it). A request
without it is refused (401) before any page or action runs. Without the flag
the header means nothing: a request that sends it is not believed.

The trust is the proxy's: anyone who can reach the console's port directly
can send any header, so the console listens on 127.0.0.1 only and the proxy
must be the only client there (docs/security.md, "Who acts").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from jobfence.trigger_requests import REQUESTED_BY_PATTERN
from jobfence_ops.audit import Operator, proxied

MAX_USER = 120  # with the prefix, within a run row's requested_by (128)
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")

_requester: ContextVar[Operator | None] = ContextVar("jobfence_console_requester", default=None)


def requester() -> Operator | None:
    """The user the trusted proxy named for this request (None: not behind a proxy)."""
    return _requester.get()


def header_name(text: str) -> str:
    """A header name to trust (letters, digits and '-'), or ValueError."""
    if not HEADER_NAME.fullmatch(text):
        raise ValueError(f"a header name is 1..64 of A-Z a-z 0-9 -, got {text[:64]!r}")
    return text


def proxied_user(values: list[str]) -> str | None:
    """The user one header value names (None: missing, repeated, empty or not printable)."""
    if len(values) != 1:
        return None
    value = values[0].strip()
    if not value or len(value) > MAX_USER or not re.fullmatch(REQUESTED_BY_PATTERN, value):
        return None
    return value


class TrustedProxy:
    """ASGI middleware: each request acts as the user its `header` names; one without it is refused."""

    def __init__(self, app: ASGIApp, header: str, caller: str, refuse: Callable[[str], Response]) -> None:
        self.app = app
        self.header = header_name(header)
        self.caller = caller
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = proxied_user(Headers(scope=scope).getlist(self.header))
        if user is None:
            reason = (
                f"this console acts only for the user its authenticating proxy names in {self.header}: "
                "a request without it (exactly once, printable) is refused"
            )
            await self.refuse(reason)(scope, receive, send)
            return
        token = _requester.set(proxied(user, self.caller))
        try:
            await self.app(scope, receive, send)
        finally:
            _requester.reset(token)
