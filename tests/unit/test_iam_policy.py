"""The offline policy evaluator (`ops.iam_policy`) on small hand-written templates: IAM's rules it relies on."""

from __future__ import annotations

import pytest

from ops.iam_policy import Decision, Template, Unsupported

ROLE = {"Type": "AWS::IAM::Role", "Properties": {}}


def _template(identity: list[dict], resource: list[dict] | None = None) -> Template:
    resources: dict = {
        "Reader": ROLE,
        "Secret": {"Type": "AWS::SecretsManager::Secret", "Properties": {"Name": "app/token"}},
        "ReaderPolicy": {"Type": "AWS::IAM::Policy", "Properties": {
            "Roles": [{"Ref": "Reader"}], "PolicyDocument": {"Statement": identity}}},
    }
    if resource is not None:
        resources["SecretPolicy"] = {"Type": "AWS::SecretsManager::ResourcePolicy", "Properties": {
            "SecretId": {"Ref": "Secret"}, "ResourcePolicy": {"Statement": resource}}}
    return Template({"Resources": resources})


SECRET_BY_NAME = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":secretsmanager:", {"Ref": "AWS::Region"},
                                    ":", {"Ref": "AWS::AccountId"}, ":secret:app/token-??????"]]}
DENY_OTHERS = {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "secretsmanager:GetSecretValue",
               "Resource": "*", "Condition": {"StringNotEquals": {"aws:PrincipalArn": [{"Fn::GetAtt": ["Reader", "Arn"]}]}}}


def test_an_identity_allow_by_fixed_name_matches_the_deployed_arn_and_nothing_else():
    t = _template([{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": SECRET_BY_NAME}])
    reader = t.role("Reader")
    assert t.decide(reader, "secretsmanager:GetSecretValue", "Secret") is Decision.ALLOW
    assert t.decide(reader, "SecretsManager:getsecretvalue", "Secret") is Decision.ALLOW  # actions: any case
    assert t.decide(reader, "secretsmanager:PutSecretValue", "Secret") is Decision.IMPLICIT_DENY
    other = t.account.role_arn("x").replace(":role/x", ":secret:app/token-AbCdEfG")  # one character too many
    assert t.decide(reader, "secretsmanager:GetSecretValue", other) is Decision.IMPLICIT_DENY


def test_an_explicit_deny_wins_and_its_negated_condition_spares_the_named_role():
    t = _template([{"Effect": "Allow", "Action": "*", "Resource": "*"}], [DENY_OTHERS])
    assert t.decide(t.role("Reader"), "secretsmanager:GetSecretValue", "Secret") is Decision.ALLOW
    stranger = t.foreign("Stranger", {"Effect": "Allow", "Action": "*", "Resource": "*"})
    assert t.decide(stranger, "secretsmanager:GetSecretValue", "Secret") is Decision.DENY


def test_not_action_and_a_resource_policy_allow_for_a_named_role():
    allow = {"Effect": "Allow", "Principal": {"AWS": {"Fn::GetAtt": ["Reader", "Arn"]}},
             "NotAction": "secretsmanager:Delete*", "Resource": "*"}
    t = _template([], [allow])
    reader = t.role("Reader")
    assert t.decide(reader, "secretsmanager:GetSecretValue", "Secret") is Decision.ALLOW  # same account: enough
    assert t.decide(reader, "secretsmanager:DeleteSecret", "Secret") is Decision.IMPLICIT_DENY
    assert t.decide(t.foreign("Other"), "secretsmanager:GetSecretValue", "Secret") is Decision.IMPLICIT_DENY


def test_the_account_root_as_principal_delegates_and_grants_nothing_by_itself():
    root = {"Effect": "Allow", "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
            "Action": "*", "Resource": "*"}
    t = _template([], [root])
    assert t.decide(t.role("Reader"), "secretsmanager:GetSecretValue", "Secret") is Decision.IMPLICIT_DENY


def test_a_missing_key_fails_a_positive_operator_and_passes_a_negated_one():
    def with_condition(operator: str) -> Template:
        return _template([{"Effect": "Allow", "Action": "*", "Resource": "*",
                           "Condition": {operator: {"aws:SourceAccount": "123456789012"}}}])
    t = with_condition("StringEquals")
    assert t.decide(t.role("Reader"), "s:A", "Secret") is Decision.IMPLICIT_DENY
    t = with_condition("StringNotEquals")
    assert t.decide(t.role("Reader"), "s:A", "Secret") is Decision.ALLOW
    assert t.decide(t.role("Reader"), "s:A", "Secret", {"aws:SourceAccount": "123456789012"}) is Decision.IMPLICIT_DENY
    t = with_condition("StringEqualsIfExists")
    assert t.decide(t.role("Reader"), "s:A", "Secret") is Decision.ALLOW


def test_what_it_does_not_model_raises_instead_of_guessing():
    t = _template([{"Effect": "Allow", "Action": "*", "Resource": "*",
                    "Condition": {"DateGreaterThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}}])
    with pytest.raises(Unsupported, match="DateGreaterThan"):
        t.decide(t.role("Reader"), "s:A", "Secret")
    with pytest.raises(Unsupported, match="Fn::ImportValue"):
        _template([{"Effect": "Allow", "Action": "*", "Resource": {"Fn::ImportValue": "x"}}])
