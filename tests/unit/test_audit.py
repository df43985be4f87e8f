"""The audit table's store: one row per entry however often it is sent, newest first, by subject."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from jobfence_ops.audit import (
    AuditEntry,
    AuditLog,
    AuditedError,
    Operator,
    audited,
    job_subject,
    new_entry_id,
    proxied,
)
from tests.support import create_catalog_tables

HOUR = 3_600_000
T0 = 1_764_806_400_000  # 2025-12-04 00:00 UTC


@pytest.fixture
def log(dynamodb):
    return AuditLog(dynamodb, create_catalog_tables(dynamodb, ["audit"])["audit"])


def entry(at: int, action: str = "run now", subject: str = "job:a", actor: str = "local:jane", **kw) -> AuditEntry:
    return AuditEntry(new_entry_id(), at, actor, actor, action, subject, "ran: ran", **kw)


def test_a_re_sent_write_of_the_same_entry_is_one_row(log, dynamodb):
    one = entry(T0)
    log.write(one)
    log.write(one)  # a retry after a timeout: the same id and time
    assert log.recent(T0, 10) == [one]
    # and a re-sent copy never rewrites what was recorded first
    log.write(dataclasses.replace(one, result="error: rewritten"))
    assert log.recent(T0, 10) == [one]


def test_entries_come_newest_first_across_months_and_one_instant_in_the_order_made(log):
    last_month, a, b = entry(T0 - 10 * 24 * HOUR), entry(T0), entry(T0)  # a and b at one (simulated) instant
    for e in (last_month, a, b):
        log.write(e)
    assert [e.entry_id for e in log.recent(T0, 10)] == [b.entry_id, a.entry_id, last_month.entry_id]
    assert log.recent(T0, 2) == [b, a]


def test_filters_and_the_subject_index(log):
    ran, disabled, other = entry(T0), entry(T0 + 1, "disable"), entry(T0 + 2, subject="batch:t/b", actor="proxy:bob")
    for e in (ran, disabled, other):
        log.write(e)
    assert log.recent(T0 + 5, 10, action="disable") == [disabled]
    assert log.recent(T0 + 5, 10, actor="BOB") == [other]
    assert log.recent(T0 + 5, 10, subject="job:a") == [disabled, ran]
    assert log.about(job_subject("a"), T0 + 1, T0 + 1) == [disabled]


def _target(dynamodb, table: str, now: int):
    return SimpleNamespace(
        session=SimpleNamespace(client=lambda name: dynamodb),
        topology=SimpleNamespace(audit_table=table),
        clock=SimpleNamespace(now_ms=lambda: now),
    )


def test_an_action_that_fails_is_recorded_with_its_error_and_re_raised(log, dynamodb):
    target = _target(dynamodb, log._table, T0)
    with pytest.raises(ValueError, match="boom"):
        audited(target, Operator("local:jane", "local:jane"), "disable", "job:a", _raise, str)
    (row,) = log.recent(T0, 10)
    assert (row.action, row.result) == ("disable", "error: boom")


def test_an_action_that_fails_without_its_audit_entry_says_both(dynamodb):
    target = _target(dynamodb, "no-such-audit", T0)
    with pytest.raises(AuditedError, match=r"^boom; and the audit entry was NOT written \(AWS answered ResourceNot"):
        audited(target, Operator("local:jane", "local:jane"), "disable", "job:a", _raise, str)


def test_an_action_that_succeeds_without_its_audit_entry_keeps_its_value_and_says_why(dynamodb):
    target = _target(dynamodb, "no-such-audit", T0)
    done = audited(target, Operator("local:jane", "local:jane"), "disable", "job:a", lambda: 3, str)
    assert done.value == 3 and not done.audit.written
    assert done.note() == "; the audit entry was NOT written (AWS answered ResourceNotFoundException)"


def test_a_label_is_kept_beside_the_identity_never_instead():
    op = Operator("arn:aws:sts::1:assumed-role/ops/jane", "arn:aws:sts::1:assumed-role/ops/jane", "Jane Doe")
    assert op.requested_by == "Jane Doe"
    assert op.describe() == "arn:aws:sts::1:assumed-role/ops/jane as 'Jane Doe'"
    assert proxied("jane@example.com", op.caller).describe() == f"proxy:jane@example.com (via {op.caller})"


def _raise() -> int:
    raise ValueError("boom")
