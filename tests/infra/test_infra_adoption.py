"""Incremental adoption (issue 30, item 6): `JobfenceJobs` added to a stack an app already has, on the app's
runtime, architecture and handler, over tables the app already has; and `build_app`'s stack, which holds one,
keeps the logical ids it had (a deployed stack updates in place: its retained, named tables are never replaced).

The app is `adopted` (tests/infra/conftest.py): the invoices example's catalog and code asset, its handler moved
to `entrypoints/tick.py`, in a stack of its own with a queue and a ledger table of its own; the invoices table is
imported by name. Its grants are evaluated offline (`ops.iam_policy`).
"""

from __future__ import annotations

import pytest

from jobfence.config import ENV_LEASES_TABLE, table_env
from jobfence.registry import CatalogError, access_actions
from jobfence_cdk.code import WHEEL_PLATFORMS, layer_asset_hash
from ops.iam_policy import Decision, Template
from tests.infra.cfn import env, function_of_role, of_type, ref_id
from tests.infra.conftest import ADOPTED_HANDLER, IMPORTED_INVOICES

JOB = "mark_overdue_invoices"
IMPORTED_ARN = f"arn:aws:dynamodb:us-east-1:123456789012:table/{IMPORTED_INVOICES}"


def _job_function(adopted) -> tuple[str, dict]:
    (found,) = [(k, f) for k, f in of_type(adopted.resources, "AWS::Lambda::Function").items()
                if f["Properties"]["FunctionName"] == f"billing-{JOB}"]
    return found


def _job_role(adopted) -> str:
    (role,) = [role for role, fn in function_of_role(adopted.resources).items()
               if fn["Properties"]["FunctionName"] == f"billing-{JOB}"]
    return role


def test_the_jobs_join_the_apps_own_stack_beside_its_resources(adopted):
    # GIVEN an app's stack holding a queue and a table of its own WHEN JobfenceJobs is added to it
    # THEN one template holds the app's resources and the job's rule, function and dead letters
    from aws_cdk import Stack

    assert [s.node.id for s in adopted.stack.node.root.node.children if isinstance(s, Stack)] == ["billing"]
    queues = {q["Properties"]["QueueName"] for q in of_type(adopted.resources, "AWS::SQS::Queue").values()}
    assert {"billing-payments", f"billing-{JOB}-dlq"} <= queues
    adopted.template.has_resource_properties("AWS::Events::Rule", {"Name": f"billing-{JOB}", "State": "ENABLED"})
    assert _job_function(adopted)[0] in adopted.resources
    assert adopted.stack.resolve(adopted.jobs.jobs[JOB].function.function_name) == {"Ref": _job_function(adopted)[0]}


def test_every_function_runs_the_apps_runtime_architecture_and_handler(adopted):
    functions = of_type(adopted.resources, "AWS::Lambda::Function")
    # THEN every function is python3.13 on x86_64 (not the defaults, python3.14 on arm64)
    assert functions and {f["Properties"]["Runtime"] for f in functions.values()} == {"python3.13"}
    assert {tuple(f["Properties"]["Architectures"]) for f in functions.values()} == {("x86_64",)}
    # AND the job runs the app's handler, whose module is all the asset has (no handlers/scheduled.py)
    assert _job_function(adopted)[1]["Properties"]["Handler"] == ADOPTED_HANDLER
    # AND the layer is built for that runtime and architecture, and its hash names both (never another's bundle)
    (layer,) = of_type(adopted.resources, "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["x86_64"]
    requirements = adopted.jobs.code.functions_dir / "requirements.txt"
    assert len({layer_asset_hash(requirements, platform, python)
                for platform in WHEEL_PLATFORMS.values() for python in ("3.13", "3.14")}) == 4


def test_an_existing_table_is_used_and_not_created(adopted):
    tables = of_type(adopted.resources, "AWS::DynamoDB::Table")
    # THEN the only tables are jobfence's own three and the app's ledger, once: no invoices table is created
    assert sorted(t["Properties"]["TableName"] for t in tables.values()) == \
        ["billing-audit", "billing-leases", "billing-ledger", "billing-runs"]
    (ledger_id,) = [k for k, t in tables.items() if t["Properties"]["TableName"] == "billing-ledger"]
    assert adopted.stack.resolve(adopted.ledger.table_name) == {"Ref": ledger_id}
    # AND the job's environment names the existing tables: the imported one by its name, the app's by its Ref
    variables = env(_job_function(adopted)[1])
    assert variables[table_env("invoices")] == IMPORTED_INVOICES
    assert ref_id(variables[table_env("ledger")]) == ledger_id
    assert ref_id(variables[ENV_LEASES_TABLE]) in tables


def test_the_grants_on_existing_tables_are_the_catalogs_and_no_more(adopted):
    policy = Template(adopted.template.to_json())
    role = policy.role(_job_role(adopted))
    ledger = policy.arn(ref_id(adopted.stack.resolve(adopted.ledger.table_arn)))
    entry = adopted.catalog.job(JOB)
    # THEN the job may do exactly its declared actions on the imported table and its catalog index
    for action in access_actions(entry.tables["invoices"]):  # query+update
        assert policy.decide(role, action, IMPORTED_ARN) is Decision.ALLOW, action
    assert policy.decide(role, "dynamodb:Query", f"{IMPORTED_ARN}/index/open_by_due") is Decision.ALLOW
    for action in ("dynamodb:Scan", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:DescribeTable"):
        assert policy.decide(role, action, IMPORTED_ARN) is Decision.IMPLICIT_DENY, action
    assert policy.decide(role, "dynamodb:Query", f"{IMPORTED_ARN}/index/other") is Decision.IMPLICIT_DENY
    # AND on the app's own ledger only its declared put
    assert access_actions(entry.tables["ledger"]) == ("dynamodb:PutItem",)
    assert policy.decide(role, "dynamodb:PutItem", ledger) is Decision.ALLOW
    for action in ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan"):
        assert policy.decide(role, action, ledger) is Decision.IMPLICIT_DENY, action
    # AND nothing on a table it was not given
    other = IMPORTED_ARN.replace(IMPORTED_INVOICES, "billing-payments")
    assert policy.decide(role, "dynamodb:Query", other) is Decision.IMPLICIT_DENY


@pytest.mark.slow  # constructs (jsii)
def test_a_bad_adoption_is_refused_before_anything_is_added():
    from aws_cdk import App, Stack
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_lambda as lambda_

    from jobfence_cdk import SKIP_BUNDLING_CONTEXT, JobfenceJobs
    from tests.infra.conftest import EXAMPLE_FUNCTIONS, example_catalog

    stack = Stack(App(context=SKIP_BUNDLING_CONTEXT), "billing")
    catalog = example_catalog()

    def add(**options):
        JobfenceJobs(stack, "Jobfence", catalog=catalog, functions_dir=EXAMPLE_FUNCTIONS, prefix="billing", **options)

    imported = dynamodb.Table.from_table_name(stack, "Imported", IMPORTED_INVOICES)
    wrong_keys = dynamodb.Table(
        stack, "WrongKeys", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING)
    )
    # GIVEN an existing table the catalog does not declare, or one whose keys are not its spec's
    with pytest.raises(CatalogError, match=r"existing table 'payments': the catalog declares no such table"):
        add(tables={"payments": imported})
    with pytest.raises(CatalogError, match=r"existing table 'ledger': its keys \(\('id', 'S'\), None\) are not"):
        add(tables={"ledger": wrong_keys})
    # GIVEN a runtime that is not Python's, or a handler module the asset does not hold
    with pytest.raises(ValueError, match=r"runtime 'nodejs22.x': jobfence functions run on a Lambda Python runtime"):
        add(runtime=lambda_.Runtime.NODEJS_22_X)
    with pytest.raises(CatalogError, match=r"handler module 'entrypoints.tick' does not exist under functions/"):
        add(handler=ADOPTED_HANDLER)
    # THEN each is refused and the stack holds only what the app put there
    assert sorted(c.node.id for c in stack.node.children) == ["Imported", "WrongKeys"]


def test_build_apps_stack_holds_one_jobfencejobs_and_keeps_its_logical_ids(synthesized):
    from jobfence_cdk import JobfenceJobs

    # GIVEN build_app's stack WHEN its construct and template are read
    jobs = synthesized.stack.jobfence
    assert isinstance(jobs, JobfenceJobs) and jobs.node.id == "Default"
    assert synthesized.stack.jobs is jobs.jobs and synthesized.stack.tables is jobs.tables
    # THEN resources keep the logical ids they had before the construct existed (CDK leaves "Default" out), so
    # an update never replaces a retained, named table (which would fail) nor a function or rule
    assert {"TablesLeases8A459FA5", "TablesRunsB40D77DF", "JobCleanConversationsJobFunction85EB3E32",
            "JobCleanConversationsSchedule449DBC92", "CodeDependenciesD133DBF2"} <= set(synthesized.resources)
    assert "TablesLeasesNameFAEF0775" in synthesized.template.to_json()["Outputs"]
