"""The signed Discord event contract shared by the club jobs, manual changes and the Discord worker.

An event is `{"type", "nonce", "issued_at", "payload", "signer", "kid", "signature"}`.
The signature is Ed25519 (hex) over the canonical form of the first six
fields (compact JSON with sorted keys, UTF-8), by the private key named by
`kid` of the job named by `signer` (see `jobs.club.signing`: each job holds its
own private key, the worker only the public ones, so the worker cannot sign).
The worker looks `kid` up in that signer's keyring only, and then checks the
signer's grant (`jobs.club.signers`): the event types it may ask for and, for a
role change, the guilds; a correctly signed event outside the grant is refused
(`not_allowed`). The nonce is the end-to-end
idempotency key: a job derives it from the record change it stands for, so a
re-sent event (after a crash between send and outbox delete) carries the same
nonce and the worker drops it as a replay. `issued_at` is set when the event is
signed (at send time), so freshness measures time on the queue, not in the outbox.

    job ─ save change + outbox row (one fenced transaction)
        ─ sign (issued_at = now) ─► queue ─► worker: verify signature ─► fresh? ─► allowed? ─► claim nonce ─► Discord

The verifier is the input edge: a body over `MAX_BODY_CHARS` is refused before
parsing, nesting too deep for the parser is malformed (never an escaping
`RecursionError`), and every caller string echoed in an error is truncated.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobfence.clock import Clock
from jobfence.errors import InvalidEvent, bounded

if TYPE_CHECKING:  # annotations only: a job that builds and saves events does not load the keys (nor `cryptography`);
    # what signs or verifies does (`jobs.club.notifications`, the Discord worker, the rotation)
    from jobs.club.signers import SignerGrant
    from jobs.club.signing import SigningKey, VerifyKey

MAX_AGE_MS = 60 * 60_000  # covers 429 back-offs and SQS redeliveries up to the receive cap
MAX_SKEW_MS = 60_000  # an event may come from a clock a little ahead of ours
SNOWFLAKE = r"^[0-9]{1,20}$"  # Discord ids are decimal snowflakes; nothing else may reach a URL path
NONCE = r"^[A-Za-z0-9_-]{16,64}$"
MAX_BODY_CHARS = 64 * 1024  # an event is under 2,000 characters of content; SQS allows 256 KiB
FIELDS = ("type", "nonce", "issued_at", "payload", "signer", "kid", "signature")


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


Payload = RoleChange | MessagePost | MessageEdit | DirectNotification

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
    def build(cls, type: EventType, nonce: str, **payload: Any) -> Event:
        """A typed event; raises `InvalidEvent` when the payload does not fit the type."""
        try:
            body = PAYLOAD_MODELS[EventType(type)].model_validate(payload)
            return cls(type=type, nonce=nonce, payload=body)
        except (ValidationError, ValueError) as exc:
            raise InvalidEvent(f"invalid {getattr(type, 'value', type)} event: {_describe(exc)}") from None

    def to_json(self) -> str:
        return json.dumps({"type": self.type.value, "nonce": self.nonce, "payload": self.payload.model_dump()})

    @classmethod
    def from_json(cls, text: str) -> Event:
        data = json.loads(text)
        return cls.build(EventType(data["type"]), data["nonce"], **data["payload"])


class SignedEvent(BaseModel):
    """A verified event as the Discord worker sees it."""

    model_config = ConfigDict(frozen=True)

    type: EventType
    nonce: str
    issued_at: int
    payload: Payload
    signer: str


class RejectReason(str, enum.Enum):
    """Why the worker refused a message; none of these ever reaches Discord."""

    MALFORMED = "malformed"  # not JSON, or not the event shape
    FORGED = "forged"  # unknown signer, a key id its keyring lacks, or the signature does not match
    NOT_ALLOWED = "not_allowed"  # correctly signed, but the signer may not ask for this type or guild
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


def canonical(type: str, nonce: str, issued_at: int, payload: Mapping[str, Any], signer: str, kid: str) -> bytes:
    """The bytes that are signed: compact, key-sorted JSON of the six signed fields."""
    body = {"type": type, "nonce": nonce, "issued_at": issued_at, "payload": payload, "signer": signer, "kid": kid}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class SigningKeySource(Protocol):
    """Where the signer gets the current private key (read on use, so a rotation reaches it), and whose it is."""

    @property
    def signer(self) -> str: ...

    def current(self) -> SigningKey: ...


class VerifyKeySource(Protocol):
    """Where the verifier finds the public key `kid` of `signer` (`jobs.club.signers.SignerKeyrings`)."""

    def find(self, signer: str, kid: str) -> VerifyKey | None: ...


class Signer:
    """Signs events at send time with the current signing key."""

    def __init__(self, keys: SigningKeySource, clock: Clock) -> None:
        self._keys = keys
        self._clock = clock

    def sign(self, event: Event) -> str:
        """The message body of `event`, issued now and signed."""
        key = self._keys.current()
        signer = self._keys.signer
        issued_at = self._clock.now_ms()
        payload = event.payload.model_dump()
        signature = key.sign(canonical(event.type.value, event.nonce, issued_at, payload, signer, key.kid))
        return json.dumps(
            {
                "type": event.type.value,
                "nonce": event.nonce,
                "issued_at": issued_at,
                "payload": payload,
                "signer": signer,
                "kid": key.kid,
                "signature": signature,
            }
        )


def _parse(body: Any) -> dict[str, Any]:
    if not isinstance(body, str):
        raise EventRejected(RejectReason.MALFORMED, "body is not text")
    if len(body) > MAX_BODY_CHARS:
        raise EventRejected(RejectReason.MALFORMED, f"body is larger than {MAX_BODY_CHARS} characters")
    try:
        data = json.loads(body)
    except RecursionError:
        raise EventRejected(RejectReason.MALFORMED, "body is nested too deeply") from None
    except ValueError:
        raise EventRejected(RejectReason.MALFORMED, "body is not JSON") from None
    if not isinstance(data, dict) or set(data) != set(FIELDS):
        keys = sorted(bounded(k, 32) for k in data)[:8] if isinstance(data, dict) else type(data).__name__
        raise EventRejected(RejectReason.MALFORMED, f"expected {', '.join(FIELDS)}; got {keys}")
    return data


class Verifier:
    """Checks a message body: size, shape, signer and key id, signature, freshness, the typed payload, then the
    signer's grant (`grants`: signer -> `SignerGrant`; a signer without one is unknown)."""

    def __init__(
        self, keys: VerifyKeySource, clock: Clock, grants: Mapping[str, SignerGrant], max_age_ms: int = MAX_AGE_MS
    ) -> None:
        self._keys = keys
        self._clock = clock
        self._grants = dict(grants)
        self._max_age = max_age_ms

    def verify(self, body: str) -> SignedEvent:
        """The verified event, or `EventRejected` (malformed, forged, stale or not allowed); `KeyringBusy`
        (retryable, not a verdict) when the kid is not cached and the keyring may not re-read it yet."""
        data = _parse(body)
        type_, nonce, issued_at, payload, signer, kid, signature = (data[k] for k in FIELDS)
        if not (
            isinstance(type_, str)
            and isinstance(nonce, str)
            and isinstance(signature, str)
            and isinstance(signer, str)
            and isinstance(kid, str)
            and isinstance(issued_at, int)
            and not isinstance(issued_at, bool)
            and isinstance(payload, dict)
        ):
            raise EventRejected(RejectReason.MALFORMED, "a field has the wrong JSON type")
        grant = self._grants.get(signer)
        if grant is None:
            raise EventRejected(RejectReason.FORGED, f"unknown signer {bounded(signer, 64)!r}")
        key = self._keys.find(signer, kid)
        if key is None:
            raise EventRejected(RejectReason.FORGED, f"unknown key id {bounded(kid, 32)!r} of signer {signer!r}")
        try:
            message = canonical(type_, nonce, issued_at, payload, signer, kid)
        except (RecursionError, ValueError):
            raise EventRejected(RejectReason.MALFORMED, "payload cannot be put in canonical form") from None
        if not key.verify(signature, message):
            raise EventRejected(RejectReason.FORGED, "signature does not match")
        now = self._clock.now_ms()
        if issued_at < now - self._max_age or issued_at > now + MAX_SKEW_MS:
            raise EventRejected(
                RejectReason.STALE, f"issued {now - issued_at} ms ago; accepted window is {self._max_age} ms"
            )
        try:
            event = Event.build(EventType(type_), nonce, **payload)
        except (InvalidEvent, ValueError) as exc:
            raise EventRejected(RejectReason.MALFORMED, bounded(str(exc), 300)) from None
        _check_grant(signer, grant, event)
        return SignedEvent(
            type=event.type, nonce=event.nonce, issued_at=issued_at, payload=event.payload, signer=signer
        )


def _check_grant(signer: str, grant: SignerGrant, event: Event) -> None:
    """Refuse a correctly signed event outside its signer's grant (the detail names no payload value)."""
    if not grant.allows_type(event.type.value):
        raise EventRejected(RejectReason.NOT_ALLOWED, f"signer {signer!r} may not send {event.type.value} events")
    guild = getattr(event.payload, "guild_id", None)
    if guild is not None and not grant.allows_guild(guild):
        raise EventRejected(RejectReason.NOT_ALLOWED, f"signer {signer!r} may not change roles in this guild")


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{bounded('.'.join(str(p) for p in e['loc']), 64) or 'payload'}: {bounded(e['msg'], 120)}"
            for e in exc.errors()[:5]
        )
    return bounded(str(exc), 200)
