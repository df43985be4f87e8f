"""Rotating one job's event signing key now: `python -m jobfence_ops rotate-signing-key JOB [--revoke]` (also `jobfence ...`).

Every publishing club job has its own pair (`club_signing_key_<JOB>`,
`club_verify_key_<JOB>`). The deployed stack rotates each on a schedule (the
rotation function, `handlers.rotate_signing_key`, steps in
`jobs.club.rotation`). This command rotates the one of JOB at once, for a
suspected leak of that job's key (the other jobs' keys are untouched):

    in an account (`rotate_in_account`), with the deployed resource policies, which let no operator
    read either secret nor write them:
      assume the stack's break-glass role (output BreakGlassRoleArn, or --role-arn)
      RotateSecret on the signing secret   Secrets Manager invokes the rotation function, whose role
                                           runs the four steps (public half first)
      DescribeSecret until the new version is AWSCURRENT
      --revoke: UpdateSecretVersionStage   the verify secret's AWSPREVIOUS removed (the old key is
                                           refused as soon as the workers' caches expire, max_age)
    on the local runtime (`rotate_here`), which has no rotation schedule and evaluates no policy:
      the same four steps run here through the target's session, then the same revoke

Without `--revoke` the old public key is still accepted for the grace window
(`jobs.club.signing.GRACE_MS`, 10 minutes) so that events signed by a warm job
inside its cache are delivered; with it, those events are refused (counted as
`discord_rejected`). Do not rotate twice within `max_age_s` (300 s) without
revoking: a second rotation would move AWSPREVIOUS off a key a warm job may
still sign with.

The secret names come from the deployed functions' environments (so a stage
prefix is honoured); nothing is logged or printed but the version and key id.
`runbook_calls(job)` lists every call the account path makes with the
break-glass role; tests/infra checks each against the synthesized policies.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from jobfence.config import secret_env
from jobfence_ops.targets import OperatorError, Target
from jobs.club.catalog import SIGNER_EVENTS, signing_secret, verify_secret
from jobs.club.rotation import SigningRotation
from providers.secrets import CURRENT

BREAK_GLASS_OUTPUT = "BreakGlassRoleArn"  # the stack output naming the role (jobfence_cdk.secrets)
POLL_S = 5
TIMEOUT_S = 300  # four steps of a function with a 30 s timeout, and Secrets Manager's retries


def runbook_calls(job: str) -> tuple[tuple[str, str], ...]:
    """(action, logical secret) of every call `rotate_in_account` makes for `job` as the break-glass role;
    RotateSecret also needs lambda:InvokeFunction on the rotation function."""
    return (
        ("secretsmanager:RotateSecret", signing_secret(job)),
        ("secretsmanager:DescribeSecret", signing_secret(job)),
        ("secretsmanager:DescribeSecret", verify_secret(job)),
        ("secretsmanager:UpdateSecretVersionStage", verify_secret(job)),
    )


def _pair(target: Target, job: str) -> tuple[str, str]:
    """The deployed (signing, verify) secret names of `job`'s key."""
    if job not in SIGNER_EVENTS:
        raise OperatorError(f"{job[:64]!r} signs no events; the jobs with a signing key: {', '.join(SIGNER_EVENTS)}")
    return _secret_name(target, signing_secret(job)), _secret_name(target, verify_secret(job))


@dataclass(frozen=True)
class Rotation:
    """What one rotation did: the new version, its key id (None where the operator may not read the public
    key), the two secrets' names and the verify version whose AWSPREVIOUS stage a revoke removed."""

    version: str
    kid: str | None
    verify_secret: str
    signing_secret: str
    revoked: str | None = None


def _secret_name(target: Target, logical: str) -> str:
    variable = secret_env(logical)
    for function in target.topology.functions.values():
        if variable in function.environment:
            return function.environment[variable]
    raise OperatorError(f"no deployed function reads the secret {logical!r} ({variable})")


def rotate_here(target: Target, job: str, *, revoke: bool = False) -> Rotation:
    """The local runtime: the four steps of `job`'s pair through the target's own session, then the revoke."""
    signing_name, verify_name = _pair(target, job)
    rotation = SigningRotation(target.session.client("secretsmanager"), signing_name, verify_name, target.clock)
    token = str(uuid.uuid4())
    kid = rotation.rotate(token)
    revoked = rotation.revoke() if revoke else None
    return Rotation(token, kid, verify_name, signing_name, revoked)


def rotate_in_account(
    target: Target,
    job: str,
    *,
    revoke: bool = False,
    role_arn: str | None = None,
    wait: Callable[[float], None] = time.sleep,
    timeout_s: float = TIMEOUT_S,
) -> Rotation:
    """A deployed stack: Secrets Manager's rotation of `job`'s pair started as the break-glass role, waited for,
    then the revoke."""
    signing_name, verify_name = _pair(target, job)
    client = _break_glass_session(target, role_arn or _break_glass_arn(target)).client("secretsmanager")
    try:
        version = client.rotate_secret(SecretId=signing_name, RotateImmediately=True)["VersionId"]
    except (BotoCoreError, ClientError) as exc:  # the operator sees the service's refusal, never a value
        raise OperatorError(f"RotateSecret on {signing_name} refused: {_code(exc)}") from None
    waited = 0.0
    while CURRENT not in _stages(client, signing_name).get(version, ()):
        if waited >= timeout_s:
            raise OperatorError(
                f"the rotation of {signing_name} (version {version}) is not current after {timeout_s:.0f} s: "
                "see the rotation function's log group; nothing was revoked"
            )
        wait(POLL_S)
        waited += POLL_S
    revoked = SigningRotation(client, signing_name, verify_name).revoke() if revoke else None
    return Rotation(version, None, verify_name, signing_name, revoked)


def _stages(client: Any, name: str) -> dict[str, list[str]]:
    return dict(client.describe_secret(SecretId=name).get("VersionIdsToStages", {}))


def _break_glass_arn(target: Target) -> str:
    stacks = target.session.client("cloudformation").describe_stacks(StackName=target.topology.stack_name)
    for output in stacks["Stacks"][0].get("Outputs", []):
        if output.get("OutputKey") == BREAK_GLASS_OUTPUT:
            return str(output["OutputValue"])
    raise OperatorError(f"stack {target.topology.stack_name} has no {BREAK_GLASS_OUTPUT} output (deployed before it?)")


def _break_glass_session(target: Target, role_arn: str) -> Any:
    try:
        credentials = target.session.client("sts").assume_role(
            RoleArn=role_arn, RoleSessionName="jobfence-rotate-signing-key", DurationSeconds=900
        )["Credentials"]
    except (BotoCoreError, ClientError) as exc:
        raise OperatorError(f"cannot assume the break-glass role {role_arn}: {_code(exc)}") from None
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=target.session.region_name,
    )


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", type(exc).__name__))
    return type(exc).__name__
