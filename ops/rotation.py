"""Rotating the club event signing key: `python -m ops rotate-signing-key` (also `jobfence rotate-signing-key`).

One rotation is two `PutSecretValue` calls, in this order:

    1. verify secret  <- new public key   (AWSCURRENT = new, AWSPREVIOUS = old: the worker accepts both)
    2. signing secret <- new private key  (jobs sign with it once their cached value is older than max_age)

Public first, so no event is ever signed by a key the worker cannot find: an
event signed with the old key still verifies through AWSPREVIOUS, one signed
with the new key makes the worker re-read the verify secret (unknown kid).
Rotate again only after `max_age_s` has passed (the jobs' cache): a second
rotation inside that window would push the oldest key out of AWSPREVIOUS while
a warm job may still sign with it.

The secret names come from the deployed functions' environments (so a stage
prefix is honoured); nothing is logged or printed but the new key id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobfence.config import secret_env
from jobs.club.signing import SIGNING_KEY_SECRET, VERIFY_KEY_SECRET, new_key_pair
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
    """Store a new Ed25519 pair: the public half first, then the private half."""
    verify_name = _secret_name(target, VERIFY_KEY_SECRET)
    signing_name = _secret_name(target, SIGNING_KEY_SECRET)
    pair = new_key_pair()
    sm: Any = target.session.client("secretsmanager")
    sm.put_secret_value(SecretId=verify_name, SecretString=pair.verify_value)
    sm.put_secret_value(SecretId=signing_name, SecretString=pair.signing_value)
    return Rotation(pair.kid, verify_name, signing_name)
