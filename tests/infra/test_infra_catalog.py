"""Tables from the catalog, least privilege, and synthesis refusing bad catalog entries."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from jobfence.registry import CatalogError, JobSpec, QueueSpec, Registry, TableSpec
from jobs.catalog import CATALOG


def of_type(resources: dict, kind: str) -> dict:
    return {k: v for k, v in resources.items() if v["Type"] == kind}


def statements(resources: dict):
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in of_type(resources, kind).values():
            yield from policy["Properties"]["PolicyDocument"]["Statement"]
    for role in of_type(resources, "AWS::IAM::Role").values():
        for policy in role["Properties"].get("Policies", []):
            yield from policy["PolicyDocument"]["Statement"]


def test_one_table_per_catalog_table_with_keys_indexes_ttl_and_protection(resources):
    tables = {t["Properties"]["TableName"]: t["Properties"] for t in of_type(resources, "AWS::DynamoDB::Table").values()}
    assert set(tables) == {f"jobfence-{name}" for name in CATALOG.tables}
    for name, spec in CATALOG.tables.items():
        table = tables[f"jobfence-{name}"]
        keys = [(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]]
        assert keys == [(spec.partition_key[0], "HASH")] + ([(spec.sort_key[0], "RANGE")] if spec.sort_key else [])
        assert table["BillingMode"] == "PAY_PER_REQUEST"
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert table["SSESpecification"]["SSEEnabled"] is True
        if spec.ttl_attribute:
            assert table["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        else:
            assert "TimeToLiveSpecification" not in table
        indexes = {i["IndexName"]: i for i in table.get("GlobalSecondaryIndexes", [])}
        assert set(indexes) == {i.name for i in spec.indexes}
        for index in spec.indexes:
            assert indexes[index.name]["Projection"]["ProjectionType"] == index.projection
            assert indexes[index.name]["KeySchema"][0] == {"AttributeName": index.partition_key[0], "KeyType": "HASH"}


def test_no_iam_statement_has_a_wildcard_action(resources):
    for statement in statements(resources):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not [a for a in actions if "*" in a], statement


def test_resource_star_only_where_the_service_has_no_resource_level_permissions(resources):
    for statement in statements(resources):
        if statement["Resource"] == "*":
            assert set(statement["Action"]) <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}, statement


def test_tables_of_one_subsystem_are_never_granted_to_another_subsystems_functions(resources):
    # GIVEN each function's subsystem (POWERTOOLS_SERVICE_NAME) and each table's owner
    owner = {k: CATALOG.tables[v["Properties"]["TableName"].removeprefix("jobfence-")].subsystem
             for k, v in of_type(resources, "AWS::DynamoDB::Table").items()}
    role_subsystem = {}
    for fn in of_type(resources, "AWS::Lambda::Function").values():
        variables = fn["Properties"].get("Environment", {}).get("Variables", {})
        if "POWERTOOLS_SERVICE_NAME" in variables:
            role_subsystem[fn["Properties"]["Role"]["Fn::GetAtt"][0]] = variables["POWERTOOLS_SERVICE_NAME"]
    checked = 0
    for policy in of_type(resources, "AWS::IAM::Policy").values():
        subsystems = {role_subsystem.get(r["Ref"]) for r in policy["Properties"]["Roles"]} - {None}
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            for target in statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]:
                table = _table_of(target)
                if table in owner:
                    checked += 1
                    # THEN the table is shared or belongs to the function's own subsystem
                    assert subsystems <= {owner[table], "shared"} or owner[table] == "shared", (table, subsystems)
    assert checked > 0


def _table_of(target) -> str | None:
    if isinstance(target, dict) and "Fn::GetAtt" in target:
        return target["Fn::GetAtt"][0]
    if isinstance(target, dict) and "Fn::Join" in target:
        parts = target["Fn::Join"][1]
        if parts and isinstance(parts[0], dict) and "Fn::GetAtt" in parts[0]:
            return parts[0]["Fn::GetAtt"][0]
    return None


# -- synthesis refuses bad catalog entries, naming the entry -------------------------------------

def _unvalidated(tables=(), jobs=(), queues=()):
    """A catalog object that bypassed Registry's own checks, as a careless caller might pass."""
    return SimpleNamespace(
        tables={**CATALOG.tables, **{t.name: t for t in tables}},
        jobs={**CATALOG.jobs, **{j.name: j for j in jobs}},
        queues={**CATALOG.queues, **{q.name: q for q in queues}},
    )


def _job(**changes) -> JobSpec:
    base = next(iter(CATALOG.jobs.values()))
    return dataclasses.replace(base, **{"name": "bad_job", **changes})


def test_synthesis_refuses_a_lease_ttl_not_longer_than_timeout_plus_margin(synthesize_app):
    with pytest.raises(CatalogError, match=r"'bad_job'.*lease ttl 300s"):
        synthesize_app(_unvalidated(jobs=[_job(timeout_s=300, lease_ttl_s=300)]))


def test_synthesis_refuses_an_unknown_table(synthesize_app):
    with pytest.raises(CatalogError, match=r"'bad_job'.*unknown table 'nope'"):
        synthesize_app(_unvalidated(jobs=[_job(tables={"nope": "read"})]))


def test_synthesis_refuses_a_duplicate_name():
    # GIVEN two entries of one name (the catalog is built from a list, so this is how it arrives)
    job = next(iter(CATALOG.jobs.values()))
    with pytest.raises(CatalogError, match=rf"duplicate job name {job.name!r}"):
        Registry(tables=[], jobs=[job, job])


def test_synthesis_refuses_a_queue_visibility_under_six_worker_timeouts(synthesize_app):
    queue = QueueSpec(name="bad_queue", subsystem="commerce", handler="handlers.scheduled.handler",
                      worker_timeout_s=60, visibility_timeout_s=300)
    with pytest.raises(CatalogError, match=r"'bad_queue'.*visibility timeout 300s is under 6 x"):
        synthesize_app(_unvalidated(queues=[queue]))


def test_synthesis_refuses_a_handler_missing_from_functions(synthesize_app):
    queue = QueueSpec(name="ghost_queue", subsystem="commerce", handler="handlers.ghost.handler",
                      worker_timeout_s=60, visibility_timeout_s=360)
    with pytest.raises(CatalogError, match=r"'ghost_queue'.*handler module 'handlers.ghost' does not exist"):
        synthesize_app(_unvalidated(queues=[queue]))


def test_synthesis_refuses_a_table_of_another_subsystem(synthesize_app):
    other = TableSpec(name="ledger_x", subsystem="backoffice", partition_key=("id", "S"))
    with pytest.raises(CatalogError, match=r"'bad_job'.*belongs to subsystem 'backoffice'"):
        synthesize_app(_unvalidated(tables=[other], jobs=[_job(tables={"ledger_x": "read"})]))
