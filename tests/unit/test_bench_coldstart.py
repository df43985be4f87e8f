"""The cold start bench's floors (ops/bench/coldstart.py): each function against the libraries of its kind and
exactly the botocore clients it has after init or makes on its first tick."""

from __future__ import annotations

import pathlib

import pytest

from ops.bench import coldstart
from ops.bench.coldstart import ClientsChanged, Function, Sample, kind_floor, lambda_environment, own_floor

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"


def function(name: str, kind_module: str = "handlers.scheduled") -> Function:
    return Function(name, f"{kind_module}.handler", 256, "arm64", {"JOB_NAME": name})


def test_a_function_s_own_floor_builds_exactly_its_clients_and_its_kind_s_libraries():
    # GIVEN a worker that has a DynamoDB and an SQS client after init and makes an STS client on its first tick
    made = Sample(0.3, 60, services=("dynamodb", "sqs"), tick_services=("sts",))
    floor = own_floor("worker", made.built)
    # WHEN its floor runs in a fresh interpreter, as the bench samples it
    got = coldstart.sample(floor.statement, lambda_environment(None, FUNCTIONS))
    # THEN the floor had exactly those clients, and loaded what every worker loads (its kind's libraries), with a
    # settings model: the old kind floor had neither the STS client nor a model
    assert got.services == ("dynamodb", "sqs", "sts")
    assert floor.statement.endswith(coldstart._SETTINGS) and coldstart.KINDS["worker"].statement in floor.statement
    assert kind_floor("worker").clients == ("dynamodb", "sqs") and coldstart._SETTINGS not in kind_floor("worker").statement


def test_a_function_is_judged_with_its_first_tick_s_clients_against_a_floor_that_has_them():
    sample = Sample(0.40, 60, services=("secretsmanager", "sqs"), tick_seconds=0.05, tick_services=("dynamodb",))
    assert sample.cold_seconds == pytest.approx(0.45)
    assert own_floor("worker", sample.built).clients == ("dynamodb", "secretsmanager", "sqs")


def test_a_function_whose_clients_change_between_runs_stops_the_bench(monkeypatch, tmp_path):
    # GIVEN a function that makes an SQS client on one run and not on the next (its floor would not be one thing)
    runs = iter([("dynamodb", "sqs"), ("dynamodb",)])

    def fake_sample(statement, env):
        if "JOB_NAME" in env:
            return Sample(0.3, 60, services=next(runs))
        return Sample(0.3, 60)

    monkeypatch.setattr(coldstart, "sample", fake_sample)
    # THEN measuring it raises, naming the function, rather than judging it against either floor
    with pytest.raises(ClientsChanged, match="flaky"):
        coldstart.measure([function("flaky")], 2, tmp_path)
