"""Work queues, secrets and the health API in the synthesized template."""

from __future__ import annotations

import json

from jobfence.config import (
    ENV_TENANT_ROLE,
    PROVIDER_DEFAULT_URLS,
    config_env,
    function_env,
    provider_env,
    queue_env,
    secret_env,
    secret_name,
    table_env,
)
from tests.infra.cfn import as_list, env, function_of_role, of_type, ref_id, role_statements


def _queues_by_name(resources):
    return {q["Properties"]["QueueName"]: (k, q["Properties"]) for k, q in of_type(resources, "AWS::SQS::Queue").items()}


def test_probe_covers_queues_secrets_and_health(probe):
    # The probe exists so these constructs are under test even before a catalog entry uses them.
    assert probe.catalog.queues and any(s.secrets for s in probe.catalog.queues.values())
    assert of_type(probe.resources, "AWS::ApiGatewayV2::Stage")


def test_every_work_queue_redrives_to_a_dlq_after_at_least_five_receives(each):
    queues = _queues_by_name(each.resources)
    for name, spec in each.catalog.queues.items():
        _id, queue = queues[f"jobfence-{name}"]
        redrive = queue["RedrivePolicy"]
        dlq_id, _dlq = queues[f"jobfence-{name}-dlq"]
        assert ref_id(redrive["deadLetterTargetArn"]) == dlq_id
        assert redrive["maxReceiveCount"] == spec.max_receive_count >= 5


def test_every_queue_is_encrypted_and_refuses_plain_http(each):
    policies = of_type(each.resources, "AWS::SQS::QueuePolicy")
    ssl_only = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}:
                ssl_only.update(ref_id(q) for q in policy["Properties"]["Queues"])
    for queue_id, queue in of_type(each.resources, "AWS::SQS::Queue").items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
        assert queue_id in ssl_only, queue["Properties"]["QueueName"]


def test_visibility_is_at_least_six_worker_timeouts_and_the_source_reports_item_failures(each):
    queues = of_type(each.resources, "AWS::SQS::Queue")
    functions = of_type(each.resources, "AWS::Lambda::Function")
    mappings = of_type(each.resources, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == len(each.catalog.queues)
    for mapping in mappings.values():
        props = mapping["Properties"]
        queue = queues[ref_id(props["EventSourceArn"])]["Properties"]
        fn = functions[ref_id(props["FunctionName"])]["Properties"]
        spec = each.catalog.queues[queue["QueueName"].removeprefix("jobfence-")]
        assert fn["Handler"] == spec.handler and fn["Timeout"] == spec.worker_timeout_s
        assert queue["VisibilityTimeout"] >= 6 * fn["Timeout"]
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["ScalingConfig"] == {"MaximumConcurrency": spec.max_concurrency}
        assert props["BatchSize"] == spec.batch_size


def test_worker_environment_carries_its_tables_queues_secrets_and_providers(each):
    functions = {f["Properties"]["FunctionName"]: f for f in of_type(each.resources, "AWS::Lambda::Function").values()}
    for name, spec in each.catalog.queues.items():
        variables = env(functions[f"jobfence-{name}-worker"])
        assert variables["POWERTOOLS_SERVICE_NAME"] == spec.subsystem
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "jobfence"
        assert queue_env(name) in variables  # its own queue, to change a message's visibility
        assert variables["WORKER_QUEUE"] == name  # which pipeline the shared worker handler runs
        for table in spec.tables:
            assert table_env(table) in variables
        for queue in spec.queues:
            assert queue_env(queue) in variables
        for secret in spec.secrets:
            # a literal fixed name, never a reference (an emulator skipping secrets keeps it)
            assert variables[secret_env(secret)] == secret_name(secret)
        for provider in getattr(spec, "providers", ()):
            assert variables[provider_env(provider)] == PROVIDER_DEFAULT_URLS[provider]


def test_job_environment_carries_queue_urls_secret_names_and_provider_urls(each):
    functions = {f["Properties"]["FunctionName"]: f for f in of_type(each.resources, "AWS::Lambda::Function").values()}
    for name, spec in each.catalog.jobs.items():
        variables = env(functions[f"jobfence-{name}"])
        assert variables["JOB_NAME"] == name and "LEASES_TABLE" in variables and "RUNS_TABLE" in variables
        assert variables["POWERTOOLS_SERVICE_NAME"] == spec.subsystem
        expected = {table_env(t) for t in spec.tables} | {queue_env(q) for q in spec.queues}
        expected |= {secret_env(s) for s in spec.secrets} | {provider_env(p) for p in spec.providers}
        expected |= {config_env(c) for c in spec.config}
        # the auditor: the function names of the jobs it may catch up
        expected |= {function_env(n) for n in spec.audits if each.catalog.job(n).catch_up == "once"}
        # a job reaching a tenant-scoped table: the tenant role it assumes (docs/security.md, tenant isolation)
        if any(each.catalog.tables[t].tenant_scoped for t in spec.tables if t in each.catalog.tables):
            expected.add(ENV_TENANT_ROLE)
        extra = set(variables) - expected - {"JOB_NAME", "LEASES_TABLE", "RUNS_TABLE", "POWERTOOLS_SERVICE_NAME",
                                             "POWERTOOLS_METRICS_NAMESPACE", "RULE_ARN"}
        assert expected <= set(variables) and not extra, (name, extra)
        for secret in spec.secrets:
            assert variables[secret_env(secret)] == secret_name(secret)


def test_a_secret_is_readable_only_by_the_functions_whose_entry_lists_it(each):
    secrets = {k: v["Properties"]["Name"] for k, v in of_type(each.resources, "AWS::SecretsManager::Secret").items()}
    listed = {secret_name(s) for spec in [*each.catalog.jobs.values(), *each.catalog.queues.values()] for s in spec.secrets}
    assert set(secrets.values()) == listed
    roles = function_of_role(each.resources)
    readers: dict[str, set[str]] = {}
    for role, statement in role_statements(each.resources):
        if not any(a.startswith("secretsmanager:") for a in as_list(statement["Action"])):
            continue
        if role not in roles:
            continue  # the break-glass role: no function (tests/infra/test_infra_policies.py)
        if roles[role]["Properties"]["FunctionName"] == "jobfence-rotate_signing_key":
            continue  # the signing key's rotation function (tests/infra/test_infra_security.py)
        assert set(as_list(statement["Action"])) <= {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
        for target in as_list(statement["Resource"]):
            # grants name the secret by its fixed name: arn:...:secret:<name>-?????? (never *)
            rendered = json.dumps(target)
            (name,) = [n for n in listed if f":secret:{n}-??????" in rendered]
            readers.setdefault(name, set()).add(roles[role]["Properties"]["FunctionName"])
    for spec in [*each.catalog.jobs.values(), *each.catalog.queues.values()]:
        fn = f"jobfence-{spec.name}" if spec.name in each.catalog.jobs else f"jobfence-{spec.name}-worker"
        for name in spec.secrets:
            assert fn in readers[secret_name(name)]
    for name, functions in readers.items():
        logical = name.removeprefix("jobfence/")
        allowed = {f"jobfence-{j.name}" for j in each.catalog.jobs.values() if logical in j.secrets}
        allowed |= {f"jobfence-{q.name}-worker" for q in each.catalog.queues.values() if logical in q.secrets}
        # THEN nobody else can read it (e.g. the Discord token: only the Discord worker)
        assert functions == allowed, name


def test_health_api_is_throttled_to_ten_a_minute_and_its_function_touches_no_data(probe):
    (stage,) = of_type(probe.resources, "AWS::ApiGatewayV2::Stage").values()
    settings = stage["Properties"]["DefaultRouteSettings"]
    assert abs(settings["ThrottlingRateLimit"] * 60 - 10) < 0.01
    assert 1 <= settings["ThrottlingBurstLimit"] <= 10
    assert stage["Properties"]["StageName"] == "$default" and stage["Properties"]["AccessLogSettings"]["Format"]
    routes = {r["Properties"]["RouteKey"] for r in of_type(probe.resources, "AWS::ApiGatewayV2::Route").values()}
    assert routes == {"GET /", "GET /health"}
    functions = {f["Properties"]["FunctionName"]: (k, f) for k, f in of_type(probe.resources, "AWS::Lambda::Function").items()}
    _id, health = functions["jobfence-health"]
    assert health["Properties"]["Handler"] == "handlers.health.handler"
    # the job count it answers comes from the catalog in its own code; its environment carries nothing else
    assert set(env(health)) <= {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL"}
    role = ref_id(health["Properties"]["Role"])
    actions = {a for r, s in role_statements(probe.resources) if r == role for a in as_list(s["Action"])}
    assert actions <= {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
