"""The leak runbook's command in an account (`ops.rotation.rotate_in_account`): it assumes the break-glass
role, starts Secrets Manager's rotation (whose function's role reads and writes the pair), waits for it and
revokes the old public key of the one job named, making no call that `runbook_calls(job)` does not list (tests/infra evaluates those
against the synthesized policies). moto calls no rotation function, so RotateSecret is answered here by
running the real steps (`jobs.club.rotation`) as the rotation function would, with the token it returns.
"""

from __future__ import annotations

import uuid

import pytest

from jobfence.config import secret_env
from jobs.club.catalog import SIGNER_EVENTS, signing_secret, verify_secret
from jobs.club.rotation import SigningRotation
from jobs.club.signing import VerifyKey
from jobfence_ops.runtime.topology import FunctionInfo, Topology
from jobfence_ops.targets import OperatorError
from providers.secrets import CURRENT, PREVIOUS
from tests.support import signing_pair

JOB = "sweep_studio_schedule"
SIGNING, VERIFY = f"jobfence/{signing_secret(JOB)}", f"jobfence/{verify_secret(JOB)}"
ROLE = "arn:aws:iam::123456789012:role/jobfence-SecretsBreakGlass"


class _Target:
    """An account target as the command sees it: a session, the deployed functions' environments, a clock."""

    def __init__(self, session, clock) -> None:
        self.session, self.clock, self.name, self.read_only = session, clock, "aws (test)", False
        env = {secret_env(name(job)): f"jobfence/{name(job)}" for job in SIGNER_EVENTS
               for name in (signing_secret, verify_secret)}
        function = FunctionInfo("jobfence-rotate_signing_key", "arn:fn", "handlers.rotate_signing_key.handler",
                                env, 30, 256, "SigningKeyRotationFunction")
        self.topology = Topology("jobfence", functions={function.name: function})


def _answer(token: str):
    """RotateSecret's reply as a before-call handler gives it: (the HTTP response, the parsed body)."""
    from botocore.awsrequest import AWSResponse

    return AWSResponse("https://secretsmanager", 200, {}, None), {"ARN": "arn", "Name": SIGNING, "VersionId": token}


@pytest.fixture
def account(aws, clock, monkeypatch):
    """(target, the calls the break-glass session made as (operation, SecretId), the Secrets Manager client)."""
    import ops.rotation as module

    sm = aws.client("secretsmanager")
    old = signing_pair(b"o" * 32)
    sm.create_secret(Name=SIGNING, SecretString=old.signing_value)
    sm.create_secret(Name=VERIFY, SecretString=old.verify_value)
    calls: list[tuple[str, str]] = []
    assumed: list[str] = []
    real = module._break_glass_session

    def break_glass(target, role_arn):
        assumed.append(role_arn)
        session = real(target, role_arn)

        def record(params, model, **_):
            calls.append((model.name, params.get("SecretId")))

        def rotate_as_secrets_manager(params, **_):
            token = str(uuid.uuid4())
            SigningRotation(sm, SIGNING, VERIFY, clock).rotate(token)  # the rotation function's role, not ours
            return _answer(token)

        session.events.register("before-parameter-build.secrets-manager", record)
        session.events.register("before-call.secrets-manager.RotateSecret", rotate_as_secrets_manager)
        return session

    monkeypatch.setattr(module, "_break_glass_session", break_glass)
    return _Target(aws, clock), calls, assumed, sm


def test_the_runbook_rotates_through_secrets_manager_as_the_break_glass_role_and_revokes(account):
    from ops.rotation import rotate_in_account, runbook_calls

    target, calls, assumed, sm = account
    old_kid = VerifyKey.from_secret(sm.get_secret_value(SecretId=VERIFY)["SecretString"]).kid
    waits: list[float] = []
    # WHEN the operator runs the leak runbook with --revoke
    rotation = rotate_in_account(target, JOB, revoke=True, role_arn=ROLE, wait=waits.append)
    # THEN it acted as the break-glass role, and the new version is current in the signing secret
    assert assumed == [ROLE]
    stages = sm.describe_secret(SecretId=SIGNING)["VersionIdsToStages"]
    assert CURRENT in stages[rotation.version] and waits == []
    # AND the verify secret's current key is the new one, the old one is no longer AWSPREVIOUS
    verify_stages = sm.describe_secret(SecretId=VERIFY)["VersionIdsToStages"]
    assert rotation.revoked is not None and PREVIOUS not in {s for v in verify_stages.values() for s in v}
    assert VerifyKey.from_secret(sm.get_secret_value(SecretId=VERIFY)["SecretString"]).kid != old_kid
    # AND it never read a secret: every call it made is one runbook_calls(JOB) lists (checked against the
    # template), all on JOB's own pair
    allowed = {(action.split(":")[1], f"jobfence/{secret}") for action, secret in runbook_calls(JOB)}
    assert calls and set(calls) <= allowed, calls
    assert rotation.kid is None  # the break-glass role cannot read the public key either


def test_a_rotation_that_does_not_finish_is_reported_and_nothing_is_revoked(account, monkeypatch):
    from ops.rotation import POLL_S, rotate_in_account

    target, calls, _, sm = account
    import ops.rotation as module

    real = module._break_glass_session

    def stuck(target_, role_arn):
        session = real(target_, role_arn)
        # a rotation function that fails its steps: RotateSecret answers, the version never becomes current
        session.events.register_first(
            "before-call.secrets-manager.RotateSecret",
            lambda **_: _answer(str(uuid.uuid4())),
        )
        return session

    monkeypatch.setattr(module, "_break_glass_session", stuck)
    waits: list[float] = []
    with pytest.raises(OperatorError, match="not current after 60 s"):
        rotate_in_account(target, JOB, revoke=True, role_arn=ROLE, wait=waits.append, timeout_s=60)
    assert waits == [POLL_S] * (60 // POLL_S)
    assert not [c for c in calls if c[0] == "UpdateSecretVersionStage"]


def test_a_job_that_signs_nothing_is_refused_before_any_call(account):
    from ops.rotation import rotate_in_account

    target, calls, assumed, _ = account
    with pytest.raises(OperatorError, match="signs no events"):
        rotate_in_account(target, "retry_email_intake", revoke=True, role_arn=ROLE)
    assert calls == [] and assumed == []
