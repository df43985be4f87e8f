"""The signed Discord event contract shared by the club jobs, manual changes and the Discord worker.

An event is `{"type", "nonce", "issued_at", "payload", "signature"}`. The
signature is HMAC-SHA256 (hex) over the canonical form of the first four
fields: compact JSON with sorted keys, UTF-8. The nonce is the end-to-end
idempotency key: a job derives it from the record change it stands for, so a
re-sent event (after a crash between send and outbox delete) carries the same
nonce and the worker drops it as a replay. `issued_at` is set when the event is
signed (at send time), so freshness measures time on the queue, not in the outbox.

    job ─ save change + outbox row (one fenced transaction)
        ─ sign (issued_at = now) ─► queue ─► worker: verify signature ─► fresh? ─► claim nonce ─► Discord
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
from typing import Any, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobfence.clock import Clock
from jobfence.errors import InvalidEvent

MAX_AGE_MS = 60 * 60_000  # covers 429 back-offs and SQS redeliveries up to the receive cap
MAX_SKEW_MS = 60_000  # an event may come from a clock a little ahead of ours
SNOWFLAKE = r"^[0-9]{1,20}$"  # Discord ids are decimal snowflakes; nothing else may reach a URL path
NONCE = r"^[A-Za-z0-9_-]{16,64}$"


class EventType(str, enum.Enum):
    """The Discord changes an event can ask for (the worker maps each to one REST call)."""

    ROLE_ADD = "role_add"
    ROLE_REMOVE = "role_remove"
    MESSAGE_POST = "message_post"
    MESSAGE_EDIT = "message_edit"
    DIRECT_NOTIFICATION = "direct_notification"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoleChange(_Payload):
    """Add or remove one role of one guild member."""

    guild_id: str = Field(pattern=SNOWFLAKE)
    user_id: str = Field(pattern=SNOWFLAKE)
    role_id: str = Field(pattern=SNOWFLAKE)


class MessagePost(_Payload):
    """Post a new message in a channel."""

    channel_id: str = Field(pattern=SNOWFLAKE)
    content: str = Field(min_length=1, max_length=2000)


class MessageEdit(_Payload):
    """Replace the content of an existing message."""

    channel_id: str = Field(pattern=SNOWFLAKE)
    message_id: str = Field(pattern=SNOWFLAKE)
    content: str = Field(min_length=1, max_length=2000)


class DirectNotification(_Payload):
    """A direct message to one user (a member or a staff member)."""

    user_id: str = Field(pattern=SNOWFLAKE)
    content: str = Field(min_length=1, max_length=2000)


Payload = Union[RoleChange, MessagePost, MessageEdit, DirectNotification]

PAYLOAD_MODELS: dict[EventType, type[_Payload]] = {
    EventType.ROLE_ADD: RoleChange,
    EventType.ROLE_REMOVE: RoleChange,
    EventType.MESSAGE_POST: MessagePost,
    EventType.MESSAGE_EDIT: MessageEdit,
    EventType.DIRECT_NOTIFICATION: DirectNotification,
}


class Event(BaseModel):
    """An unsigned event: what a job saves in its outbox."""

    model_config = ConfigDict(frozen=True)

    type: EventType
    nonce: str = Field(pattern=NONCE)
    payload: Payload

    @classmethod
    def build(cls, type: EventType, nonce: str, **payload: Any) -> "Event":
        """A typed event; raises `InvalidEvent` when the payload does not fit the type."""
        try:
            body = PAYLOAD_MODELS[EventType(type)].model_validate(payload)
            return cls(type=type, nonce=nonce, payload=body)
        except (ValidationError, ValueError) as exc:
            raise InvalidEvent(f"invalid {getattr(type, 'value', type)} event: {_describe(exc)}") from None

    def to_json(self) -> str:
        return json.dumps({"type": self.type.value, "nonce": self.nonce, "payload": self.payload.model_dump()})

    @classmethod
    def from_json(cls, text: str) -> "Event":
        data = json.loads(text)
        return cls.build(EventType(data["type"]), data["nonce"], **data["payload"])


class SignedEvent(BaseModel):
    """A verified event as the Discord worker sees it."""

    model_config = ConfigDict(frozen=True)

    type: EventType
    nonce: str
    issued_at: int
    payload: Payload


class RejectReason(str, enum.Enum):
    """Why the worker refused a message; none of these ever reaches Discord."""

    MALFORMED = "malformed"  # not JSON, or not the event shape
    FORGED = "forged"  # the signature does not match the canonical form
    STALE = "stale"  # issued too long ago (or too far in the future)
    REPLAYED = "replayed"  # the nonce was already claimed by another delivery


class EventRejected(InvalidEvent):
    """A message the worker will not act on, with the reason."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason.value}: {detail}")


def nonce_for(*parts: Any) -> str:
    """A deterministic nonce for one record change (so a re-sent event is recognised as the same)."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def canonical(type: str, nonce: str, issued_at: int, payload: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: compact, key-sorted JSON of the four signed fields."""
    body = {"type": type, "nonce": nonce, "issued_at": issued_at, "payload": payload}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class Signer:
    """Signs events at send time with the shared signing key."""

    def __init__(self, key: bytes, clock: Clock) -> None:
        if len(key) < 32:
            raise ValueError("the event signing key must be at least 32 bytes")
        self._key = key
        self._clock = clock

    def sign(self, event: Event) -> str:
        """The message body of `event`, issued now and signed."""
        issued_at = self._clock.now_ms()
        payload = event.payload.model_dump()
        signature = _mac(self._key, canonical(event.type.value, event.nonce, issued_at, payload))
        return json.dumps(
            {"type": event.type.value, "nonce": event.nonce, "issued_at": issued_at, "payload": payload, "signature": signature}
        )


class Verifier:
    """Checks a message body: shape, signature, freshness, then the typed payload."""

    def __init__(self, key: bytes, clock: Clock, max_age_ms: int = MAX_AGE_MS) -> None:
        self._key = key
        self._clock = clock
        self._max_age = max_age_ms

    def verify(self, body: str) -> SignedEvent:
        """The verified event, or `EventRejected` (malformed, forged or stale)."""
        try:
            data = json.loads(body)
        except (TypeError, ValueError):
            raise EventRejected(RejectReason.MALFORMED, "body is not JSON") from None
        if not isinstance(data, dict) or set(data) != {"type", "nonce", "issued_at", "payload", "signature"}:
            keys = sorted(str(k) for k in data)[:8] if isinstance(data, dict) else type(data).__name__
            raise EventRejected(RejectReason.MALFORMED, f"expected type, nonce, issued_at, payload, signature; got {keys}")
        type_, nonce, issued_at, payload, signature = (data[k] for k in ("type", "nonce", "issued_at", "payload", "signature"))
        if not (isinstance(type_, str) and isinstance(nonce, str) and isinstance(signature, str)
                and isinstance(issued_at, int) and not isinstance(issued_at, bool) and isinstance(payload, dict)):
            raise EventRejected(RejectReason.MALFORMED, "a field has the wrong JSON type")
        expected = _mac(self._key, canonical(type_, nonce, issued_at, payload))
        if not hmac.compare_digest(expected, signature):
            raise EventRejected(RejectReason.FORGED, "signature does not match")
        now = self._clock.now_ms()
        if issued_at < now - self._max_age or issued_at > now + MAX_SKEW_MS:
            raise EventRejected(RejectReason.STALE, f"issued {now - issued_at} ms ago; accepted window is {self._max_age} ms")
        try:
            event = Event.build(EventType(type_), nonce, **payload)
        except (InvalidEvent, ValueError) as exc:
            raise EventRejected(RejectReason.MALFORMED, str(exc)) from None
        return SignedEvent(type=event.type, nonce=event.nonce, issued_at=issued_at, payload=event.payload)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in exc.errors()[:5])
    return str(exc)
