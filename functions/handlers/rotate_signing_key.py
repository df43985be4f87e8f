"""The rotation function of the club event signing keys (Secrets Manager calls it on each secret's schedule).

Every publishing job has its own pair (`club_signing_key_<job>`,
`club_verify_key_<job>`), each signing secret its own rotation schedule, and
this one function rotates them all. Secrets Manager invokes it once per step
(`createSecret`, `setSecret`, `testSecret`, `finishSecret`) with `SecretId` and
`ClientRequestToken`; the steps are `jobs.club.rotation.SigningRotation` of the
pair whose signing secret `SecretId` names. It rotates only the signing secrets
its environment names (any other `SecretId` is refused) and writes only the
public half to that pair's verify secret. It logs the step and nothing of a key.
`build(environ, clock)` composes it; `handler` is that with this process's
environment and the wall clock.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from aws_lambda_powertools import Logger

from jobfence.clock import Clock, SystemClock
from jobfence.config import Settings
from jobfence.errors import InvalidEvent
from jobfence.tracing import handler_tracer, traced
from jobs.club.catalog import SIGNER_EVENTS, SUBSYSTEM, signing_secret, verify_secret
from jobs.club.rotation import SigningRotation, Step

TOKEN = re.compile(r"^[A-Za-z0-9-]{32,64}$")  # Secrets Manager's ClientRequestToken (a UUID)


def build(environ: Mapping[str, str], clock: Clock) -> Callable[[Any, Any], dict[str, Any]]:
    """The rotation handler with its client built once (the cold start)."""
    settings = Settings.from_environ(environ)
    logger = Logger(service=SUBSYSTEM)
    logger.append_keys(worker="rotate_signing_key")
    tracer = handler_tracer(SUBSYSTEM)
    client = boto3.Session().client("secretsmanager")
    rotations = [
        SigningRotation(client, settings.secret(signing_secret(job)), settings.secret(verify_secret(job)), clock)
        for job in SIGNER_EVENTS
        if signing_secret(job) in settings.secrets  # the pairs the stack rotates (all of them when deployed)
    ]

    @logger.inject_lambda_context(log_event=False)
    @traced(tracer)
    def handler(event: Any, context: Any) -> dict[str, Any]:
        step, token, rotation = _parse(event, rotations)
        if not rotation.check_token(token):
            logger.info("rotation_step_skipped", extra={"step": step.value, "reason": "already current"})
            return {"step": step.value, "done": True}
        rotation.run(step, token)
        logger.info("rotation_step_done", extra={"step": step.value})
        return {"step": step.value, "done": True}

    return handler


def _parse(event: Any, rotations: list[SigningRotation]) -> tuple[Step, str, SigningRotation]:
    if not isinstance(event, dict):
        raise InvalidEvent("the rotation function takes Secrets Manager's {SecretId, ClientRequestToken, Step}")
    secret, token, step = event.get("SecretId"), event.get("ClientRequestToken"), event.get("Step")
    if not isinstance(token, str) or not TOKEN.match(token):
        raise InvalidEvent("ClientRequestToken must be 32 to 64 letters, digits or dashes")
    try:
        parsed = Step(step)
    except ValueError:
        raise InvalidEvent(f"Step {str(step)[:32]!r} is not one of {', '.join(s.value for s in Step)}") from None
    rotation = next((r for r in rotations if isinstance(secret, str) and _names(secret, r.signing_secret)), None)
    if rotation is None:
        raise InvalidEvent("this function rotates only the signing secrets its environment names")
    return parsed, token, rotation


def _names(secret_id: str, name: str) -> bool:
    """Whether `secret_id` (a name or an ARN "...:secret:<name>-<6 chars>") is the secret `name`."""
    if secret_id == name:
        return True
    tail = secret_id.rsplit(":secret:", 1)[-1] if ":secret:" in secret_id else None
    return tail is not None and tail[:-7] == name and tail[-7:-6] == "-"


handler = build(os.environ, SystemClock())
