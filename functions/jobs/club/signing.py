"""Event signing keys: one Ed25519 pair per publishing job, in two secrets, so signing and verifying are
separate rights.

    club_signing_key_<job>   the private key   read by that job only (it signs as <job>)
    club_verify_key_<job>    the public key    read by the Discord worker (it verifies, and cannot sign)

The signing secret's value is the base64 of the raw 32-byte private key. The
verify secret's value is the JSON `{"public_key": <base64 of the raw 32-byte
public key>, "since_ms": <when this version became current>}` as the rotation
writes it (`verify_secret_value`), or the bare base64 (a value set by hand or
by the local runtime: no rotation time known). A key id (`kid`) is the first 16
hex digits of SHA-256 of the public key; every signed event carries the kid of
the key that signed it.

Keys are read on use through the `Secrets` port (cached `max_age_s`), never at
import. Rotation (`jobs.club.rotation`) stores the new public key first, then
the new private key; the worker's keyring holds the verify secret's
`AWSCURRENT` and `AWSPREVIOUS` versions, and when an event names a kid it does
not know it re-reads the secret once (at most every `REFRESH_MIN_MS`; inside
that interval `find` raises `KeyringBusy`, a retryable failure, rather than
judging the kid unknown: an unknown-kid event just before a rotation must not
make the correctly signed event after it look forged; a kid the latest fresh read
lacked is judged unknown at once, since rotation stores the public half before
any job signs with the private one). A version that does not
hold a key (the placeholder CloudFormation created, which the first rotation
leaves as `AWSPREVIOUS`) verifies nothing; it is not an error:

    t0  rotate: verify secret CURRENT=new (since t0), PREVIOUS=old; then signing secret CURRENT=new
    t0..t0+max_age   jobs may still sign with old (cached) -> worker accepts old through PREVIOUS
    t0+             jobs sign with new -> worker's cached keyring lacks new -> fresh read -> CURRENT=new
    t0+GRACE_MS     PREVIOUS is no longer accepted (revocation): an event signed by old is forged

`AWSPREVIOUS` is accepted only while the current version's `since_ms` is less
than `GRACE_MS` ago (never when the current value carries no time), so a
rotated-out key stops verifying `GRACE_MS` after the rotation, on warm and cold
workers alike. `GRACE_MS` is the jobs' secret cache (`DEFAULT_MAX_AGE_S`, 300 s:
the longest a warm job keeps signing with the old key) plus `GRACE_MARGIN_S`
(300 s: the event's time in the queue, a delivery retry and the clock skew
between the rotation function and the worker): 10 minutes. The `revoke` step
(`SigningRotation.revoke`) removes the AWSPREVIOUS stage at once instead; a
warm worker then stops accepting the old key when its cache expires (at most
`max_age_s`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from jobfence.clock import Clock
from jobfence.errors import JobfenceError, SettingsError
from providers.secrets import CURRENT, DEFAULT_MAX_AGE_S, PREVIOUS, SecretMissing, Secrets

KID = re.compile(r"^[0-9a-f]{16}$")
REFRESH_MIN_MS = 10_000  # an unknown kid re-reads the verify secret at most this often (forged kids cannot flood it)
GRACE_MARGIN_S = 300  # queueing, a delivery retry and clock skew, on top of the jobs' secret cache
GRACE_MS = (DEFAULT_MAX_AGE_S + GRACE_MARGIN_S) * 1000  # how long after a rotation AWSPREVIOUS still verifies


def key_id(public: Ed25519PublicKey) -> str:
    """The kid of a public key."""
    return hashlib.sha256(public.public_bytes_raw()).hexdigest()[:16]


def _raw(value: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        # Never echo the value: it is key material.
        raise SettingsError(f"the {what} secret is not the base64 of a raw 32-byte Ed25519 key")
    return raw


@dataclass(frozen=True)
class SigningKey:
    """A private key and its kid."""

    kid: str
    private: Ed25519PrivateKey

    @classmethod
    def from_secret(cls, value: str) -> SigningKey:
        private = Ed25519PrivateKey.from_private_bytes(_raw(value, "signing key"))
        return cls(key_id(private.public_key()), private)

    def sign(self, message: bytes) -> str:
        """The hex Ed25519 signature of `message`."""
        return self.private.sign(message).hex()


@dataclass(frozen=True)
class VerifyKey:
    """A public key, its kid and, when the rotation stored it, since when it is current (epoch ms)."""

    kid: str
    public: Ed25519PublicKey
    since_ms: int | None = None

    @classmethod
    def from_secret(cls, value: str) -> VerifyKey:
        encoded, since_ms = value, None
        if value.lstrip().startswith("{"):
            try:
                document = json.loads(value)
            except ValueError:
                document = None
            if not isinstance(document, dict) or not isinstance(document.get("public_key"), str):
                raise SettingsError("the verify key secret is JSON without a string public_key")
            since = document.get("since_ms")
            if since is not None and (not isinstance(since, int) or isinstance(since, bool) or since < 0):
                raise SettingsError("the verify key secret's since_ms is not a non-negative integer")
            encoded, since_ms = document["public_key"], since
        public = Ed25519PublicKey.from_public_bytes(_raw(encoded, "verify key"))
        return cls(key_id(public), public, since_ms)

    def verify(self, signature_hex: str, message: bytes) -> bool:
        try:
            self.public.verify(bytes.fromhex(signature_hex), message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class KeyPair:
    """A freshly generated pair, as the two secret values."""

    kid: str
    signing_value: str
    verify_value: str


def verify_secret_value(public_b64: str, since_ms: int) -> str:
    """The verify secret's value for the public key `public_b64`, current from `since_ms` (what the rotation stores)."""
    return json.dumps({"public_key": public_b64, "since_ms": since_ms})


def new_key_pair(seed: bytes | None = None) -> KeyPair:
    """A new random Ed25519 pair (for rotation and for the local runtime); a fixed one for a 32-byte `seed`
    (tests and the simulator, whose runs must replay byte for byte)."""
    private = Ed25519PrivateKey.generate() if seed is None else Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key()
    return KeyPair(
        key_id(public),
        base64.b64encode(private.private_bytes_raw()).decode(),
        base64.b64encode(public.public_bytes_raw()).decode(),
    )


class SigningKeys:
    """The current signing key of the job `signer`, read on use from its signing secret."""

    def __init__(self, secrets: Secrets, secret_name: str, signer: str) -> None:
        self._secrets = secrets
        self._name = secret_name
        self.signer = signer

    def current(self) -> SigningKey:
        return SigningKey.from_secret(self._secrets.get(self._name, CURRENT))


class KeyringBusy(JobfenceError):
    """An unknown kid that cannot be looked up again yet (the refresh allowance is used): not judged forged;
    the message is retried once the keyring may re-read the secret."""


class VerifyKeyring:
    """The public keys the worker accepts: the verify secret's AWSCURRENT version, and its AWSPREVIOUS
    version while AWSCURRENT's `since_ms` is less than `GRACE_MS` ago."""

    def __init__(self, secrets: Secrets, secret_name: str, clock: Clock) -> None:
        self._secrets = secrets
        self._name = secret_name
        self._clock = clock
        self._lock = threading.Lock()
        self._refreshed_at: int | None = None
        self._unknown: set[str] = set()  # the kid the last fresh read was for, if it did not hold it

    def find(self, kid: str) -> VerifyKey | None:
        """The public key named `kid`, or None if neither accepted version carries it after a fresh read;
        `KeyringBusy` if it is not in the cached versions and the secret was re-read less than
        `REFRESH_MIN_MS` ago."""
        if not KID.match(kid):
            return None
        key = self._lookup(kid, fresh=False)
        if key is not None:
            return key
        now = self._clock.now_ms()
        with self._lock:
            if self._refreshed_at is not None and now - self._refreshed_at < REFRESH_MIN_MS:
                if kid in self._unknown:
                    return None  # the last fresh read lacked it (a rotation stores the public half first)
                raise KeyringBusy(
                    f"key id {kid} is not cached; the verify secret is re-read at most every {REFRESH_MIN_MS} ms"
                )
            self._refreshed_at = now
        key = self._lookup(kid, fresh=True)
        with self._lock:
            self._unknown = set() if key is not None else {kid}
        return key

    def _lookup(self, kid: str, *, fresh: bool) -> VerifyKey | None:
        current = self._stage(CURRENT, fresh=fresh)
        if current is not None and current.kid == kid:
            return current
        if not self._previous_accepted(current):
            return None  # outside the grace window (or revoked): the rotated-out key verifies nothing
        previous = self._stage(PREVIOUS, fresh=fresh)
        return previous if previous is not None and previous.kid == kid else None

    def _stage(self, stage: str, *, fresh: bool) -> VerifyKey | None:
        try:
            value = self._secrets.get(self._name, stage, fresh=fresh)
        except SecretMissing:
            return None  # no AWSPREVIOUS before the first rotation, or after a revoke
        try:
            return VerifyKey.from_secret(value)
        except SettingsError:
            if stage == PREVIOUS:
                return None  # the deploy's placeholder, rotated out by the first rotation: it verifies nothing
            raise  # AWSCURRENT holds no key: the deployment is broken (every event would fail), not the event

    def _previous_accepted(self, current: VerifyKey | None) -> bool:
        if current is None or current.since_ms is None:
            return False  # no rotation time: the previous key is never accepted
        return self._clock.now_ms() - current.since_ms < GRACE_MS
