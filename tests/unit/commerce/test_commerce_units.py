"""Small pure parts of the commerce jobs: keys, back-off, the branch driver, authority."""

from __future__ import annotations

import pytest
from aws_lambda_powertools import Logger

from jobfence.errors import LeaseLost
from jobs.commerce.account_operations import AccountOperations, NotAuthorized, Requester, RequesterKind
from jobs.commerce.deferred_payments import Initiator, capture_key
from jobs.commerce.financial_operations import idempotency_key, retry_delay_ms
from jobs.commerce.financial_recovery import recover_financial_operations

LOG = Logger(service="unit")


def test_keys_are_namespaced_by_initiator():
    assert capture_key(Initiator.SAFETY_NET, "i1") == "safetynet:i1"
    assert capture_key(Initiator.BUYER, "i1") == "buyer:i1"
    assert idempotency_key("operator", "op-1") == "operator:op-1"


def test_retry_back_off_doubles_and_is_capped():
    assert [retry_delay_ms(n) // 60_000 for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert retry_delay_ms(20) == 6 * 3_600_000


def gen(name, n, fail_at=None, exc=RuntimeError):
    for i in range(n):
        if i == fail_at:
            raise exc(f"{name} failed")
        yield {f"{name}_batch": 1}


def test_branches_interleave_one_batch_at_a_time():
    out = list(recover_financial_operations(gen("a", 2), gen("b", 3), LOG))
    assert out == [{"a_batch": 1}, {"b_batch": 1}, {"a_batch": 1}, {"b_batch": 1}, {"b_batch": 1}]


@pytest.mark.parametrize(
    "rec_fail, ret_fail, raised",
    [(None, None, None), (0, None, "a failed"), (None, 1, "b failed"), (1, 0, "a failed")],
)
def test_both_branches_are_awaited_and_the_financial_error_wins(rec_fail, ret_fail, raised):
    driver = recover_financial_operations(gen("a", 3, rec_fail), gen("b", 3, ret_fail), LOG)
    seen = []
    if raised:
        with pytest.raises(RuntimeError, match=raised):
            for counts in driver:
                seen.append(counts)
    else:
        seen = list(driver)
    assert seen.count({"a_batch": 1}) == (3 if rec_fail is None else rec_fail)
    assert seen.count({"b_batch": 1}) == (3 if ret_fail is None else ret_fail)


def test_a_lost_lease_stops_both_branches_at_once():
    driver = recover_financial_operations(gen("a", 3, 1, exc=lambda m: LeaseLost("j", "l")), gen("b", 5), LOG)
    with pytest.raises(LeaseLost):
        list(driver)


def test_authority_is_checked_before_anything_is_read():
    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError("nothing may be touched without authority")

    ops = AccountOperations(Untouchable(), Untouchable(), Untouchable())
    with pytest.raises(NotAuthorized):
        ops.resume_account_operation("acc", Requester(RequesterKind.CUSTOMER, "other"))
    with pytest.raises(NotAuthorized):
        ops.resume_account_operation("acc", Requester(RequesterKind.OPERATOR, "op", frozenset({"support"})))
