"""The grant guard of the job harnesses (jobfence.testing.grants) catches a call beyond the declared verbs."""

from __future__ import annotations

import pytest

from jobs.commerce.conversations import ConversationStore
from jobfence.testing.grants import another_party, within_grant

MINUTE = 60_000


def test_a_put_by_a_query_and_delete_entry_is_caught_and_its_own_verbs_pass(tables, clock):
    store = ConversationStore(tables["conversations"], clock)
    declared = {"conversations": "query+delete"}
    # GIVEN an entry granted query and delete only: deleting expired rows stays inside the grant
    with within_grant(tables, declared, "clean_conversations"):
        store.delete_expired(10)
    # WHEN its code writes a row THEN the guard names the table and the missing action
    with pytest.raises(AssertionError, match=r"\('conversations', 'dynamodb:PutItem'\)"):
        with within_grant(tables, declared, "clean_conversations"):
            store.open("c-1", "acct-1", clock.now_ms() + MINUTE)
    # AND a transaction's items are checked one by one (a Put inside TransactWriteItems needs PutItem)
    with pytest.raises(AssertionError, match=r"\('leases', 'dynamodb:PutItem'\)"):
        with within_grant(tables, declared, "clean_conversations"):
            tables_client = store.clients()[0]
            tables_client.transact_write_items(TransactItems=[
                {"Put": {"TableName": tables["leases"], "Item": {"job": {"S": "x"}}}}])


def test_another_partys_calls_inside_a_guarded_block_are_not_the_jobs_and_its_own_still_are(tables, dynamodb):
    declared = {"conversations": "query+delete"}
    # GIVEN a test playing the dead-run sweep (a scan of the leases table) in the middle of a job's tick
    with within_grant(tables, declared, "clean_conversations"):
        with another_party():
            dynamodb.scan(TableName=tables["leases"])
    # WHEN the job itself scans THEN it is caught all the same, also after another party acted
    with pytest.raises(AssertionError, match=r"\('leases', 'dynamodb:Scan'\)"):
        with within_grant(tables, declared, "clean_conversations"):
            with another_party():
                dynamodb.scan(TableName=tables["leases"])
            dynamodb.scan(TableName=tables["leases"])
