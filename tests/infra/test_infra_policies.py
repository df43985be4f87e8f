"""The synthesized app's IAM, evaluated offline (`ops.iam_policy`: moto evaluates no resource policy).

- the leak runbook's calls for each job's key, made as the break-glass role (`ops.rotation.runbook_calls`), are
  allowed, and the role reads no secret; Secrets Manager's rotation then runs as the rotation function's role,
  whose calls on every pair are allowed;
- each job's role reads its own signing secret and is denied every other job's (issue 29, item 5), and no
  verify secret; the worker reads every verify secret and no signing secret;
- every function may read the secrets its environment names;
- a role from elsewhere in the account, even with `*` on `*`, may neither read nor replace nor manage a secret;
- no job or worker role may replace a secret's version, even given `secretsmanager:*` elsewhere (issue 29, item 6);
- the services acting for the stack are held to it (issue 29, low findings): Secrets Manager may invoke the rotation
  function only rotating the signing secret, and CloudWatch may publish to the alarm topic (and use its key) only
  for this stage's alarms, not those of a stage named "jobfence-eu";
- the break-glass role may move version stages of the verify secret only.
"""

from __future__ import annotations

import pytest

from jobfence.config import ENV_SECRET_PREFIX, ENV_TENANT_ROLE
from jobfence_cdk.rotation import SIGNING_ACTIONS, VERIFY_ACTIONS
from jobs.club.catalog import DISCORD_TOKEN_SECRET, NOTIFICATIONS_QUEUE, SIGNER_EVENTS, signing_pairs, signing_secret
from jobs.club.catalog import verify_secret
from ops.iam_policy import Decision, Principal, Template
from tests.infra.cfn import as_list, env, function_of_role, of_type, ref_id, role_statements

ADMIN = {"Effect": "Allow", "Action": "*", "Resource": "*"}
BROAD = {"Effect": "Allow", "Action": "secretsmanager:*", "Resource": "*"}
REPLACING = ("secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage", "secretsmanager:RotateSecret")
MANAGING = ("secretsmanager:UpdateSecret", "secretsmanager:DeleteSecret", "secretsmanager:PutResourcePolicy",
            "secretsmanager:DeleteResourcePolicy", "secretsmanager:CancelRotateSecret")


def _policies(synthesis) -> Template:
    return Template(synthesis.template.to_json())


def _secret(policy: Template, logical: str) -> str:
    return policy.secret_arn(f"jobfence/{logical}")


def _role_of(resources: dict, function_name: str) -> str:
    (fn,) = [f for f in of_type(resources, "AWS::Lambda::Function").values()
             if f["Properties"]["FunctionName"] == function_name]
    return ref_id(fn["Properties"]["Role"])


def _break_glass(resources: dict) -> str:
    (role,) = [k for k in of_type(resources, "AWS::IAM::Role") if k.startswith("SecretsBreakGlass")]
    return role


def _secret_names(resources: dict) -> set[str]:
    return {s["Properties"]["Name"] for s in of_type(resources, "AWS::SecretsManager::Secret").values()}


def test_the_leak_runbook_is_allowed_as_the_break_glass_role_which_reads_no_secret(synthesized):
    from jobfence_cdk.secrets import BREAK_GLASS_OUTPUT
    from ops.rotation import BREAK_GLASS_OUTPUT as LOOKED_UP
    from ops.rotation import runbook_calls

    policy, resources = _policies(synthesized), synthesized.resources
    role = policy.role(_break_glass(resources))
    # GIVEN the stack names the role where the command looks for it
    outputs = synthesized.template.to_json()["Outputs"]
    assert LOOKED_UP == BREAK_GLASS_OUTPUT and ref_id(outputs[BREAK_GLASS_OUTPUT]["Value"]) == role.role
    # THEN every call of the runbook is allowed, and RotateSecret's own requirement: invoking the rotation function
    for job in SIGNER_EVENTS:
        for action, logical in runbook_calls(job):
            assert policy.decide(role, action, _secret(policy, logical)) is Decision.ALLOW, (action, logical)
    rotator = [f for f in of_type(resources, "AWS::Lambda::Function")
               if resources[f]["Properties"]["FunctionName"] == "jobfence-rotate_signing_key"]
    assert policy.decide(role, "lambda:InvokeFunction", rotator[0]) is Decision.ALLOW
    # AND storing a third-party value (the Discord token runbook) is allowed
    assert policy.decide(role, "secretsmanager:PutSecretValue", _secret(policy, DISCORD_TOKEN_SECRET)) is Decision.ALLOW
    # AND it reads no secret, nor writes the pair itself (the rotation function does)
    for name in _secret_names(resources):
        assert policy.decide(role, "secretsmanager:GetSecretValue", policy.secret_arn(name)) is not Decision.ALLOW
    for logical in (name for pair in signing_pairs() for name in pair):
        assert policy.decide(role, "secretsmanager:PutSecretValue", _secret(policy, logical)) is not Decision.ALLOW


def test_the_rotation_started_by_the_runbook_runs_as_a_role_allowed_every_call_of_its_steps(synthesized):
    policy = _policies(synthesized)
    role = policy.role(_role_of(synthesized.resources, "jobfence-rotate_signing_key"))
    for signing, verify in signing_pairs():
        for logical, actions in ((signing, SIGNING_ACTIONS), (verify, VERIFY_ACTIONS)):
            for action in actions:
                assert policy.decide(role, action, _secret(policy, logical)) is Decision.ALLOW, (action, logical)


def test_each_job_reads_only_its_own_signing_key_and_the_worker_only_the_verify_keys(synthesized):
    """Issue 29, item 5: job A's role is denied job B's signing secret (its identity policy does not allow it
    and B's resource policy denies it), so a compromised job cannot sign as another."""
    policy, resources = _policies(synthesized), synthesized.resources
    worker = policy.role(_role_of(resources, f"jobfence-{NOTIFICATIONS_QUEUE}-worker"))
    for job in SIGNER_EVENTS:
        role = policy.role(_role_of(resources, f"jobfence-{job}"))
        for other in SIGNER_EVENTS:
            signing = _secret(policy, signing_secret(other))
            expected = Decision.ALLOW if other == job else Decision.DENY
            assert policy.decide(role, "secretsmanager:GetSecretValue", signing) is expected, (job, other)
            verify = _secret(policy, verify_secret(other))
            assert policy.decide(role, "secretsmanager:GetSecretValue", verify) is Decision.DENY, (job, other)
            # even given secretsmanager:* on * elsewhere, the other job's resource policy denies it
            if other != job:
                broad = policy.role(_role_of(resources, f"jobfence-{job}"), BROAD)
                assert policy.decide(broad, "secretsmanager:GetSecretValue", signing) is Decision.DENY, (job, other)
        assert policy.decide(worker, "secretsmanager:GetSecretValue", _secret(policy, verify_secret(job))) is (
            Decision.ALLOW), job
        assert policy.decide(worker, "secretsmanager:GetSecretValue", _secret(policy, signing_secret(job))) is (
            Decision.DENY), job


def test_the_old_runbook_from_an_operators_own_credentials_is_denied(synthesized):
    """The finding: `rotate-signing-key` read both secrets as the operator; the resource policies deny that."""
    policy = _policies(synthesized)
    operator = policy.foreign("Administrator", ADMIN)
    for logical in (name for pair in signing_pairs() for name in pair):
        assert policy.decide(operator, "secretsmanager:GetSecretValue", _secret(policy, logical)) is Decision.DENY


def test_every_function_may_read_the_secrets_its_environment_names(each):
    policy, resources = _policies(each), each.resources
    names, checked = _secret_names(resources), 0
    for function in of_type(resources, "AWS::Lambda::Function").values():
        role = policy.role(ref_id(function["Properties"]["Role"]))
        for variable, value in env(function).items():
            if isinstance(value, str) and value in names:
                assert variable.startswith(ENV_SECRET_PREFIX), variable
                decision = policy.decide(role, "secretsmanager:GetSecretValue", policy.secret_arn(value))
                assert decision is Decision.ALLOW, (function["Properties"]["FunctionName"], value)
                checked += 1
    assert checked >= len(names)


def test_a_role_from_elsewhere_in_the_account_may_not_read_replace_or_manage_any_secret(each):
    policy = _policies(each)
    intruder = policy.foreign("SomeAdministrator", ADMIN)
    for name in _secret_names(each.resources):
        for action in ("secretsmanager:GetSecretValue", *REPLACING, *MANAGING):
            assert policy.decide(intruder, action, policy.secret_arn(name)) is Decision.DENY, (name, action)


@pytest.mark.parametrize("action", REPLACING)
def test_no_job_or_worker_role_may_replace_a_secret_even_given_secretsmanager_star(synthesized, action):
    policy, resources = _policies(synthesized), synthesized.resources
    rotation = _role_of(resources, "jobfence-rotate_signing_key")
    secrets = _secret_names(resources)
    for function in of_type(resources, "AWS::Lambda::Function").values():
        role_id = ref_id(function["Properties"]["Role"])
        role = policy.role(role_id, BROAD)
        for name in secrets:
            decision = policy.decide(role, action, policy.secret_arn(name))
            pair = name.split("/", 1)[1] in {n for p in signing_pairs() for n in p}
            if role_id == rotation and pair and action != "secretsmanager:RotateSecret":
                assert decision is Decision.ALLOW, (name, action)  # its own steps
            else:
                assert decision is Decision.DENY, (function["Properties"]["FunctionName"], name, action)
        # while what it reads stays readable
        for value in env(function).values():
            if isinstance(value, str) and value in secrets:
                assert policy.decide(role, "secretsmanager:GetSecretValue", policy.secret_arn(value)) is Decision.ALLOW


def test_the_break_glass_role_is_the_only_role_without_a_function_and_touches_only_secrets_and_the_rotator(each):
    resources = each.resources
    roles = function_of_role(resources)
    # besides the functions' tenant roles (assumed by their function, `test_infra_tenants`)
    tenant_roles = {ref_id(env(f)[ENV_TENANT_ROLE]) for f in roles.values() if ENV_TENANT_ROLE in env(f)}
    assert set(of_type(resources, "AWS::IAM::Role")) - set(roles) - tenant_roles == {_break_glass(resources)}
    actions = {a for role, s in role_statements(resources) if role not in set(roles) | tenant_roles
               for a in as_list(s["Action"])}
    assert actions == {"secretsmanager:DescribeSecret", "secretsmanager:PutSecretValue", "secretsmanager:RotateSecret",
                       "secretsmanager:UpdateSecretVersionStage", "lambda:InvokeFunction"}


# -- service principals acting for a resource (confused deputy: aws:SourceAccount and aws:SourceArn) --------------


def test_only_secrets_manager_rotating_a_signing_secret_may_invoke_the_rotation_function(synthesized):
    """Issue 29, low: the permission had SourceAccount but no SourceArn, so a rotation of any secret of the
    account configured with this function (by anyone allowed RotateSecret on it) could run it."""
    policy, resources = _policies(synthesized), synthesized.resources
    (rotator,) = [f for f, fn in of_type(resources, "AWS::Lambda::Function").items()
                  if fn["Properties"]["FunctionName"] == "jobfence-rotate_signing_key"]
    function = policy.arn(rotator)
    secrets_manager = Principal(arn="", service="secretsmanager.amazonaws.com")
    account = policy.account.account_id

    def invoke(source_arn: str, source_account: str = account) -> Decision:
        context = {"aws:SourceAccount": source_account, "aws:SourceArn": source_arn}
        return policy.decide(secrets_manager, "lambda:InvokeFunction", function, context)

    pairs = signing_pairs()
    for signing, verify in pairs:
        # THEN each job's signing secret's rotation may invoke it
        assert invoke(_secret(policy, signing)) is Decision.ALLOW, signing
        # AND no other secret's rotation: the pair's other half, the same name in another stage
        for other in (_secret(policy, verify), _secret(policy, signing).replace("jobfence/", "jobfence-eu/")):
            assert invoke(other) is not Decision.ALLOW, other
        # AND not the same secret name in another account
        assert invoke(_secret(policy, signing), "210987654321") is not Decision.ALLOW, signing
    # AND neither a third-party secret nor one the stack does not own
    for other in (_secret(policy, DISCORD_TOKEN_SECRET), f"arn:aws:secretsmanager:us-east-1:{account}:secret:x/y-AbCdEf"):
        assert invoke(other) is not Decision.ALLOW, other


def _alarm_arn(policy: Template, name: str) -> str:
    a = policy.account
    return f"arn:{a.partition}:cloudwatch:{a.region}:{a.account_id}:alarm:{name}"


def test_the_alarm_topic_and_its_key_admit_exactly_this_stages_alarms(each):
    """Issue 29, low: `alarm:jobfence-*` also matched the alarms of a stage named `jobfence-eu`."""
    policy, resources = _policies(each), each.resources
    (topic,) = of_type(resources, "AWS::SNS::Topic")
    (key,) = of_type(resources, "AWS::KMS::Key")
    topic_arn, key_arn = policy.resolve({"Ref": topic}), policy.arn(key)
    cloudwatch = Principal(arn="", service="cloudwatch.amazonaws.com")
    account = policy.account.account_id

    def admitted(alarm: str, source_account: str = account) -> list[Decision]:
        context = {"aws:SourceAccount": source_account, "aws:SourceArn": _alarm_arn(policy, alarm)}
        return [policy.decide(cloudwatch, "sns:Publish", topic_arn, context),
                policy.decide(cloudwatch, "kms:GenerateDataKey", key_arn, context),
                policy.decide(cloudwatch, "kms:Decrypt", key_arn, context)]

    alarms = [a["Properties"]["AlarmName"] for a in of_type(resources, "AWS::CloudWatch::Alarm").values()]
    assert len(alarms) > 50
    # THEN every alarm of this stage may publish (and use the key)
    for alarm in alarms:
        assert admitted(alarm) == [Decision.ALLOW] * 3, alarm
    # AND no alarm of a stage whose prefix extends this one's, nor any other alarm named like this stage's
    for alarm in alarms[:5]:
        for other in (alarm.replace("jobfence-", "jobfence-eu-", 1), f"{alarm}-copy", "jobfence-anything"):
            assert Decision.ALLOW not in admitted(other), other
        # AND none of another account
        assert Decision.ALLOW not in admitted(alarm, "210987654321"), alarm


def test_the_break_glass_role_may_move_version_stages_of_the_verify_secrets_only(synthesized):
    """What docs/security.md ("The break-glass role") says it trusts the role with: UpdateSecretVersionStage on the
    verify secrets (any stage: the revoke, and also re-staging an old public key), on no other secret."""
    policy, resources = _policies(synthesized), synthesized.resources
    role = policy.role(_break_glass(resources))
    stage = "secretsmanager:UpdateSecretVersionStage"
    verifies = {f"jobfence/{verify}" for _, verify in signing_pairs()}
    for name in verifies:
        assert policy.decide(role, stage, policy.secret_arn(name)) is Decision.ALLOW, name
    for name in _secret_names(resources) - verifies:
        assert policy.decide(role, stage, policy.secret_arn(name)) is not Decision.ALLOW, name
    # the grant names no stage: the revoke's call and a move of AWSCURRENT are one action, allowed alike
    statements = [s for r, s in role_statements(resources) if r == role.role and stage in as_list(s["Action"])]
    assert statements and all("Condition" not in s for s in statements)
