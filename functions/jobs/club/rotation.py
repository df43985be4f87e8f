"""Rotating the event signing pair as Secrets Manager's four rotation steps.

The signing (private) secret has a rotation schedule: Secrets Manager calls the
rotation function (`handlers.rotate_signing_key`) once per step with one
`ClientRequestToken`, which is the new version's id in both secrets. The
operator command `rotate-signing-key` runs the same four steps in order.

    createSecret   a new Ed25519 private key as the signing secret's AWSPENDING version
    setSecret      its public key stored in the verify secret under the same version id, with the
                   time (`since_ms`): AWSCURRENT there, the old public key AWSPREVIOUS (the worker
                   accepts it for `signing.GRACE_MS` after `since_ms`)
    testSecret     the pending private key signs a probe that the verify secret's AWSCURRENT verifies
    finishSecret   the signing secret's AWSCURRENT moves to the pending version

Public first, so no event is ever signed by a key the worker cannot find: an
event signed with the old key still verifies through AWSPREVIOUS, one signed
with the new key makes the worker re-read the verify secret (unknown kid).

Every step can be retried: createSecret keeps a pending version it finds,
setSecret keeps a verify version it finds under the token (so a re-sent step
never stores a second `since_ms`), finishSecret does nothing once the token is
current. Nothing is logged or returned but the key id.

`revoke` is not one of Secrets Manager's steps: it removes the verify secret's
AWSPREVIOUS stage at once, so the rotated-out public key verifies nothing from
the workers' next read (at most `max_age_s` later) instead of at the end of the
grace window. Run after a rotation for a suspected leak (`ops.rotation`).
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from jobfence.clock import Clock, SystemClock
from jobfence.dynamo import classify, error_code
from jobfence.errors import InvalidEvent, StoreError
from jobs.club.signing import SigningKey, VerifyKey, new_key_pair, verify_secret_value
from providers.secrets import CURRENT, NOT_FOUND, PREVIOUS

PENDING = "AWSPENDING"
PROBE = b"jobfence signing-key rotation probe"


class Step(str, enum.Enum):
    """The four steps of a Secrets Manager rotation, in order."""

    CREATE = "createSecret"
    SET = "setSecret"
    TEST = "testSecret"
    FINISH = "finishSecret"


@dataclass(frozen=True)
class SigningRotation:
    """The two secrets of the signing pair, rotated through `client` (a Secrets Manager client); `clock`
    dates the verify secret's new version (`since_ms`)."""

    client: Any
    signing_secret: str
    verify_secret: str
    clock: Clock = field(default_factory=SystemClock)

    def rotate(self, token: str) -> str:
        """All four steps with `token` (the operator command); the new key id."""
        for step in Step:
            self.run(step, token)
        # Secrets Manager drops AWSPENDING itself after a scheduled rotation; here nobody else would.
        self._call(
            "update_secret_version_stage", SecretId=self.signing_secret, VersionStage=PENDING, RemoveFromVersionId=token
        )
        return self._pending_key(token, stage=None).kid

    def run(self, step: Step, token: str) -> None:
        """One step of the rotation whose new version is `token`."""
        if step is Step.CREATE:
            self._create(token)
        elif step is Step.SET:
            try:
                self._value(self.verify_secret, stage=None, version=token)
                return  # a re-sent step: the public key is stored with its first since_ms
            except _Missing:
                pass
            public = self._pending_key(token).private.public_key().public_bytes_raw()
            self._call(
                "put_secret_value",
                SecretId=self.verify_secret,
                ClientRequestToken=token,
                SecretString=verify_secret_value(base64.b64encode(public).decode(), self.clock.now_ms()),
            )
        elif step is Step.TEST:
            key = self._pending_key(token)
            current = VerifyKey.from_secret(self._value(self.verify_secret, stage=CURRENT))
            if current.kid != key.kid or not current.verify(key.sign(PROBE), PROBE):
                raise StoreError("the verify secret's current key does not verify the pending signing key")
        else:
            self._finish(token)

    def revoke(self) -> str | None:
        """Remove the verify secret's AWSPREVIOUS stage (the rotated-out public key); the version it named, or
        None if no version carries it (never rotated, or revoked already: a re-run is a no-op)."""
        versions = self._call("describe_secret", SecretId=self.verify_secret).get("VersionIdsToStages", {})
        previous = next((v for v, stages in versions.items() if PREVIOUS in stages), None)
        if previous is None:
            return None
        self._call(
            "update_secret_version_stage",
            SecretId=self.verify_secret,
            VersionStage=PREVIOUS,
            RemoveFromVersionId=previous,
        )
        return previous

    def check_token(self, token: str) -> bool:
        """Whether `token` still has to be rotated: False if it is current already; raises if it is not pending."""
        versions = self._call("describe_secret", SecretId=self.signing_secret).get("VersionIdsToStages", {})
        stages = versions.get(token)
        if stages is None:
            raise InvalidEvent(f"version {token[:64]!r} is not a version of the signing secret")
        if CURRENT in stages:
            return False
        if PENDING not in stages:
            raise InvalidEvent(f"version {token[:64]!r} of the signing secret is not pending rotation")
        return True

    def _create(self, token: str) -> None:
        try:
            self._value(self.signing_secret, stage=PENDING, version=token)
            return  # a retry: the pending key exists already
        except _Missing:
            pass
        self._call(
            "put_secret_value",
            SecretId=self.signing_secret,
            ClientRequestToken=token,
            SecretString=new_key_pair().signing_value,
            VersionStages=[PENDING],
        )

    def _finish(self, token: str) -> None:
        versions = self._call("describe_secret", SecretId=self.signing_secret).get("VersionIdsToStages", {})
        current = next((v for v, stages in versions.items() if CURRENT in stages), None)
        if current == token:
            return
        kwargs = {"RemoveFromVersionId": current} if current is not None else {}
        self._call(
            "update_secret_version_stage",
            SecretId=self.signing_secret,
            VersionStage=CURRENT,
            MoveToVersionId=token,
            **kwargs,
        )

    def _pending_key(self, token: str, stage: str | None = PENDING) -> SigningKey:
        return SigningKey.from_secret(self._value(self.signing_secret, stage=stage, version=token))

    def _value(self, secret: str, *, stage: str | None, version: str | None = None) -> str:
        kwargs: dict[str, str] = {"SecretId": secret}
        if stage is not None:
            kwargs["VersionStage"] = stage
        if version is not None:
            kwargs["VersionId"] = version
        return self._call("get_secret_value", **kwargs)["SecretString"]

    def _call(self, operation: str, **kwargs: Any) -> dict:
        try:
            return getattr(self.client, operation)(**kwargs)
        except (BotoCoreError, ClientError) as exc:  # classified by jobfence.dynamo only
            code = error_code(exc)
            if code == NOT_FOUND:
                raise _Missing(f"{operation} on {kwargs.get('SecretId', '?')[:128]!r}: not found") from None
            raise StoreError(
                f"{operation} on {kwargs.get('SecretId', '?')[:128]!r} failed: {code}", classify(exc)
            ) from None


class _Missing(StoreError):
    """The secret or the asked version does not exist."""
