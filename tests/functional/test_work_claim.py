"""The claim: one conditional update of a row born holding its unit, a transaction only for rows holding none.

The real item store and worker against moto in-process (`ops.harness`); every
request the store sends is seen by `tests.aws_faults.Faults` on its own clients (the `faults` fixture).
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from jobfence.work import BatchRef, ClaimState, ItemKey, ItemStatus, Tally

B = BatchRef("acme", "b1")


def key(i: int, ref: BatchRef = B) -> ItemKey:
    return ItemKey.of(ref, f"i{i:05d}", 1)


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 1_000})


def test_items_holding_their_unit_are_claimed_by_one_update_each_without_a_read(rig, faults):
    # GIVEN three items born holding their unit (the tenant had quota at the put)
    rig.submit("acme", "b1", 3)
    faults.sent.clear()
    # WHEN they are claimed
    claims = rig.store.items.claim([key(0), key(1), key(2)], "generation", 5)
    # THEN each is claimed by one UpdateItem, its input and attempts from the row it returned: no read,
    # no transaction, no write to the quota row
    assert [c.state for c in claims.values()] == [ClaimState.CLAIMED] * 3
    assert [(c.attempts, c.payload) for c in claims.values()] == [(1, {"title": f"thing {i}"}) for i in range(3)]
    assert [op for op, _ in faults.sent] == ["UpdateItem"] * 3
    rows = rig.store.batches.describe_batch(B).items
    assert [(r.status, r.claim_token) for r in rows] == [(ItemStatus.RUNNING, c.token) for c in claims.values()]
    assert rig.quota.balance("acme").reserved == 3  # reserved once, at the put


def test_a_refused_claim_says_why_from_the_row_it_returned(rig, dynamodb, tables):
    # GIVEN items in each state a claim must refuse: running, at the attempts cap, the other pipeline's, missing
    rig.submit("acme", "b1", 3)
    rig.submit("acme", "p1", 1, kind="publish")
    running = rig.store.items.claim([key(0)], "generation", 5)[key(0)]
    dynamodb.update_item(
        TableName=tables["listing_items"], Key={"batch_key": {"S": key(1).partition}, "item_id": {"S": "i00001"}},
        UpdateExpression="SET attempts = :five", ExpressionAttributeValues={":five": {"N": "5"}},
    )
    publish = key(0, BatchRef("acme", "p1"))
    missing = key(9)
    # WHEN they are claimed (with one claimable item among them)
    claims = rig.store.items.claim([key(0), key(1), publish, missing, key(2)], "generation", 5)
    # THEN each refusal is read from the old image, and only the claimable one was claimed
    assert {k: (c.state, c.reason) for k, c in claims.items()} == {
        key(0): (ClaimState.DUPLICATE, "item is running"),
        key(1): (ClaimState.DUPLICATE, "attempts cap reached"),
        publish: (ClaimState.WRONG_PIPELINE, "item belongs to the publish pipeline"),
        missing: (ClaimState.NOT_FOUND, "no such item for this tenant and batch"),
        key(2): (ClaimState.CLAIMED, ""),
    }
    # AND the refused rows are as they were
    assert rig.store.items.item(key(0)).claim_token == running.token
    assert rig.store.items.item(key(1)).status is ItemStatus.PENDING
    assert rig.store.items.item(publish).status is ItemStatus.PENDING


def test_items_with_and_without_a_unit_are_claimed_together(rig, faults):
    # GIVEN a tenant with one unit: its first item is born holding it, the second holding none; then a grant
    rig.quota.grant("initech", 1)
    ref = BatchRef("initech", "b1")
    rig.submit("initech", "b1", 2)
    assert [r.quota for r in rig.store.batches.describe_batch(ref).items] == ["reserved", None]
    rig.quota.grant("initech", 5)
    faults.sent.clear()
    # WHEN both are claimed
    claims = rig.store.items.claim([key(0, ref), key(1, ref)], "generation", 5)
    # THEN the first by its update, the second in a transaction that reserves its unit with it
    assert [c.state for c in claims.values()] == [ClaimState.CLAIMED] * 2
    assert [op for op, _ in faults.sent] == ["UpdateItem", "UpdateItem", "BatchGetItem", "TransactWriteItems"]
    assert rig.quota.balance("initech").reserved == 2


def test_a_claim_refused_for_good_sends_no_more_claims_and_every_message_comes_back(rig, faults):
    # GIVEN the items table refuses access (a revoked grant) on the first claim
    rig.submit("acme", "b1", 3)
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "UpdateItem")
    faults.refused_before("UpdateItem", denied)
    faults.sent.clear()
    # WHEN the worker processes the three wake-ups
    result = rig.deliver(n=10)
    # THEN one claim was sent, every message is a batch item failure with the reason, and no row moved
    assert [op for op, _ in faults.sent if op == "UpdateItem"][:1] == ["UpdateItem"]
    assert sum(1 for op, params in faults.sent if op == "UpdateItem" and "running" in str(params)) == 1
    assert len(result.outcomes) == 3 and not any(o.ok for o in result.outcomes.values())
    assert all("AccessDenied" in o.reason for o in result.outcomes.values())
    assert {r.status for r in rig.store.batches.describe_batch(B).items} == {ItemStatus.PENDING}
    assert result.counts.get(Tally.COMPLETED) is None
