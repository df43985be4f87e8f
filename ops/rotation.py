"""Rotating the club event signing key now: `python -m ops rotate-signing-key` (also `jobfence rotate-signing-key`).

The deployed stack rotates the key on a schedule (the signing secret's rotation
function, `handlers.rotate_signing_key`); this command runs the same four steps
(`jobs.club.rotation.SigningRotation`) at once, for a suspected leak or the
local runtime (which has no rotation schedule):

    createSecret  new private key -> signing secret AWSPENDING
    setSecret     its public key  -> verify secret AWSCURRENT (AWSPREVIOUS = old: the worker accepts both)
    testSecret    the pending key signs a probe the verify secret's AWSCURRENT verifies
    finishSecret  signing secret AWSCURRENT -> the new key (jobs sign with it once their cache is older than max_age)

Public first, so no event is ever signed by a key the worker cannot find.
Rotate again only after `max_age_s` has passed (the jobs' cache): a second
rotation inside that window would push the oldest key out of AWSPREVIOUS while
a warm job may still sign with it.

The secret names come from the deployed functions' environments (so a stage
prefix is honoured); nothing is logged or printed but the new key id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from jobfence.config import secret_env
from jobs.club.catalog import SIGNING_KEY_SECRET, VERIFY_KEY_SECRET
from jobs.club.rotation import SigningRotation
from ops.targets import OperatorError, Target


@dataclass(frozen=True)
class Rotation:
    """What one rotation stored: the new key id and the two secrets' names."""

    kid: str
    verify_secret: str
    signing_secret: str


def _secret_name(target: Target, logical: str) -> str:
    variable = secret_env(logical)
    for function in target.topology.functions.values():
        if variable in function.environment:
            return function.environment[variable]
    raise OperatorError(f"no deployed function reads the secret {logical!r} ({variable})")


def rotate_signing_key(target: Target) -> Rotation:
    """Rotate the Ed25519 pair now: the public half first, then the private half."""
    verify_name = _secret_name(target, VERIFY_KEY_SECRET)
    signing_name = _secret_name(target, SIGNING_KEY_SECRET)
    rotation = SigningRotation(target.session.client("secretsmanager"), signing_name, verify_name)
    return Rotation(rotation.rotate(str(uuid.uuid4())), verify_name, signing_name)
