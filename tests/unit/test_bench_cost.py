"""The cost bench's arithmetic (ops/bench/cost.py): units an item times the listed prices, per million items."""

from __future__ import annotations

import pytest

from ops.bench.cost import GOAL_PER_MILLION, PRICES, PerItem, jobfence_lines, per_extra_sweep, sfn_lines, verdict


def per_item(**overrides) -> PerItem:
    base = dict(
        wru_base=0.0,
        wru_gsi=0.0,
        rru=0.0,
        sqs_requests=0.0,
        invocations=0.0,
        ms_per_invocation=0.0,
        memory_mb=256,
        producer_wru=0.0,
    )
    return PerItem(**{**base, **overrides})


def test_one_write_unit_an_item_costs_the_listed_price_per_million():
    lines = jobfence_lines(per_item(wru_base=1.0, wru_gsi=2.0, rru=4.0))
    dollars = {line.label.split(" (")[0]: line.dollars for line in lines}
    assert sum(line.dollars for line in lines) == pytest.approx(0.625 + 1.25 + 0.5)
    assert dollars["DynamoDB reads"] == pytest.approx(0.5)


def test_lambda_is_billed_per_invocation_and_per_gb_second_at_the_measured_duration():
    # one invocation per SQS batch of 10, 400 ms at 256 MB: 0.1 x 0.4 s x 0.25 GB = 0.01 GB-s an item
    p = per_item(invocations=0.1, ms_per_invocation=400)
    assert p.gb_s == pytest.approx(0.01)
    lam = [
        line.dollars for line in jobfence_lines(p) if line.label.startswith("Lambda") and "reclaim" not in line.label
    ]
    assert lam == pytest.approx([0.1 * 0.20, 0.01 * 1e6 * PRICES.lambda_gb_s_arm64])


def test_a_standard_child_per_item_pays_the_map_runs_transition_and_its_own_states():
    sfn = sfn_lines(per_item(ms_per_invocation=0, memory_mb=256))
    # 1 transition charged to the Map Run per child + 3 in the child, $0.025 per 1,000, plus 2 WRU and a Lambda request
    assert sfn["parent"] == pytest.approx(25.0)
    assert sfn["standard"] == pytest.approx(100.0 + 2 * 0.625 + 0.20)
    # an Express child: the Map Run's transition, $1 per million requests, 100 ms at 64 MB at least
    assert sfn["express"] == pytest.approx(25.0 + 1.0 + 1e6 * 0.1 * 64 / 1024 * 0.00001667 + 2 * 0.625 + 0.20)
    batched = sfn_lines(per_item(), batched=10)
    assert batched["parent"] == pytest.approx(2.5)


def test_the_reclaim_sweeps_that_see_a_batch_open_are_charged_per_item():
    # 0.04 RRU an item a sweep, seen by 2 sweeps: 0.08 RRU at $0.125 per million
    p = per_item(sweep_rru=0.04, sweep_gb_s=0.0, sweeps=2)
    dollars = {line.label.split(" (")[0]: line.dollars for line in jobfence_lines(p)}
    assert dollars["DynamoDB reads, reclaim sweeps"] == pytest.approx(0.08 * 0.125)
    assert per_extra_sweep(p) == pytest.approx(0.04 * 0.125)


def test_the_verdict_fails_past_the_goal_and_when_a_step_functions_row_is_cheaper():
    assert GOAL_PER_MILLION == 3.50
    assert verdict(3.49, {"Express per 10": 3.93}) == []
    assert len(verdict(3.51, {"Express per 10": 3.93})) == 1
    assert [m for m in verdict(3.00, {"Express per 10": 2.99}) if "Express per 10" in m]
