"""The cold start bench's judged measure: instructions a statement executes, counted by valgrind
(ops/bench/instructions.py), repeatable where CPU seconds are not."""

from __future__ import annotations

import os

import pytest

from ops.bench import coldstart, instructions
from ops.bench.instructions import CountFailed, count_all, refs

ENV = {"PATH": os.environ["PATH"]}


def test_the_count_is_read_from_cachegrind_s_summary_and_its_absence_is_an_error():
    assert refs("==6131== \n==6131== I   refs:      1,027,527,211\n") == 1_027_527_211
    with pytest.raises(CountFailed, match="no instruction count"):
        refs("==1== ERROR SUMMARY: 0 errors\n")


def test_a_statement_s_count_repeats_and_grows_with_its_work():
    empty = [instructions.instructions("pass", ENV) for _ in range(2)]
    work = instructions.instructions("sum(range(2_000_000))", ENV)
    # repeatable: two runs of the same interpreter and statement agree to well under 1%
    assert abs(empty[0] - empty[1]) < 0.005 * empty[0]
    # and the statement's own work shows above the interpreter's start and exit (millions of instructions)
    assert work - empty[0] > 10_000_000


def test_a_statement_that_fails_under_valgrind_is_an_error_with_its_output():
    with pytest.raises(CountFailed, match="ZeroDivisionError"):
        instructions.instructions("1 / 0", ENV)


def test_every_count_is_less_the_empty_interpreter_and_a_ratio_is_of_those(monkeypatch):
    totals = {"pass": 100, "a": 400, "b": 250}
    monkeypatch.setattr(instructions, "instructions", lambda statement, env, cwd=None: totals[statement])
    counted = count_all({"function": ("a", ENV), "floor": ("b", ENV)}, ENV)
    assert counted.interpreter == 100 and counted.counts == {"function": 300, "floor": 150}
    assert counted.ratio("function", "floor") == 2.0


def test_the_bench_counts_each_function_s_init_and_each_distinct_floor_once(monkeypatch, tmp_path):
    asked = {}

    def fake_count_all(asks, env, cwd=None):
        asked.update(asks)
        return instructions.Counted(0, {key: 1 for key in asks})

    monkeypatch.setattr(coldstart, "count_all", fake_count_all)
    one, two = (coldstart.Function(n, "handlers.scheduled.handler", 256, "arm64", {"JOB_NAME": n}) for n in "ab")
    floor = coldstart.own_floor("scheduled", ("dynamodb",))
    coldstart.count([one, two], {"a": floor, "b": floor}, tmp_path)
    # each function's statement is its init and its first tick's model clients; the shared floor is counted once
    assert asked["a"][0].startswith("import sys\nimport handlers.scheduled") and "_get_connection()" in asked["a"][0]
    assert asked["a"][1]["JOB_NAME"] == "a" and asked["b"][1]["JOB_NAME"] == "b"
    assert asked[floor] == (floor.statement, coldstart.lambda_environment(None, tmp_path))
    assert len(asked) == 3


def test_the_page_s_class_costs_grow_with_a_dataclass_s_fields():
    # the bench's explanation of a function's excess: what one class costs to define, counted
    rows = [line for line in instructions.class_costs(ENV) if line.startswith("| frozen") or line.startswith("| str")]
    costs = [float(line.rsplit("|", 2)[1]) for line in rows]
    assert len(costs) == 4 and all(cost > 0 for cost in costs)
    assert costs[0] < costs[1] < costs[2]  # 3, 12 and 24 fields: each field's code is compiled too
