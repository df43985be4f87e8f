"""Tenant isolation in IAM (issue 29, item 7), evaluated offline over the synthesized template (`ops.iam_policy`).

moto's IAM evaluates no `dynamodb:LeadingKeys` and ignores every condition operator but StringEquals
(`moto/iam/policy_conditions.py`), so these decisions are the evaluator's:

- a session of a function's tenant role tagged `tenant=A` may make every call its function's catalog entry
  declares on the listing tables on A's keys (A, A#batch#shard, A#batch#r3, A#in_flight#kind), and none on
  B's, on a tenant whose id starts with A's, on a BatchGet mixing A's and B's keys, nor without keys (Scan);
- an untagged session of the same role is allowed nothing;
- the function's own role is allowed nothing on the listing tables themselves (only Query on their
  keys-only indexes), so without a tenant session it reaches no tenant row;
- only the function's own role may assume its tenant role, only naming the `tenant` tag and nothing else.
"""

from __future__ import annotations

import pytest

from jobfence.config import ENV_TENANT_ROLE
from jobfence.registry import access_actions
from jobs.catalog import CATALOG
from jobs.listings.catalog import BATCHES_TABLE, ITEMS_TABLE, QUOTA_TABLE
from ops.iam_policy import Decision, Template
from tests.infra.cfn import env, of_type, ref_id

LISTING_TABLES = (BATCHES_TABLE, ITEMS_TABLE, QUOTA_TABLE)
# every partition key shape of a tenant's rows (jobfence.work.items, .batches, .rollup, jobfence.work.fairness)
OWN_KEYS = ("acme", "acme#b-1#0", "acme#b-1#63", "acme#b-1#r3", "acme#in_flight#generation")
FOREIGN_KEYS = ("globex", "globex#b-1#0", "acme2#b-1#0", "acmeX", "globex#in_flight#generation")
ALL_ACTIONS = tuple(access_actions("get+batch_get+query+check+put+update+delete+batch_write"))


def _policies(synthesized) -> Template:
    return Template(synthesized.template.to_json())


def _table_arn(policy: Template, resources: dict, logical_name: str) -> str:
    physical = f"jobfence-{logical_name}"
    (logical,) = [k for k, t in of_type(resources, "AWS::DynamoDB::Table").items()
                  if t["Properties"]["TableName"] == physical]
    return policy.arn(logical)


def _scoped(resources: dict) -> dict[str, tuple[str, str]]:
    """Function name -> (its role, its tenant role), for every function given a tenant role."""
    out = {}
    for function in of_type(resources, "AWS::Lambda::Function").values():
        variables = env(function)
        if ENV_TENANT_ROLE in variables:
            out[function["Properties"]["FunctionName"]] = (
                ref_id(function["Properties"]["Role"]),
                ref_id(variables[ENV_TENANT_ROLE]),
            )
    return out


def _declared(function_name: str) -> dict[str, str]:
    """The listing tables' access the function's catalog entry declares."""
    for spec in [*CATALOG.jobs.values(), *CATALOG.queues.values()]:
        names = (f"jobfence-{spec.name}", f"jobfence-{spec.name}-worker")
        if function_name in names:
            return {t: a for t, a in spec.tables.items() if t in LISTING_TABLES}
    raise KeyError(function_name)


def test_every_function_that_touches_the_listing_tables_has_a_tenant_role_of_its_own(synthesized):
    scoped = _scoped(synthesized.resources)
    touching = {f"jobfence-{s.name}" for s in CATALOG.jobs.values() if set(s.tables) & set(LISTING_TABLES)}
    touching |= {f"jobfence-{s.name}-worker" for s in CATALOG.queues.values() if set(s.tables) & set(LISTING_TABLES)}
    assert set(scoped) == touching and len(touching) == 3  # both workers and reclaim_listings
    assert len({tenant_role for _, tenant_role in scoped.values()}) == len(scoped)


def test_a_tenant_session_is_allowed_its_own_keys_and_denied_every_other_tenants(synthesized):
    policy, resources = _policies(synthesized), synthesized.resources
    checked = 0
    for function_name, (_, tenant_role) in _scoped(resources).items():
        session = policy.session(tenant_role, tenant="acme")
        for table, access in _declared(function_name).items():
            arn = _table_arn(policy, resources, table)
            for action in access_actions(access):
                for key in OWN_KEYS:
                    context = {"dynamodb:LeadingKeys": (key,)}
                    assert policy.decide(session, action, arn, context) is Decision.ALLOW, (function_name, action, key)
                    checked += 1
                # a BatchGet of two of its own keys is allowed, one foreign key among them denies it all
                assert policy.decide(session, action, arn, {"dynamodb:LeadingKeys": OWN_KEYS[:2]}) is Decision.ALLOW
                for key in FOREIGN_KEYS:
                    for keys in ((key,), (OWN_KEYS[0], key)):
                        decision = policy.decide(session, action, arn, {"dynamodb:LeadingKeys": keys})
                        assert decision is not Decision.ALLOW, (function_name, action, keys)
                # a request without a partition key (a Scan, a PartiQL statement) is never allowed
                assert policy.decide(session, action, arn) is not Decision.ALLOW
            # nothing the entry does not declare
            for action in set(ALL_ACTIONS) - set(access_actions(access)) | {"dynamodb:Scan"}:
                context = {"dynamodb:LeadingKeys": OWN_KEYS[:1]}
                assert policy.decide(session, action, arn, context) is not Decision.ALLOW, (function_name, action)
    assert checked > 50


def test_an_untagged_session_of_a_tenant_role_is_allowed_nothing(synthesized):
    policy, resources = _policies(synthesized), synthesized.resources
    for _, tenant_role in _scoped(resources).values():
        untagged = policy.session(tenant_role)
        other_tag = policy.session(tenant_role, team="acme")
        for table in LISTING_TABLES:
            arn = _table_arn(policy, resources, table)
            for action in ALL_ACTIONS:
                for key in OWN_KEYS:
                    for session in (untagged, other_tag):
                        decision = policy.decide(session, action, arn, {"dynamodb:LeadingKeys": (key,)})
                        assert decision is not Decision.ALLOW


def test_the_functions_own_roles_reach_no_tenant_row_only_the_keys_only_indexes(synthesized):
    policy, resources = _policies(synthesized), synthesized.resources
    scoped = _scoped(resources)
    for function_name, (own, _) in scoped.items():
        role = policy.role(own)
        for table in LISTING_TABLES:
            arn = _table_arn(policy, resources, table)
            for action in (*ALL_ACTIONS, "dynamodb:Scan"):
                for keys in ((OWN_KEYS[0],), (FOREIGN_KEYS[0],), None):
                    context = {"dynamodb:LeadingKeys": keys} if keys else None
                    assert policy.decide(role, action, arn, context) is not Decision.ALLOW, (function_name, action)
    # the reclaimer finds open batches in the keys-only index, as itself; their items through each tenant's role
    reclaimer_role, reclaimer_tenant_role = scoped["jobfence-reclaim_listings"]
    reclaimer = policy.role(reclaimer_role)
    arn = f"{_table_arn(policy, resources, BATCHES_TABLE)}/index/by_open"
    assert policy.decide(reclaimer, "dynamodb:Query", arn) is Decision.ALLOW
    assert policy.decide(reclaimer, "dynamodb:GetItem", arn) is not Decision.ALLOW
    items_arn = _table_arn(policy, resources, ITEMS_TABLE)
    tenant = policy.session(reclaimer_tenant_role, tenant="acme")
    assert policy.decide(tenant, "dynamodb:Query", items_arn, {"dynamodb:LeadingKeys": OWN_KEYS}) is Decision.ALLOW
    assert policy.decide(tenant, "dynamodb:Query", items_arn, {"dynamodb:LeadingKeys": FOREIGN_KEYS}) is not Decision.ALLOW
    items_table = next(r for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"
                       and r["Properties"]["KeySchema"][-1]["AttributeName"] == "item_id")
    assert "GlobalSecondaryIndexes" not in items_table["Properties"]  # an item's writes pay for no index entry


@pytest.mark.parametrize("tags, allowed", [
    ({"aws:RequestTag/tenant": "acme", "aws:TagKeys": ("tenant",)}, True),
    ({}, False),  # no tag: the session could never match a key anyway, and is refused outright
    ({"aws:RequestTag/tenant": "", "aws:TagKeys": ("tenant",)}, False),
    ({"aws:RequestTag/tenant": "acme", "aws:RequestTag/team": "x", "aws:TagKeys": ("tenant", "team")}, False),
])
def test_only_the_functions_own_role_may_assume_its_tenant_role_and_only_tagged_tenant(synthesized, tags, allowed):
    policy, resources = _policies(synthesized), synthesized.resources
    scoped = _scoped(resources)
    for function_name, (own, tenant_role) in scoped.items():
        target = policy.arn(tenant_role)
        for action in ("sts:AssumeRole", "sts:TagSession"):
            decision = policy.decide(policy.role(own), action, target, tags)
            assert (decision is Decision.ALLOW) is allowed, (function_name, action, tags)
            # another function's role (the other worker), or a role from elsewhere without a grant: never
            for other, (other_own, _) in scoped.items():
                if other != function_name:
                    assert policy.decide(policy.role(other_own), action, target, tags) is not Decision.ALLOW
            assert policy.decide(policy.foreign("SomeRole"), action, target, tags) is not Decision.ALLOW
