"""Tables from the catalog, least privilege, and synthesis refusing bad catalog entries."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from jobfence.config import ENV_TENANT_ROLE
from jobfence.registry import ACCESS_VERBS, CatalogError, JobSpec, QueueSpec, TableSpec, access_verbs
from jobs.catalog import CATALOG
from tests.infra.cfn import as_list, function_of_role, env, of_type, ref_id, role_statements


def test_one_table_per_catalog_table_with_keys_indexes_ttl_and_protection(each):
    tables = {t["Properties"]["TableName"]: t["Properties"] for t in of_type(each.resources, "AWS::DynamoDB::Table").values()}
    assert set(tables) == {f"jobfence-{name}" for name in each.catalog.tables}
    for name, spec in each.catalog.tables.items():
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


def test_every_table_is_deletion_protected_and_retained(each):
    """Issue 29, low: no deletion protection on the tables (a DeleteTable call, by anyone, dropped the state)."""
    tables = of_type(each.resources, "AWS::DynamoDB::Table")
    assert len(tables) == len(each.catalog.tables)
    for logical, table in tables.items():
        assert table["Properties"]["DeletionProtectionEnabled"] is True, logical
        assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain"), logical


def test_no_iam_statement_has_a_wildcard_action(each):
    checked = 0
    for _role, statement in role_statements(each.resources):
        checked += 1
        assert not [a for a in as_list(statement["Action"]) if "*" in a], statement
    assert checked


def test_resource_star_only_where_the_service_has_no_resource_level_permissions(each):
    for _role, statement in role_statements(each.resources):
        if "*" in as_list(statement["Resource"]):
            assert set(as_list(statement["Action"])) <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}, statement


def test_domain_table_grants_follow_declared_access_on_the_table_and_its_indexes(each):
    # GIVEN every function and the tables its catalog entry declares
    table_ids = {k: v["Properties"]["TableName"].removeprefix("jobfence-")
                 for k, v in of_type(each.resources, "AWS::DynamoDB::Table").items()}
    roles = function_of_role(each.resources)
    # a tenant-scoped table's grants are its function's tenant role's (and Query on its indexes, the function's own)
    acting_for = {ref_id(env(f)[ENV_TENANT_ROLE]): r for r, f in roles.items() if ENV_TENANT_ROLE in env(f)}
    granted: dict[tuple[str, str], set[str]] = {}
    for role, statement in role_statements(each.resources):
        role = acting_for.get(role, role)
        for target in as_list(statement["Resource"]):
            table = table_ids.get(ref_id(target))
            if table and table not in ("leases", "runs"):
                granted.setdefault((role, table), set()).update(as_list(statement["Action"]))
                # index grants name the index: never index/*
                if isinstance(target, dict) and "Fn::Join" in target:
                    assert not target["Fn::Join"][1][-1].endswith("/*"), target
    for role, fn in roles.items():
        spec = _spec_of(each.catalog, fn)
        if spec is None:
            continue
        declared = dict(spec.tables)
        # THEN exactly the declared tables are granted ...
        assert {t for (r, t) in granted if r == role} == {t for t in declared if t not in ("leases", "runs")}, spec.name
        for table, access in declared.items():
            if table in ("leases", "runs"):
                continue
            actions = granted[(role, table)]
            # ... one action per declared verb and nothing else (a delete-only entry cannot put,
            # a query-only one cannot get, and only declared scanners scan)
            assert actions == {ACCESS_VERBS[verb] for verb in access_verbs(access)}, (spec.name, table, access)


def _spec_of(catalog, fn):
    variables = env(fn)
    if "JOB_NAME" in variables:
        return catalog.job(variables["JOB_NAME"])
    name = fn["Properties"].get("FunctionName", "")
    for queue in catalog.queues.values():
        if name == f"jobfence-{queue.name}-worker":
            return queue
    return None


def test_tables_of_one_subsystem_are_never_granted_to_another_subsystems_functions(each):
    # GIVEN each function's subsystem (POWERTOOLS_SERVICE_NAME) and each table's owner
    owner = {k: each.catalog.tables[v["Properties"]["TableName"].removeprefix("jobfence-")].subsystem
             for k, v in of_type(each.resources, "AWS::DynamoDB::Table").items()}
    roles = function_of_role(each.resources)
    checked = 0
    for role, statement in role_statements(each.resources):
        if role not in roles:
            continue  # the break-glass role: no function (tests/infra/test_infra_policies.py)
        subsystem = env(roles[role]).get("POWERTOOLS_SERVICE_NAME")
        for target in as_list(statement["Resource"]):
            table = ref_id(target)
            if table in owner:
                checked += 1
                # THEN the table is shared or belongs to the function's own subsystem
                assert owner[table] in ("shared", subsystem), (table, subsystem)
    assert checked > 0


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
    return dataclasses.replace(base, **{"name": "bad_job", "unfenced": {}, **changes})


def test_synthesis_refuses_a_lease_ttl_not_longer_than_timeout_plus_margin(synthesize_app):
    with pytest.raises(CatalogError, match=r"'bad_job'.*lease ttl 300s"):
        synthesize_app(_unvalidated(jobs=[_job(timeout_s=300, lease_ttl_s=300)]))


def test_synthesis_refuses_an_unknown_table(synthesize_app):
    with pytest.raises(CatalogError, match=r"'bad_job'.*unknown table 'nope'"):
        synthesize_app(_unvalidated(jobs=[_job(tables={"nope": "read"})]))


def test_synthesis_refuses_a_scan_of_a_tenant_scoped_table(synthesize_app):
    # a Scan names no partition key: the tenant role's LeadingKeys condition could not scope it
    with pytest.raises(CatalogError, match=r"'bad_job'.*'listing_items' is tenant-scoped"):
        synthesize_app(_unvalidated(jobs=[_job(subsystem="listings", tables={"listing_items": "query+scan"})]))


def test_synthesis_refuses_a_duplicate_name(synthesize_app):
    # GIVEN one job entry listed twice (a catalog is assembled from per-subsystem lists)
    job = next(iter(CATALOG.jobs.values()))
    twice = _unvalidated()
    twice.jobs = {**twice.jobs, "copied_entry": job}
    with pytest.raises(CatalogError, match=rf"duplicate job name {job.name!r}"):
        synthesize_app(twice)


def test_synthesis_refuses_a_job_and_queue_of_one_name(synthesize_app):
    job = next(iter(CATALOG.jobs.values()))
    queue = QueueSpec(name=job.name, subsystem=job.subsystem, handler="handlers.scheduled.handler",
                      worker_timeout_s=60, visibility_timeout_s=360)
    with pytest.raises(CatalogError, match=rf"{job.name!r}: a job and a queue cannot share a name"):
        synthesize_app(_unvalidated(queues=[queue]))


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


def test_synthesis_refuses_a_schedule_it_cannot_evaluate(synthesize_app):
    with pytest.raises(CatalogError, match=r"'bad_job'.*EventBridge cron has 6 fields"):
        synthesize_app(_unvalidated(jobs=[_job(schedule="cron(0 * * * ?)")]))


def test_synthesis_refuses_an_access_that_is_not_known_verbs(synthesize_app):
    # GIVEN the retired coarse level, and a verb with a typo
    for access in ("read_write", "query+delet"):
        with pytest.raises(CatalogError, match=r"'bad_job'.*is not \"\+\"-joined verbs of"):
            synthesize_app(_unvalidated(jobs=[_job(tables={"club_memberships": access})]))


def test_access_verbs_are_each_one_action_and_the_bundles_hold_no_scan():
    assert access_verbs("query+delete") == {"query", "delete"}
    assert access_verbs("read") == {"get", "batch_get", "query", "check"}
    assert access_verbs("read+write+scan") == set(ACCESS_VERBS)
    assert "scan" not in access_verbs("read+write")


def test_synthesis_refuses_a_scan_of_a_table_keyed_by_job(synthesize_app):
    # a Scan carries no partition key, so LeadingKeys could not confine it to the job's own rows
    with pytest.raises(CatalogError, match=r"'bad_job'.*'club_outbox' is keyed by job"):
        synthesize_app(_unvalidated(jobs=[_job(tables={"club_outbox": "query+scan"})]))
