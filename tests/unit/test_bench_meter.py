"""The benches' capacity meter (ops/bench/work.py): a filtered Query is charged every row it read."""

from __future__ import annotations

import boto3
from moto import mock_aws

from ops.bench.work import Meter

ROW = "x" * 3_000  # three rows: about 9 KB in one partition


def _table(client) -> dict:
    client.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for sk, status in (("a", "completed"), ("b", "completed"), ("c", "running")):
        client.put_item(
            TableName="t", Item={"pk": {"S": "p"}, "sk": {"S": sk}, "status": {"S": status}, "body": {"S": ROW}}
        )
    return {"t": {"keys": ["pk", "sk"], "indexes": [], "index_names": [], "logical": "t"}}


def _query(client, **extra) -> None:
    client.query(
        TableName="t",
        KeyConditionExpression="#0 = :0",
        ExpressionAttributeNames={"#0": "pk", **extra.pop("names", {})},
        ExpressionAttributeValues={":0": {"S": "p"}, **extra.pop("values", {})},
        **extra,
    )


def test_a_filtered_query_is_charged_the_rows_it_read_not_the_rows_it_returned():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        meter = Meter(boto3.client("dynamodb", region_name="us-east-1"), _table(client))
        meter.attach(client)
        _query(client, FilterExpression="#1 = :1", names={"#1": "status"}, values={":1": {"S": "running"}})
        # one row returned (3 KB), three read (9 KB): 3 x 4 KB, eventually consistent
        assert meter.rcu["t"] == 1.5
        meter.reset()
        _query(client, ProjectionExpression="#0, sk", Limit=2)
        assert meter.rcu["t"] == 1.0  # two full rows read (6 KB), whatever the projection


def test_a_filtered_page_is_cut_where_it_stopped():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        meter = Meter(boto3.client("dynamodb", region_name="us-east-1"), _table(client))
        meter.attach(client)
        _query(client, FilterExpression="#1 = :1", names={"#1": "status"}, values={":1": {"S": "running"}}, Limit=2)
        assert meter.rcu["t"] == 1.0  # the page read two 3 KB rows and returned none; not the third
