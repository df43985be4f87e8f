"""The units of a run and its dollar estimate, from DynamoDB's own `ConsumedCapacity` answers (issue 33 item 2).

botocore's Stubber answers in DynamoDB's real shape (base table and index units apart, a
transaction's list), so the summing is checked against figures computed here by hand; moto
answers constants, so the run-row test compares the row with the capacity its calls reported.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from jobfence.capacity import Cost, Units, consumed_units, measure, meter_client
from jobfence.prices import PRICES
from tests.backends import backend, dynamodb, pytest_generate_tests, tables  # noqa: F401
from tests.runner_support import Harness, spec


@pytest.fixture
def stubbed():
    client = meter_client(boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"))
    with Stubber(client) as stub:
        yield client, stub


KEY = {"k": {"S": "a"}}


def test_a_calls_units_are_read_or_write_and_base_or_index_as_dynamodb_reports_them(stubbed):
    client, stub = stubbed
    # a put that wrote the base table and two index entries, a query read of 2.5 units, a transaction on two tables
    stub.add_response(
        "put_item",
        {"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 3.0, "Table": {"CapacityUnits": 1.0},
                              "GlobalSecondaryIndexes": {"by_due": {"CapacityUnits": 1.0}, "open": {"CapacityUnits": 1.0}}}},
        {"TableName": "t", "Item": KEY, "ReturnConsumedCapacity": "INDEXES"},
    )
    stub.add_response(
        "query",
        {"Items": [], "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 2.5, "Table": {"CapacityUnits": 2.5}}},
        {"TableName": "t", "KeyConditionExpression": "k = :k", "ExpressionAttributeValues": {":k": {"S": "a"}},
         "ReturnConsumedCapacity": "INDEXES"},
    )
    stub.add_response(
        "transact_write_items",
        {"ConsumedCapacity": [
            {"TableName": "t", "CapacityUnits": 4.0, "Table": {"CapacityUnits": 2.0},
             "GlobalSecondaryIndexes": {"by_due": {"CapacityUnits": 2.0}}},
            {"TableName": "q", "CapacityUnits": 2.0, "WriteCapacityUnits": 2.0},
        ]},
        {"TransactItems": [{"Put": {"TableName": "t", "Item": KEY}}, {"Put": {"TableName": "q", "Item": KEY}}],
         "ReturnConsumedCapacity": "INDEXES"},
    )
    with measure() as run:
        client.put_item(TableName="t", Item=KEY)
        with measure() as inner:
            client.query(TableName="t", KeyConditionExpression="k = :k", ExpressionAttributeValues={":k": {"S": "a"}})
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": "t", "Item": KEY}}, {"Put": {"TableName": "q", "Item": KEY}}]
        )
    stub.assert_no_pending_responses()
    assert run.units == Units(read=2.5, write=1.0 + 2.0 + 2.0, index_read=0.0, index_write=2.0 + 2.0)
    assert (run.requests, inner.requests, inner.units) == (3, 1, Units(read=2.5))
    assert run.units.dollars() == pytest.approx(2.5 * 0.125 / 1e6 + 9.0 * 0.625 / 1e6)


def test_outside_a_measure_nothing_is_asked_or_counted(stubbed):
    client, stub = stubbed
    # the expected parameters carry no ReturnConsumedCapacity: the Stubber refuses a call that adds it
    stub.add_response("get_item", {"Item": KEY}, {"TableName": "t", "Key": KEY})
    client.get_item(TableName="t", Key=KEY)
    stub.assert_no_pending_responses()


def test_a_read_named_units_win_over_the_total_and_a_missing_table_breakdown_is_base():
    assert consumed_units("GetItem", {"CapacityUnits": 1.0, "ReadCapacityUnits": 0.5}) == Units(read=0.5)
    assert consumed_units("UpdateItem", {"CapacityUnits": 2.0}) == Units(write=2.0)
    assert consumed_units("Scan", {"LocalSecondaryIndexes": {"l": {"CapacityUnits": 1.5}}}) == Units(index_read=1.5)


def test_the_estimate_adds_the_functions_time_at_its_memory():
    with measure(memory_mb=512) as meter:
        pass
    cost = meter.cost(duration_ms=2_000)
    assert cost.dollars == pytest.approx(0.5 * 2.0 * PRICES.lambda_gb_s_arm64)
    assert Cost.of_fields(cost.fields()) == Cost(Units(), 0, round(cost.dollars, 9))
    assert Cost.of_fields({"outcome": "ran"}) is None  # a row from before costs were kept


def test_a_finished_run_row_carries_the_units_its_calls_reported_and_their_cost(dynamodb, tables, clock):
    h = Harness(dynamodb, tables, clock)
    reported = []  # every ConsumedCapacity the runner's calls got back, seen beside the meter

    def seen(parsed, model, **_):
        if "ConsumedCapacity" in parsed:
            reported.append(consumed_units(model.name, parsed["ConsumedCapacity"]))

    dynamodb.meta.events.register("after-call.dynamodb", seen)

    def job(ctx):
        h.leases.read(ctx.spec.name)  # a call of the job's own, inside its run
        yield {"done": 1}

    h.tick(spec(), job)
    (row,) = h.rows()
    assert row["outcome"] == "ran"
    # the row's figures are taken just before its finish write, and the release comes after it
    before = sum(reported[:-2], Units())
    assert Units.of_fields(row) == Units(**{k: round(v, 2) for k, v in vars(before).items()})
    assert row["requests"] == len(reported) - 2 and row["requests"] >= 4  # pre-gate, acquire, start, the job's read
    assert row["cost_usd"] == pytest.approx(before.dollars(), abs=1e-9)
