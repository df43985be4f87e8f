"""Authenticated ticks (issue 29, item 3 and the low findings of the trigger contract).

A Scheduled Event runs a job only when it is the function's own rule's: the rule's account, the rule's
ARN as its only resource, and a `time` within the delivery tolerance of the function's clock. Every
refusal is an `InvalidEvent` with a bounded message, counted, and writes nothing.
"""

from __future__ import annotations

import json

import pytest

from jobfence.clock import SKEW_BUDGET_MS, FrozenClock
from jobfence.config import ScheduledSettings
from jobfence.errors import InvalidEvent, SettingsError
from jobfence.handler.scheduled import REFUSED_EVENT_METRIC, scheduled_handler
from jobfence.ledger import DELIVERY_TOLERANCE_MS
from jobfence.testing import JobHarness, rule_arn_of
from jobfence.trigger_requests import REQUESTED_BY_PATTERN
from jobfence.triggers import ERROR_MAX, parse_trigger, scheduled_event
from jobs.catalog import AUDITOR, CATALOG

MINUTE = 60_000
DAY = 24 * 60 * MINUTE
OWN = rule_arn_of("clean_conversations")


def refused(event, clock, rule_arn=OWN) -> str:
    with pytest.raises(InvalidEvent) as caught:
        parse_trigger(event, clock, rule_arn)
    return str(caught.value)


def test_the_own_rules_tick_is_accepted_within_the_tolerance_on_both_sides(clock):
    now = clock.now_ms()
    for at in (now, now - DELIVERY_TOLERANCE_MS, now + SKEW_BUDGET_MS):
        trigger = parse_trigger(scheduled_event(OWN, at), clock, OWN)
        assert (trigger.kind, trigger.scheduled_at) == ("scheduled", at)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"account": "210987654321"}, "account '210987654321' is not '123456789012'"),
        ({"resources": [rule_arn_of("clean_dpop_proofs")]}, "resources"),
        ({"resources": []}, "resources [] are not"),
        ({"resources": [OWN, rule_arn_of("clean_dpop_proofs")]}, "resources"),
        ({"resources": [rule_arn_of("clean_conversations", account="210987654321")]}, "are not"),
    ],
)
def test_a_tick_of_another_account_or_rule_is_refused(clock, change, reason):
    event = {**scheduled_event(OWN, clock.now_ms()), **change}
    if "account" in change:
        event["resources"] = [OWN]
    assert reason in refused(event, clock)


@pytest.mark.parametrize("offset_ms", [SKEW_BUDGET_MS + 1000, 30 * DAY, -DELIVERY_TOLERANCE_MS - 1000, -DAY])
def test_a_tick_too_far_from_now_is_refused(clock, offset_ms):
    message = refused(scheduled_event(OWN, clock.now_ms() + offset_ms), clock)
    assert "outside [-120 s, +60 s]" in message


def test_without_its_rule_arn_a_function_takes_no_scheduled_event_and_a_bad_one_fails_at_cold_start(clock):
    assert "no RULE_ARN" in refused(scheduled_event(OWN, clock.now_ms()), clock, rule_arn=None)
    env = {"JOB_NAME": "clean_conversations", "LEASES_TABLE": "leases", "RUNS_TABLE": "runs"}
    with pytest.raises(SettingsError, match="RULE_ARN"):
        ScheduledSettings.from_environ({**env, "RULE_ARN": "arn:aws:events:us-east-1:123:rule/x"})
    assert ScheduledSettings.from_environ({**env, "RULE_ARN": OWN}).rule_arn == OWN


@pytest.mark.parametrize(
    "event",
    [
        {"trigger": "x" * 1_000_000, "requested_by": "ops"},  # pydantic quotes a discriminator it does not know
        {**scheduled_event(OWN, 1_767_225_600_000), "source": "s" * 1_000_000},
        {**scheduled_event(OWN, 1_767_225_600_000), "account": "9" * 1_000_000},
        {**scheduled_event(OWN, 1_767_225_600_000), "resources": ["r" * 1_000_000] * 3},
        {**scheduled_event(OWN, 1_767_225_600_000), "detail-type": "d" * 1_000_000},
        {"k" * 1_000_000: 1, "j" * 1_000_000: 2},
        {"trigger": "manual", "requested_by": "ops", "x" * 1_000_000: 1},
        {"trigger": "catch_up", "requested_by": "ops", "tick": 10**5000},
    ],
)
def test_no_refusal_echoes_unbounded_input(clock, event):
    # a 1 MB field gives an error of at most ERROR_MAX characters
    assert len(refused(event, clock)) <= ERROR_MAX


@pytest.mark.parametrize(
    "name",
    ["Jane\u202eeoD", "\u2066ops\u2069", "a\u200fb", "a\u200eb", "a\u061cb", "\u202aops", "ops\u202c"],
)
def test_requested_by_refuses_bidirectional_controls(clock, name):
    message = refused({"trigger": "manual", "requested_by": name}, clock)
    assert message.startswith("invalid manual trigger: manual.requested_by: String should match pattern")
    assert name not in message
    import re

    assert not re.match(REQUESTED_BY_PATTERN, name)
    # plain right-to-left text is still a name
    assert parse_trigger({"trigger": "manual", "requested_by": "שרה כהן"}, clock).requested_by == "שרה כהן"


def test_a_forged_far_future_tick_to_the_auditor_is_refused_counted_and_leaves_its_audits_whole(
    aws, clock, lambda_context, capsys
):
    # GIVEN the auditor's function (the real handler on a frozen clock), with the environment infra gives it
    harness = JobHarness(aws, CATALOG, AUDITOR.name, clock)
    handler = scheduled_handler(CATALOG, harness.environ(), clock)
    # WHEN an attacker with invoke rights sends it a tick of its own rule and account, 30 days ahead
    forged = harness.scheduled_event(clock.now_ms() + 30 * DAY)
    capsys.readouterr()
    with pytest.raises(InvalidEvent, match="outside"):
        handler(forged, lambda_context)
    # THEN nothing ran, nothing was written, and the refusal was counted
    assert harness.rows("runs") == [] and harness.rows("leases") == []
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    counted = [e for e in emitted if REFUSED_EVENT_METRIC in e]
    assert [c[REFUSED_EVENT_METRIC] for c in counted] == [[1.0]]
    # AND the next real audits judge their full windows (with the forged row, the four after it judged 0 ticks)
    windows = []
    for step in range(1, 5):
        clock.set(1_767_225_600_000 + step * 15 * MINUTE)
        result = handler(harness.scheduled_event(), lambda_context)
        assert result["outcome"] == "ran"
        windows.append(result["summary"]["window_ms"])
    assert windows[1:] == [15 * MINUTE] * 3 and windows[0] > 0


def test_the_local_runtime_and_the_kit_build_ticks_their_function_accepts(aws, clock):
    from jobfence_ops.runtime.runtime import scheduled_event as runtime_event
    from jobfence_ops.runtime.topology import RuleInfo

    harness = JobHarness(aws, CATALOG, "clean_conversations", clock)
    settings = ScheduledSettings.from_environ(harness.environ())
    assert parse_trigger(harness.scheduled_event(), clock, settings.rule_arn).kind == "scheduled"
    rule = RuleInfo(name="jobfence-clean_conversations", arn=OWN, schedule="rate(1 hour)", state="ENABLED", targets=())
    event = runtime_event(rule, clock.now_ms())
    assert (event["account"], event["region"], event["resources"]) == ("123456789012", "us-east-1", [OWN])
    assert parse_trigger(event, FrozenClock(clock.now_ms() + MINUTE), OWN).scheduled_at == clock.now_ms()
