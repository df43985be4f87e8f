"""Security properties of the synthesized app (issue: rotatable secrets, isolation, alarms that reach someone).

- a table keyed by job (the club outbox) is granted only under `dynamodb:LeadingKeys` = the job;
- Scan only where an entry declares a scanning access level;
- the Discord worker cannot send to any queue;
- every secret's resource policy denies reading to all but the roles granted it;
- the alarm topic admits CloudWatch (this account's alarms of this stage only, by exact ARN), and so does its key;
- only Secrets Manager of this account rotating the signing secret may invoke the rotation function;
- every table is deletion-protected and retained;
- a stage prefix names the stack, every physical name and the secrets: two stages synthesize side by side.
"""

from __future__ import annotations

import json

import pytest

from jobfence.registry import access_verbs
from jobs.club.catalog import NOTIFICATIONS_QUEUE, SIGNER_EVENTS, SIGNING_KEY_PREFIX, VERIFY_KEY_PREFIX, signing_pairs
from tests.infra.cfn import as_list, function_of_role, of_type, ref_id, role_statements

WORKER = f"jobfence-{NOTIFICATIONS_QUEUE}-worker"
ROTATOR = "jobfence-rotate_signing_key"


def _table_ids(resources: dict) -> dict[str, str]:
    """Logical id -> physical name of every table."""
    return {k: v["Properties"]["TableName"] for k, v in of_type(resources, "AWS::DynamoDB::Table").items()}


def _statements_by_function(resources: dict) -> dict[str, list[dict]]:
    roles = function_of_role(resources)
    out: dict[str, list[dict]] = {}
    for role, statement in role_statements(resources):
        if role in roles:
            out.setdefault(roles[role]["Properties"]["FunctionName"], []).append(statement)
    return out


def _on_table(statement: dict, table_id: str) -> bool:
    return any(ref_id(r) == table_id for r in as_list(statement["Resource"]))


def test_each_club_job_reaches_only_its_own_outbox_rows(synthesized):
    tables = {name: k for k, name in _table_ids(synthesized.resources).items()}
    outbox = tables["jobfence-club_outbox"]
    users = [j for j in synthesized.catalog.jobs.values() if "club_outbox" in j.tables]
    assert len(users) == 7
    statements = _statements_by_function(synthesized.resources)
    for job in users:
        on_outbox = [s for s in statements[f"jobfence-{job.name}"] if _on_table(s, outbox)]
        assert on_outbox, job.name
        for statement in on_outbox:
            # THEN only its own partition, and no action that carries no key (Scan, DescribeTable)
            assert statement["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [job.name]}}
            assert not {"dynamodb:Scan", "dynamodb:DescribeTable"} & set(as_list(statement["Action"]))
    others = [f for f, ss in statements.items() if f not in {f"jobfence-{j.name}" for j in users}
              and any(_on_table(s, outbox) for s in ss)]
    assert others == []


def test_scan_is_granted_only_where_an_entry_declares_a_scanning_level(each):
    names = _table_ids(each.resources)
    statements = _statements_by_function(each.resources)
    entries = {f"jobfence-{j.name}": j for j in each.catalog.jobs.values()}
    entries |= {f"jobfence-{q.name}-worker": q for q in each.catalog.queues.values()}
    for function, spec in entries.items():
        scanned = {names[ref_id(r)] for s in statements.get(function, []) if "dynamodb:Scan" in as_list(s["Action"])
                   for r in as_list(s["Resource"]) if ref_id(r) in names}
        declared = {f"jobfence-{t}" for t, access in spec.tables.items() if "scan" in access_verbs(access)}
        assert scanned == declared, function


def test_the_discord_worker_sends_to_no_queue(synthesized):
    statements = _statements_by_function(synthesized.resources)[WORKER]
    actions = {a for s in statements for a in as_list(s["Action"])}
    assert not {a for a in actions if a.startswith("sqs:Send")}, actions
    # its own queue is still consumed (event source) and a rate-limited message's visibility changed
    assert "sqs:ChangeMessageVisibility" in actions


def test_every_secret_denies_reading_to_all_but_the_roles_granted_it(each):
    resources = each.resources
    secrets = of_type(resources, "AWS::SecretsManager::Secret")
    policies = {ref_id(p["Properties"]["SecretId"]): p["Properties"]["ResourcePolicy"]
                for p in of_type(resources, "AWS::SecretsManager::ResourcePolicy").values()}
    assert set(policies) == set(secrets)
    roles = function_of_role(resources)
    for secret_id, secret in secrets.items():
        logical = secret["Properties"]["Name"].split("/", 1)[1]
        (deny,) = [s for s in policies[secret_id]["Statement"] if s.get("Sid") == "OnlyTheNamedRolesRead"]
        assert deny["Action"] == "secretsmanager:GetSecretValue" and deny["Principal"] == {"AWS": "*"}
        admitted = {ref_id(arn) for arn in as_list(deny["Condition"]["StringNotEquals"]["aws:PrincipalArn"])}
        expected = {role for role, fn in roles.items()
                    if any(logical in spec.secrets and fn["Properties"]["FunctionName"] in
                           (f"jobfence-{spec.name}", f"jobfence-{spec.name}-worker")
                           for spec in [*each.catalog.jobs.values(), *each.catalog.queues.values()])}
        if logical.startswith((SIGNING_KEY_PREFIX, VERIFY_KEY_PREFIX)):
            expected |= {role for role, fn in roles.items() if fn["Properties"]["FunctionName"] == ROTATOR}
        assert admitted == expected, logical


def _cloudwatch_conditions(statement: dict, alarm_names: set[str]) -> None:
    conditions = statement["Condition"]
    assert set(conditions) == {"StringEquals", "ArnEquals"}  # no ArnLike pattern ("jobfence-*" admits jobfence-eu)
    assert conditions["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
    arns = [json.dumps(arn) for arn in as_list(conditions["ArnEquals"]["aws:SourceArn"])]
    assert all("AWS::AccountId" in arn and "*" not in arn for arn in arns)
    assert {arn.split(":alarm:")[1].split('"')[0] for arn in arns} == alarm_names


def test_the_alarm_topic_admits_cloudwatch_for_this_stages_alarms_only(each):
    (policy,) = of_type(each.resources, "AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    (publish,) = [s for s in statements if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert publish["Effect"] == "Allow" and publish["Action"] == "sns:Publish"
    alarm_names = {a["Properties"]["AlarmName"] for a in of_type(each.resources, "AWS::CloudWatch::Alarm").values()}
    _cloudwatch_conditions(publish, alarm_names)
    # the key lets CloudWatch encrypt for the topic under the same conditions
    (key,) = of_type(each.resources, "AWS::KMS::Key").values()
    (use,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"]
              if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert set(as_list(use["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    _cloudwatch_conditions(use, alarm_names)
    # and every alarm notifies that topic, and is named with the stage's prefix
    topic = ref_id(publish["Resource"]) if isinstance(publish["Resource"], dict) else ref_id(as_list(publish["Resource"])[0])
    for alarm in of_type(each.resources, "AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmName"].startswith("jobfence-")
        assert [ref_id(a) for a in alarm["Properties"]["AlarmActions"]] == [topic]


NAME_PROPERTIES = {
    "AWS::Lambda::Function": "FunctionName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::Events::Rule": "Name",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::ApiGatewayV2::Api": "Name",
}
# Types with no fixed physical name: CloudFormation names them from the stack name (which is the
# prefix) and the logical id, or they are attachments named by what they attach to.
CLOUDFORMATION_NAMED = {
    "AWS::IAM::Role", "AWS::IAM::Policy", "AWS::KMS::Key", "AWS::Logs::LogGroup", "AWS::Lambda::LayerVersion",
    "AWS::Lambda::Permission", "AWS::Lambda::EventInvokeConfig", "AWS::Lambda::EventSourceMapping",
    "AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy", "AWS::SecretsManager::ResourcePolicy",
    "AWS::SecretsManager::RotationSchedule",
    "AWS::ApiGatewayV2::Integration", "AWS::ApiGatewayV2::Route", "AWS::ApiGatewayV2::Stage",
}
FIXED_NAME_PROPERTIES = {"RoleName", "LogGroupName", "LayerName", "AliasName", "ManagedPolicyName"}


def _physical_names(resources: dict) -> set[str]:
    names = set()
    for logical, resource in resources.items():
        kind, properties = resource["Type"], resource.get("Properties", {})
        if kind in NAME_PROPERTIES:
            value = properties.get(NAME_PROPERTIES[kind])
            assert isinstance(value, str), (kind, value)
            names.add(value)
        else:
            # a resource type this test has not classified would escape the prefix check
            assert kind in CLOUDFORMATION_NAMED, f"{logical}: {kind} is neither prefix-named nor CloudFormation-named"
            assert not FIXED_NAME_PROPERTIES & set(properties), (logical, kind)
    return names


@pytest.fixture(scope="module")
def staging(synthesize_app):
    from jobs.catalog import CATALOG

    return synthesize_app(CATALOG, prefix="staging")


def test_two_stages_synthesize_side_by_side_with_no_shared_name(synthesized, staging):
    stack, template = staging
    resources = template.to_json()["Resources"]
    # GIVEN the default stage and a staging stage of the same catalog
    assert stack.stack_name == "staging" and synthesized.stack.stack_name == "jobfence"
    staging_names, default_names = _physical_names(resources), _physical_names(synthesized.resources)
    # THEN every physical name of staging carries its prefix, and none is the default stage's
    assert all(n == "staging" or n.startswith(("staging-", "staging/")) for n in staging_names), sorted(staging_names)[:5]
    assert not staging_names & default_names
    # AND its functions are told the staging secret names, and granted those (not jobfence/*)
    rendered = json.dumps(resources)
    assert "jobfence/" not in rendered and ":secret:staging/" in rendered
    # AND its alarms count only its own runs: its functions emit, and its alarms watch, the namespace "staging"
    catalog = synthesized.catalog
    emitters = {f"staging-{j}" for j in catalog.jobs} | {f"staging-{q}-worker" for q in catalog.queues}
    emitted = {f["Properties"]["FunctionName"]: f["Properties"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
               for f in of_type(resources, "AWS::Lambda::Function").values() if f["Properties"]["FunctionName"] in emitters}
    assert set(emitted) == emitters and set(emitted.values()) == {"staging"}
    # (besides AWS metrics of its own queues and its rotation function, named with its prefix)
    assert _watched_namespaces(resources) - {"AWS/SQS", "AWS/Lambda"} == {"staging"}
    assert _watched_namespaces(synthesized.resources) - {"AWS/SQS", "AWS/Lambda"} == {"jobfence"}


def _watched_namespaces(resources: dict) -> set[str]:
    out = set()
    for alarm in of_type(resources, "AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        if "Namespace" in properties:
            out.add(properties["Namespace"])
        for query in properties.get("Metrics", []):
            if "MetricStat" in query:
                out.add(query["MetricStat"]["Metric"]["Namespace"])
    return out


def test_a_bad_prefix_is_refused_before_synthesis(synthesize_app):
    from jobfence.registry import CatalogError
    from jobs.catalog import CATALOG

    with pytest.raises(CatalogError, match="prefix"):
        synthesize_app(CATALOG, prefix="Bad/Prefix")


def test_each_signing_key_is_rotated_on_a_schedule_by_a_function_that_can_touch_only_the_pairs(synthesized):
    resources = synthesized.resources
    secrets = {s["Properties"]["Name"]: k for k, s in of_type(resources, "AWS::SecretsManager::Secret").items()}
    functions = {f["Properties"]["FunctionName"]: k for k, f in of_type(resources, "AWS::Lambda::Function").items()}
    # GIVEN the rotation schedules: one per job's signing secret (and none else), every 30 days, all run by the
    # one rotation function
    schedules = [s["Properties"] for s in of_type(resources, "AWS::SecretsManager::RotationSchedule").values()]
    assert sorted(ref_id(props["SecretId"]) for props in schedules) == sorted(
        secrets[f"jobfence/{signing}"] for signing, _ in signing_pairs())
    assert len(schedules) == len(SIGNER_EVENTS) == 7
    for props in schedules:
        assert props["RotationLambdaARN"] == {"Fn::GetAtt": [functions[ROTATOR], "Arn"]}
        assert props["RotationRules"]["AutomaticallyAfterDays"] == 30
    # THEN only Secrets Manager of this account, rotating a signing secret, may invoke it (one permission each)
    permissions = [p["Properties"] for p in of_type(resources, "AWS::Lambda::Permission").values()
                   if json.dumps(p["Properties"]["FunctionName"]).count(functions[ROTATOR])]
    assert {p["Principal"] for p in permissions} == {"secretsmanager.amazonaws.com"}
    assert all(p["SourceAccount"] == {"Ref": "AWS::AccountId"} for p in permissions)
    assert sorted(p["SourceArn"]["Ref"] for p in permissions) == sorted(
        secrets[f"jobfence/{signing}"] for signing, _ in signing_pairs())
    # AND its role stages the signing secret and writes the verify secret, and touches nothing else
    secret_actions: dict[str, set[str]] = {}
    for statement in _statements_by_function(resources)[ROTATOR]:
        actions = set(as_list(statement["Action"]))
        if not any(a.startswith("secretsmanager:") for a in actions):
            assert not any(a.startswith(("dynamodb:", "sqs:", "kms:")) for a in actions), statement
            continue
        for target in as_list(statement["Resource"]):
            name = json.dumps(target).split(":secret:")[1].split("-??????")[0]
            secret_actions[name] = secret_actions.get(name, set()) | actions
    signing_actions = {"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue",
                       "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage"}
    verify_actions = {"secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"}
    assert secret_actions == {
        **{f"jobfence/{signing}": signing_actions for signing, _ in signing_pairs()},
        **{f"jobfence/{verify}": verify_actions for _, verify in signing_pairs()},
    }
    # AND cdk-nag's SMG4 is met for every signing secret, not acknowledged
    suppressed = [s for r in synthesized.nag_report["pluginReports"] for s in r.get("suppressedViolations", [])
                  if s["ruleName"] == "AwsSolutions-SMG4"]
    assert suppressed and not [s for s in suppressed if "SecretsClubSigningKey" in json.dumps(s)]


def test_only_a_buffer_one_job_may_invoke_a_function_and_only_its_own(each):
    # GIVEN the real catalog (no buffer_one job) and the probe (probe_sender is buffer_one)
    statements = _statements_by_function(each.resources)
    invokers = {f: [s for s in ss if "lambda:InvokeFunction" in as_list(s["Action"])] for f, ss in statements.items()}
    invokers = {f: ss for f, ss in invokers.items() if ss}
    buffered = {f"jobfence-{j.name}" for j in each.catalog.jobs.values() if j.overlap == "buffer_one"}
    auditors = {f"jobfence-{j.name}" for j in each.catalog.jobs.values() if j.audits}
    # THEN exactly the buffer_one jobs may invoke, each one action on one resource: its own function's ARN;
    # and the auditor, the functions of the jobs it catches up (tests/infra/test_infra_scheduled.py)
    assert set(invokers) == buffered | auditors
    for function, statements in invokers.items():
        if function in auditors:
            continue
        (statement,) = statements
        assert as_list(statement["Action"]) == ["lambda:InvokeFunction"] and statement["Effect"] == "Allow"
        (arn,) = as_list(statement["Resource"])
        parts = arn["Fn::Join"][1] if isinstance(arn, dict) else [arn]
        text = "".join(p if isinstance(p, str) else "{" + next(iter(p.values())) + "}" for p in parts)
        assert text == f"arn:{{AWS::Partition}}:lambda:{{AWS::Region}}:{{AWS::AccountId}}:function:{function}", arn
