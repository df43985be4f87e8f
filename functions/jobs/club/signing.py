"""Event signing keys: Ed25519 pairs in two secrets, so signing and verifying are separate rights.

    club_event_signing_key   the private key   read by the club jobs (they sign)
    club_event_verify_key    the public key    read by the Discord worker (it verifies, and cannot sign)

Each secret value is the base64 of the raw 32-byte key. A key id (`kid`) is
the first 16 hex digits of SHA-256 of the public key; every signed event
carries the kid of the key that signed it.

Keys are read on use through the `Secrets` port (cached `max_age_s`), never at
import. Rotation (`python -m ops rotate-signing-key`) stores the new public key
first, then the new private key; the worker's keyring holds the verify
secret's `AWSCURRENT` and `AWSPREVIOUS` versions, and when an event names a kid
it does not know it re-reads the secret once (at most every `REFRESH_MIN_MS`),
so during a rotation no correctly signed event is rejected:

    t0  rotate: verify secret CURRENT=new, PREVIOUS=old; then signing secret CURRENT=new
    t0..t0+max_age   jobs may still sign with old (cached) -> worker finds old in its keyring (or PREVIOUS)
    t0+             jobs sign with new -> worker's cached keyring lacks new -> fresh read -> CURRENT=new
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from jobfence.clock import Clock
from jobfence.errors import SettingsError
from providers.secrets import CURRENT, PREVIOUS, SecretMissing, Secrets

KID = re.compile(r"^[0-9a-f]{16}$")
REFRESH_MIN_MS = 10_000  # an unknown kid re-reads the verify secret at most this often (forged kids cannot flood it)


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
    """A public key and its kid."""

    kid: str
    public: Ed25519PublicKey

    @classmethod
    def from_secret(cls, value: str) -> VerifyKey:
        public = Ed25519PublicKey.from_public_bytes(_raw(value, "verify key"))
        return cls(key_id(public), public)

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
    """The current signing key, read on use from the signing secret."""

    def __init__(self, secrets: Secrets, secret_name: str) -> None:
        self._secrets = secrets
        self._name = secret_name

    def current(self) -> SigningKey:
        return SigningKey.from_secret(self._secrets.get(self._name, CURRENT))


class VerifyKeyring:
    """The public keys the worker accepts: the verify secret's AWSCURRENT and AWSPREVIOUS versions."""

    def __init__(self, secrets: Secrets, secret_name: str, clock: Clock) -> None:
        self._secrets = secrets
        self._name = secret_name
        self._clock = clock
        self._lock = threading.Lock()
        self._refreshed_at: int | None = None

    def find(self, kid: str) -> VerifyKey | None:
        """The public key named `kid`, or None if neither accepted version carries it."""
        if not KID.match(kid):
            return None
        key = self._lookup(kid, fresh=False)
        if key is None and self._may_refresh():
            key = self._lookup(kid, fresh=True)
        return key

    def _may_refresh(self) -> bool:
        now = self._clock.now_ms()
        with self._lock:
            if self._refreshed_at is not None and now - self._refreshed_at < REFRESH_MIN_MS:
                return False
            self._refreshed_at = now
            return True

    def _lookup(self, kid: str, *, fresh: bool) -> VerifyKey | None:
        for stage in (CURRENT, PREVIOUS):
            try:
                key = VerifyKey.from_secret(self._secrets.get(self._name, stage, fresh=fresh))
            except SecretMissing:
                continue  # no AWSPREVIOUS before the first rotation
            if key.kid == kid:
                return key
        return None
