"""The operators' audit table: created by the construct, rows expire, and no function may touch it."""

from __future__ import annotations

import json

from jobfence.registry import AUDIT_TABLE
from tests.infra.cfn import as_list, of_type, ref_id, role_statements


def _audit_table(resources: dict) -> tuple[str, dict]:
    (found,) = [(k, v) for k, v in of_type(resources, "AWS::DynamoDB::Table").items()
                if v["Properties"]["TableName"] == "jobfence-audit"]
    return found


def test_the_audit_table_is_created_with_its_subject_index_and_rows_that_expire(each):
    _, table = _audit_table(each.resources)
    props = table["Properties"]
    assert [(k["AttributeName"], k["KeyType"]) for k in props["KeySchema"]] == [("month", "HASH"), ("entry", "RANGE")]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    (index,) = props["GlobalSecondaryIndexes"]
    assert index["IndexName"] == AUDIT_TABLE.indexes[0].name
    assert [k["AttributeName"] for k in index["KeySchema"]] == ["subject", "entry"]
    assert props["DeletionProtectionEnabled"] is True and props["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True}


def test_no_role_of_the_stack_is_granted_anything_on_the_audit_table(each):
    # the operators write it with their own credentials: no function (nor any other role here) reads or writes it
    logical, _ = _audit_table(each.resources)
    named = [statement for _, statement in role_statements(each.resources)
             if any(ref_id(target) == logical for target in as_list(statement["Resource"]))]
    assert named == []
    dynamo_anywhere = [statement for _, statement in role_statements(each.resources)
                       if "*" in as_list(statement["Resource"])
                       and any(a.startswith("dynamodb:") for a in as_list(statement["Action"]))]
    assert dynamo_anywhere == []
    managed = of_type(each.resources, "AWS::IAM::ManagedPolicy")
    assert logical not in json.dumps(managed)
