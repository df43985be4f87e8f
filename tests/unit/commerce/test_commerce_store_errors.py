"""Commerce stores under a lost reply: a read timeout is a classified `StoreError`, never an `AttributeError`.

botocore's `ReadTimeoutError` has `response = None`, so pynamodb's `cause_response_code` raised
`AttributeError` in every commerce store that read it; every store now classifies through
`jobfence.dynamo` (the same defect the core stores had, issue 10's defect 5).
"""

from __future__ import annotations

import pytest

from jobfence.errors import StoreError
from jobs.commerce.conversations import ConversationStore
from jobs.commerce.dpop_proofs import DpopProofStore
from tests.aws_faults import Faults
from tests.support import create_catalog_tables


def test_a_dpop_proof_whose_reply_timed_out_is_a_classified_store_error(dynamodb, clock):
    tables = create_catalog_tables(dynamodb, names={"dpop_proofs"})
    store = DpopProofStore(tables["dpop_proofs"], clock)
    Faults(store.clients()[0]).reply_lost("PutItem", times=10)
    # (the first try was applied, the retry refused by it: nobody can tell a replay from our own try)
    with pytest.raises(StoreError, match="recording a DPoP proof failed: reply_lost, then refused") as raised:
        store.record("jti-1", clock.now_ms() + 60_000)
    assert raised.value.__cause__ is not None and raised.value.unanswered


def test_an_expired_conversation_whose_delete_timed_out_is_a_classified_store_error(dynamodb, clock):
    tables = create_catalog_tables(dynamodb, names={"conversations"})
    store = ConversationStore(tables["conversations"], clock)
    store.open("c-1", "acct-1", clock.now_ms() + 1_000)
    clock.advance(ms=2_000)
    Faults(store.clients()[0]).reply_lost("DeleteItem", times=10, refused_too=True)
    with pytest.raises(StoreError, match="deleting a conversation failed: ReadTimeoutError"):
        store.delete_expired(10)
