"""Scheduled jobs in the synthesized template: rules, functions, permissions, kill switch."""

from __future__ import annotations

import re

from aws_cdk.assertions import Match

from app import FUNCTIONS
from jobfence_cdk.validation import handler_file, module_file
from jobfence.config import ENV_JOB_NAME, ENV_RULE_ARN
from jobfence.registry import LEASE_MARGIN_S
from tests.infra.cfn import as_list, env, of_type, ref_id, role_statements


def test_every_catalog_job_has_one_enabled_rule_with_its_schedule(each):
    # GIVEN the synthesized app WHEN its rules are listed
    rules = {r["Properties"]["Name"]: r["Properties"] for r in of_type(each.resources, "AWS::Events::Rule").values()}
    # THEN there is exactly one rule per registered job, carrying the job's schedule
    assert set(rules) == {f"jobfence-{name}" for name in each.catalog.jobs}
    for name, spec in each.catalog.jobs.items():
        assert rules[f"jobfence-{name}"]["ScheduleExpression"] == spec.schedule
        assert rules[f"jobfence-{name}"]["State"] == "ENABLED"


def test_every_rule_targets_a_function_of_a_registered_job_whose_handler_exists(each):
    functions = of_type(each.resources, "AWS::Lambda::Function")
    for rule in of_type(each.resources, "AWS::Events::Rule").values():
        (target,) = rule["Properties"]["Targets"]
        fn = functions[ref_id(target["Arn"])]
        # THEN the handler string imports from functions/ ...
        assert handler_file(fn["Properties"]["Handler"], FUNCTIONS).is_file(), fn["Properties"]["Handler"]
        # ... the JOB_NAME is registered, its entry module exists, and the rule is that job's own
        job = each.catalog.job(env(fn)[ENV_JOB_NAME])
        assert module_file(job.entry.partition(":")[0], FUNCTIONS).is_file()
        assert rule["Properties"]["Name"] == f"jobfence-{job.name}"
        assert fn["Properties"]["Runtime"] == "python3.14"
        assert fn["Properties"]["Timeout"] == job.timeout_s and fn["Properties"]["MemorySize"] == job.memory_mb


def test_every_rule_target_retries_briefly_then_dead_letters(each):
    queues = of_type(each.resources, "AWS::SQS::Queue")
    for rule in of_type(each.resources, "AWS::Events::Rule").values():
        (target,) = rule["Properties"]["Targets"]
        assert ref_id(target["DeadLetterConfig"]["Arn"]) in queues
        assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 3600
        assert target["RetryPolicy"]["MaximumRetryAttempts"] <= 3


def test_scheduled_functions_never_retry_async_and_send_failures_to_a_queue(each):
    queues = of_type(each.resources, "AWS::SQS::Queue")
    configs = {ref_id(c["Properties"]["FunctionName"]) if isinstance(c["Properties"]["FunctionName"], dict)
               else c["Properties"]["FunctionName"]: c["Properties"]
               for c in of_type(each.resources, "AWS::Lambda::EventInvokeConfig").values()}
    for rule in of_type(each.resources, "AWS::Events::Rule").values():
        (target,) = rule["Properties"]["Targets"]
        config = configs[ref_id(target["Arn"])]
        assert config["MaximumRetryAttempts"] == 0
        assert ref_id(config["DestinationConfig"]["OnFailure"]["Destination"]) in queues


def test_every_eventbridge_invoke_permission_carries_the_rule_arn_and_account(each):
    rules = of_type(each.resources, "AWS::Events::Rule")
    permissions = [p["Properties"] for p in of_type(each.resources, "AWS::Lambda::Permission").values()
                   if p["Properties"]["Principal"] == "events.amazonaws.com"]
    assert len(permissions) == len(rules)
    for permission in permissions:
        rule_id = ref_id(permission["SourceArn"])
        assert rule_id in rules
        # the permission is for the function that this very rule targets
        (target,) = rules[rule_id]["Properties"]["Targets"]
        assert ref_id(permission["FunctionName"]) == ref_id(target["Arn"])
        assert permission["SourceAccount"] == {"Ref": "AWS::AccountId"}


def _joined(value):
    """An Fn::Join of literals and pseudo parameters, as text with ${AWS::...} placeholders."""
    separator, parts = value["Fn::Join"]
    return separator.join(p if isinstance(p, str) else "${%s}" % p["Ref"] for p in parts)


def test_every_job_function_knows_exactly_its_own_rule_arn(each):
    # a Scheduled Event is accepted only from the function's own rule and account (jobfence.triggers)
    rules = {r["Properties"]["Name"]: k for k, r in of_type(each.resources, "AWS::Events::Rule").items()}
    functions = {f["Properties"]["FunctionName"]: (k, f) for k, f in of_type(each.resources, "AWS::Lambda::Function").items()}
    for name in each.catalog.jobs:
        rule_name = f"jobfence-{name}"
        function_id, function = functions[rule_name]
        assert _joined(env(function)[ENV_RULE_ARN]) == (
            "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:rule/" + rule_name)
        # and that rule targets this very function
        (target,) = each.resources[rules[rule_name]]["Properties"]["Targets"]
        assert ref_id(target["Arn"]) == function_id
    # no other function accepts ticks
    with_rule = {n for n, (_, f) in functions.items() if ENV_RULE_ARN in env(f)}
    assert with_rule == {f"jobfence-{name}" for name in each.catalog.jobs}


def test_lease_ttl_outlives_the_deployed_function_timeout(each):
    checked = 0
    for fn in of_type(each.resources, "AWS::Lambda::Function").values():
        name = env(fn).get(ENV_JOB_NAME)
        if name:
            checked += 1
            assert each.catalog.job(name).lease_ttl_s >= fn["Properties"]["Timeout"] + LEASE_MARGIN_S
    assert checked == len(each.catalog.jobs)


def test_scheduled_function_may_touch_only_its_own_lease_and_run_items(each):
    # GIVEN a job WHEN its role policy is read THEN its lease statement is conditioned on its own name
    for name in each.catalog.jobs:
        each.template.has_resource_properties(
            "AWS::IAM::Policy",
            {
                "PolicyDocument": {
                    "Statement": Match.array_with([
                        Match.object_like({
                            "Action": Match.array_with(["dynamodb:UpdateItem"]),
                            "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [name]}},
                        })
                    ])
                }
            },
        )
    # AND no statement on the leases or runs table is unconditioned, or allows Scan
    core = {k for k, v in of_type(each.resources, "AWS::DynamoDB::Table").items()
            if v["Properties"]["TableName"] in ("jobfence-leases", "jobfence-runs")}
    checked = 0
    for _role, statement in role_statements(each.resources):
        targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if any(ref_id(t) in core for t in targets):
            checked += 1
            assert "dynamodb:LeadingKeys" in str(statement.get("Condition")), statement
            assert "dynamodb:Scan" not in statement["Action"]
    auditors = sum(1 for job in each.catalog.jobs.values() if job.audits)
    assert checked == 2 * len(each.catalog.jobs) + 2 * auditors  # an auditor also reads the jobs it audits


def test_the_auditor_may_only_get_lease_items_and_query_run_rows_of_the_jobs_it_audits(synthesized):
    (auditor,) = [job for job in synthesized.catalog.jobs.values() if job.audits]
    core = {v["Properties"]["TableName"]: k for k, v in of_type(synthesized.resources, "AWS::DynamoDB::Table").items()
            if v["Properties"]["TableName"] in ("jobfence-leases", "jobfence-runs")}
    audited = sorted(auditor.audits)
    reads = {}
    for _role, statement in role_statements(synthesized.resources):
        keys = statement.get("Condition", {}).get("ForAllValues:StringEquals", {}).get("dynamodb:LeadingKeys")
        if keys and sorted(keys) == audited:
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            (table,) = [name for name, logical in core.items() if any(ref_id(t) == logical for t in targets)]
            reads[table] = as_list(statement["Action"])
    assert reads == {"jobfence-leases": ["dynamodb:BatchGetItem"], "jobfence-runs": ["dynamodb:Query"]}
    assert auditor.name not in audited and len(audited) == len(synthesized.catalog.jobs) - 1


def test_kill_switch_context_disables_every_rule(disabled_template, synthesized):
    # GIVEN -c schedules=disabled WHEN synthesized THEN every rule is DISABLED (none enabled)
    rules = disabled_template.find_resources("AWS::Events::Rule")
    assert len(rules) == len(synthesized.catalog.jobs)
    assert {r["Properties"]["State"] for r in rules.values()} == {"DISABLED"}


def test_rule_names_share_the_project_prefix(each):
    for rule in of_type(each.resources, "AWS::Events::Rule").values():
        assert re.fullmatch(r"jobfence-[a-z0-9_]+", rule["Properties"]["Name"])


def test_every_function_and_the_layer_are_arm64_and_the_layer_is_built_from_aarch64_wheels(each):
    # GIVEN the synthesized template WHEN every function and layer is read
    from jobfence_cdk.code import ARCHITECTURE, WHEEL_PLATFORMS

    functions = of_type(each.resources, "AWS::Lambda::Function")
    layers = of_type(each.resources, "AWS::Lambda::LayerVersion")
    # THEN each runs on arm64 (docs/benchmarks.md, "Cold start"), as does the one layer they share
    assert functions and {tuple(f["Properties"]["Architectures"]) for f in functions.values()} == {("arm64",)}
    assert [layer["Properties"]["CompatibleArchitectures"] for layer in layers.values()] == [["arm64"]]
    # and the layer's wheels are pip's for that architecture, never the build machine's
    assert WHEEL_PLATFORMS[ARCHITECTURE.name] == "manylinux2014_aarch64"


def test_the_layers_asset_hash_names_its_wheel_platform():
    # an unchanged requirements file must not reuse (nor skip uploading) another architecture's bundle
    from jobfence_cdk.code import WHEEL_PLATFORMS, layer_asset_hash

    hashes = {layer_asset_hash(FUNCTIONS / "requirements.txt", platform, "3.14") for platform in WHEEL_PLATFORMS.values()}
    assert len(hashes) == len(WHEEL_PLATFORMS)


def test_the_auditor_may_invoke_exactly_the_jobs_it_catches_up_and_knows_their_names(synthesized):
    (auditor,) = [job for job in synthesized.catalog.jobs.values() if job.audits]
    catching_up = sorted(n for n in auditor.audits if synthesized.catalog.job(n).catch_up.value == "once")
    assert catching_up  # the catalog has some (the recovery jobs and the member-facing club jobs)
    functions = {env(fn).get(ENV_JOB_NAME): (logical, fn) for logical, fn in
                 of_type(synthesized.resources, "AWS::Lambda::Function").items() if env(fn).get(ENV_JOB_NAME)}
    _, auditor_fn = functions[auditor.name]
    assert {k: v for k, v in env(auditor_fn).items() if k.startswith("FUNCTION_")} == {
        f"FUNCTION_{n.upper()}": f"jobfence-{n}" for n in catching_up}
    invoked = set()
    for role, statement in role_statements(synthesized.resources):
        if "lambda:InvokeFunction" in as_list(statement["Action"]):
            targets = as_list(statement["Resource"])
            invoked |= {(role, ref_id(t)) for t in targets}
    auditor_role = ref_id(auditor_fn["Properties"]["Role"])
    assert {target for role, target in invoked if role == auditor_role} == {functions[n][0] for n in catching_up}
