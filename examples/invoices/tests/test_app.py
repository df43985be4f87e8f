"""The app synthesizes as `npx cdk synth` builds it, cdk-nag packs on: its resources come from the catalog."""

from __future__ import annotations

import json
import pathlib
import tempfile

import pytest
from aws_cdk import App
from aws_cdk.assertions import Match, Template

from app import FUNCTIONS
from invoices.catalog import CATALOG
from jobfence_cdk import SKIP_BUNDLING_CONTEXT, build_app


@pytest.fixture(scope="module")
def template() -> dict:
    outdir = pathlib.Path(tempfile.mkdtemp(prefix="cdk-"))
    app = App(context={**SKIP_BUNDLING_CONTEXT, "prefix": "invoices", "nag": "true"}, outdir=str(outdir))
    build_app(app, CATALOG, functions_dir=FUNCTIONS)
    app.synth()  # raises if cdk-nag reports an unacknowledged finding
    report = json.loads((outdir / "validation-report.json").read_text())
    reports = {r["pluginName"]: r for r in report["pluginReports"]}
    assert set(reports) == {"AwsSolutions", "Serverless"}
    assert all(r["conclusion"] == "success" and r["violations"] == [] for r in reports.values()), reports
    return json.loads((outdir / "invoices.template.json").read_text())


def test_the_job_has_its_rule_and_its_function(template):
    t = Template.from_json(template)
    t.has_resource_properties("AWS::Events::Rule", {"Name": "invoices-mark_overdue_invoices",
                                                    "ScheduleExpression": "rate(1 hour)", "State": "ENABLED"})
    t.has_resource_properties("AWS::Lambda::Function", {
        "FunctionName": "invoices-mark_overdue_invoices", "Handler": "handlers.scheduled.handler", "Timeout": 120,
        "Environment": {"Variables": Match.object_like({"JOB_NAME": "mark_overdue_invoices"})},
    })


def test_the_invoices_table_has_its_sparse_index(template):
    Template.from_json(template).has_resource_properties("AWS::DynamoDB::Table", {
        "TableName": "invoices-invoices",
        "GlobalSecondaryIndexes": [Match.object_like({"IndexName": "open_by_due"})],
    })


def test_the_jobs_role_may_query_and_update_invoices_and_nothing_more_on_them(template):
    resources = template["Resources"]
    invoices = next(k for k, r in resources.items()
                    if r["Type"] == "AWS::DynamoDB::Table" and r["Properties"]["TableName"] == "invoices-invoices")
    actions = set()
    for policy in (r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"):
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if invoices in json.dumps(statement.get("Resource")):
                found = statement["Action"]
                actions.update([found] if isinstance(found, str) else found)
    assert actions == {"dynamodb:Query", "dynamodb:UpdateItem"}
