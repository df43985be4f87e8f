"""The synthesized template deploys into moto's CloudFormation (in-process), as the local
runtime deploys it: every job's rule and function exist there with their full environment, and every
table deletion-protected."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from jobfence.config import secret_env, secret_name
from tests.infra.cfn import env, of_type

BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("placeholder.py", "")
    return buffer.getvalue()


def _code_locations(resources: dict):
    for fn in of_type(resources, "AWS::Lambda::Function").values():
        yield fn["Properties"]["Code"]
    for layer in of_type(resources, "AWS::Lambda::LayerVersion").values():
        yield layer["Properties"]["Content"]


def test_template_deploys_into_the_emulator_with_every_rule_and_environment(each, aws):
    template = each.template.to_json()
    # GIVEN a bootstrapped emulator holding the assets (like `cdk bootstrap` + asset publishing)
    aws.client("ssm").put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value="30", Type="String")
    s3 = aws.client("s3")
    for code in _code_locations(template["Resources"]):
        bucket = code["S3Bucket"]["Fn::Sub"].replace("${AWS::AccountId}", "123456789012").replace("${AWS::Region}", aws.region_name)
        if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key=code["S3Key"], Body=_zip())
    # WHEN the stack is created
    cfn = aws.client("cloudformation")
    cfn.create_stack(StackName="jobfence", TemplateBody=json.dumps(template), Capabilities=["CAPABILITY_NAMED_IAM"])
    # THEN it completes, and each job's rule and function are there with the catalog's environment
    assert cfn.describe_stacks(StackName="jobfence")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
    rules = {r["Name"]: r for r in aws.client("events").list_rules(NamePrefix="jobfence-")["Rules"]}
    functions = {f["FunctionName"]: f for f in aws.client("lambda").list_functions()["Functions"]}
    for name, spec in each.catalog.jobs.items():
        assert rules[f"jobfence-{name}"]["ScheduleExpression"] == spec.schedule
        variables = functions[f"jobfence-{name}"]["Environment"]["Variables"]
        assert variables["JOB_NAME"] == name
        assert variables["RULE_ARN"] == rules[f"jobfence-{name}"]["Arn"]  # resolved as the rule's own ARN
        for secret in spec.secrets:  # literals survive although the emulator skips Secret resources
            assert variables[secret_env(secret)] == secret_name(secret)
    deployed = {f["FunctionName"] for f in functions.values()}
    assert deployed == {f["Properties"]["FunctionName"] for f in of_type(template["Resources"], "AWS::Lambda::Function").values()}
    for fn in of_type(template["Resources"], "AWS::Lambda::Function").values():
        assert set(functions[fn["Properties"]["FunctionName"]]["Environment"]["Variables"]) == set(env(fn))
    # AND every table is there deletion-protected: DeleteTable is refused
    dynamodb = aws.client("dynamodb")
    for name in each.catalog.tables:
        assert dynamodb.describe_table(TableName=f"jobfence-{name}")["Table"]["DeletionProtectionEnabled"] is True
    with pytest.raises(ClientError, match="DeletionProtectionEnabled"):
        dynamodb.delete_table(TableName=f"jobfence-{next(iter(each.catalog.tables))}")
    # AND a function's tenant role resolves to a role of the stack (the local runtime's workers assume it)
    import re

    from jobfence.config import ENV_TENANT_ROLE, TENANT_ROLE_ARN_PATTERN

    for fn in functions.values():
        arn = fn["Environment"]["Variables"].get(ENV_TENANT_ROLE)
        if arn:
            assert re.fullmatch(TENANT_ROLE_ARN_PATTERN, arn), arn
            assert aws.client("iam").get_role(RoleName=arn.rsplit("/", 1)[1])["Role"]["Arn"] == arn
