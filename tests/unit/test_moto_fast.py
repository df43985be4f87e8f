"""jobfence_ops.moto_fast: moto's DynamoDB responses are the same with its shortcuts as without them.

Every data-plane operation the project makes, with every attribute type and
the ReturnValues / ReturnConsumedCapacity / pagination variants, runs inside
`verifying()`: each shortcut body is compared with moto's own serializer's.
"""

from __future__ import annotations

import re

import pytest
from botocore.exceptions import ClientError

from jobfence_ops import moto_fast

EVERY_TYPE = {
    "pk": {"S": "a"},
    "sk": {"N": "1"},
    "s": {"S": "text é"},
    "n": {"N": "-12.5"},
    "b": {"B": b"\x00\x01bytes"},
    "ss": {"SS": ["x", "y"]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"\x02", b"\x03"]},
    "m": {"M": {"inner": {"L": [{"S": "v"}, {"N": "3"}, {"NULL": True}, {"BOOL": False}]}}},
    "empty_l": {"L": []},
    "empty_m": {"M": {}},
    "t": {"BOOL": True},
    "gsi_pk": {"S": "g"},
}


@pytest.fixture
def table(dynamodb):
    dynamodb.create_table(
        TableName="fast",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
            {"AttributeName": "gsi_pk", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_g",
                "KeySchema": [
                    {"AttributeName": "gsi_pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return "fast"


def test_every_data_plane_response_is_the_one_moto_serializes(dynamodb, table):
    key = {"pk": {"S": "a"}, "sk": {"N": "1"}}
    with moto_fast.verifying() as taken:
        dynamodb.put_item(TableName=table, Item=EVERY_TYPE, ReturnConsumedCapacity="TOTAL")
        dynamodb.put_item(TableName=table, Item=EVERY_TYPE, ReturnValues="ALL_OLD")
        answer = dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)
        assert re.fullmatch("[A-Za-z0-9]{52}", answer["ResponseMetadata"]["RequestId"])  # moto's request id
        got = answer["Item"]
        assert got["b"] == {"B": b"\x00\x01bytes"} and got["bs"]["BS"] == [b"\x02", b"\x03"]
        assert got["m"]["M"]["inner"]["L"][2] == {"NULL": True}
        assert "Item" not in dynamodb.get_item(TableName=table, Key={"pk": {"S": "none"}, "sk": {"N": "0"}})
        dynamodb.get_item(TableName=table, Key=key, ProjectionExpression="s, m.inner", ReturnConsumedCapacity="INDEXES")
        for returns in ("NONE", "ALL_NEW", "ALL_OLD", "UPDATED_NEW", "UPDATED_OLD"):
            dynamodb.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET s = :s, #n = if_not_exists(#n, :z) REMOVE t ADD c :one, ss :more",
                ExpressionAttributeNames={"#n": "n"},
                ExpressionAttributeValues={
                    ":s": {"S": returns},
                    ":z": {"N": "0"},
                    ":one": {"N": "1"},
                    ":more": {"SS": ["z"]},
                },
                ReturnValues=returns,
            )
        for sk in range(2, 7):
            dynamodb.put_item(TableName=table, Item={**EVERY_TYPE, "sk": {"N": str(sk)}})
        page = dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :p AND sk > :s",
            ExpressionAttributeValues={":p": {"S": "a"}, ":s": {"N": "0"}},
            Limit=2,
            ReturnConsumedCapacity="TOTAL",
        )
        assert page["Count"] == 2 and "LastEvaluatedKey" in page
        last = dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "a"}},
            ExclusiveStartKey=page["LastEvaluatedKey"],
        )
        assert last["Count"] == 4 and "LastEvaluatedKey" not in last
        assert (
            dynamodb.query(
                TableName=table,
                IndexName="by_g",
                KeyConditionExpression="gsi_pk = :g",
                ExpressionAttributeValues={":g": {"S": "nobody"}},
            )["Items"]
            == []
        )
        dynamodb.query(
            TableName=table,
            IndexName="by_g",
            KeyConditionExpression="gsi_pk = :g",
            ExpressionAttributeValues={":g": {"S": "g"}},
            Select="COUNT",
        )
        dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "a"}},
            ScanIndexForward=False,
            ProjectionExpression="sk, m",
        )
        dynamodb.scan(TableName=table, FilterExpression="sk >= :s", ExpressionAttributeValues={":s": {"N": "3"}})
        dynamodb.batch_get_item(
            RequestItems={table: {"Keys": [key, {"pk": {"S": "a"}, "sk": {"N": "9"}}], "ConsistentRead": True}}
        )
        dynamodb.batch_write_item(
            RequestItems={
                table: [
                    {"PutRequest": {"Item": {**EVERY_TYPE, "sk": {"N": "8"}}}},
                    {"DeleteRequest": {"Key": {"pk": {"S": "a"}, "sk": {"N": "6"}}}},
                ]
            }
        )
        dynamodb.transact_write_items(
            TransactItems=[
                {"ConditionCheck": {"TableName": table, "Key": key, "ConditionExpression": "attribute_exists(pk)"}},
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": "a"}, "sk": {"N": "2"}},
                        "UpdateExpression": "SET s = :s",
                        "ExpressionAttributeValues": {":s": {"S": "tx"}},
                    }
                },
            ],
            ReturnConsumedCapacity="TOTAL",
        )
        dynamodb.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": key}}])
        old = dynamodb.delete_item(TableName=table, Key=key, ReturnValues="ALL_OLD")["Attributes"]
        assert old["s"] == {"S": "UPDATED_OLD"}
        dynamodb.delete_item(TableName=table, Key=key)
    assert set(taken) >= {
        "PutItem",
        "GetItem",
        "UpdateItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
        "DeleteItem",
    }, taken


def test_refusals_and_validation_errors_are_moto_s(dynamodb, table):
    key = {"pk": {"S": "a"}, "sk": {"N": "1"}}
    dynamodb.put_item(TableName=table, Item={**key, "holder": {"S": "me"}})
    with moto_fast.verifying():
        with pytest.raises(ClientError) as refused:
            dynamodb.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET holder = :h",
                ConditionExpression="attribute_not_exists(holder)",
                ExpressionAttributeValues={":h": {"S": "you"}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
        assert refused.value.response["Item"]["holder"] == {"S": "me"}
        # each of the validator's walkers still refuses what it refused (their handler tables are built once)
        one, two, text = {"N": "1"}, {"N": "2"}, {"S": "x"}
        for expression, values, message in (
            ("SET a = :v SET b = :w", {":v": one, ":w": two}, 'The "SET" section can only be used once'),
            ("SET sk = :v", {":v": one}, "Cannot update attribute sk. This attribute is part of the key"),
            ("SET a = :v, a = :w", {":v": one, ":w": two}, "Two document paths overlap with each other"),
            ("ADD b :s", {":s": text}, "An operand in the update expression has an incorrect data type"),
            ("SET a = b + :v", {":v": one}, "The provided expression refers to an attribute that does not exist"),
            ("SET a = :v + :s", {":v": one, ":s": text}, "Incorrect operand type for operator or function"),
        ):
            with pytest.raises(ClientError) as invalid:
                dynamodb.update_item(
                    TableName=table, Key=key, UpdateExpression=expression, ExpressionAttributeValues=values
                )
            assert invalid.value.response["Error"]["Code"] == "ValidationException"
            assert message in invalid.value.response["Error"]["Message"], invalid.value.response["Error"]["Message"]
    assert dynamodb.get_item(TableName=table, Key=key)["Item"] == {**key, "holder": {"S": "me"}}


def test_queries_list_their_partition_and_updates_reuse_their_parse_as_moto_answers(dynamodb, table):
    for pk in ("b", "a", "c"):
        for sk in (3, 0, 2, 1):
            item = {"pk": {"S": pk}, "sk": {"N": str(sk)}, "gsi_pk": {"S": "odd" if sk % 2 else "even"}}
            dynamodb.put_item(TableName=table, Item={**item, "v": {"N": "0"}})

    def pages(**query):
        out, start = [], {}
        while True:
            page = dynamodb.query(TableName=table, Limit=3, **query, **start)
            out.append([(i["pk"]["S"], i["sk"]["N"]) for i in page["Items"]])
            if "LastEvaluatedKey" not in page:
                return out
            start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}

    with moto_fast.verifying() as taken:  # each query also answered by moto's whole-table path, and compared
        for pk in ("a", "b", "nobody"):
            for forward in (True, False):
                pages(
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": pk}},
                    ScanIndexForward=forward,
                )
        odd = pages(
            IndexName="by_g", KeyConditionExpression="gsi_pk = :g", ExpressionAttributeValues={":g": {"S": "odd"}}
        )
        for n in range(2):
            for pk in ("a", "b"):
                dynamodb.update_item(
                    TableName=table,
                    Key={"pk": {"S": pk}, "sk": {"N": "1"}},
                    UpdateExpression="SET #v = #v + :one, w = :n",
                    ExpressionAttributeNames={"#v": "v"},
                    ExpressionAttributeValues={":one": {"N": "1"}, ":n": {"N": str(n)}},
                )
        # a condition's tokens are kept per string: the same condition, other values, still decides by them
        for n, expected in (("5", True), ("5", False)):
            try:
                dynamodb.update_item(
                    TableName=table,
                    Key={"pk": {"S": "c"}, "sk": {"N": "1"}},
                    UpdateExpression="SET v = :n",
                    ConditionExpression="attribute_exists(pk) AND v <> :n",
                    ExpressionAttributeValues={":n": {"N": n}},
                )
                applied = True
            except ClientError as refused:
                assert refused.response["Error"]["Code"] == "ConditionalCheckFailedException"
                applied = False
            assert applied is expected
    # the index's items across partitions, by its sort key then the table's keys, paged as moto pages them
    assert odd == [[("a", "1"), ("b", "1"), ("c", "1")], [("a", "3"), ("b", "3"), ("c", "3")]]
    assert taken["Query (partition)"] == 12 and taken["UpdateExpression (copy)"] == 5, taken
    assert taken["ConditionExpression (lex)"] >= 1, taken
    got = dynamodb.get_item(TableName=table, Key={"pk": {"S": "b"}, "sk": {"N": "1"}})["Item"]
    assert got["v"] == {"N": "2"} and got["w"] == {"N": "1"}
    # an expression that passed with some names is checked again with others (the overlap check reads them)
    update = {
        "TableName": table,
        "Key": {"pk": {"S": "a"}, "sk": {"N": "0"}},
        "UpdateExpression": "SET #x = :v, #y = :v",
    }
    values = {"ExpressionAttributeValues": {":v": {"N": "5"}}}
    for _ in range(2):
        dynamodb.update_item(**update, **values, ExpressionAttributeNames={"#x": "x", "#y": "y"})
    with pytest.raises(ClientError) as overlap:
        dynamodb.update_item(**update, **values, ExpressionAttributeNames={"#x": "x", "#y": "x"})
    assert "Two document paths overlap" in overlap.value.response["Error"]["Message"]


def test_queue_counts_visibility_delay_and_retention_are_moto_s(aws):
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="fast", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="now")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"b{i}"} for i in range(3)])

    def counts():
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return tuple(int(got[n]) for n in names)

    assert counts() == (4, 0, 1)
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=300)["Messages"]
    assert len(received) == 2 and "later" not in {m["Body"] for m in received}
    assert counts() == (2, 2, 1)
    rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    assert sorted(m["Body"] for m in rest) == sorted({"now", "b0", "b1", "b2"} - {m["Body"] for m in received})
    assert counts() == (2, 2, 1)  # a zero visibility timeout leaves them visible
    sqs.delete_message(QueueUrl=url, ReceiptHandle=received[0]["ReceiptHandle"])
    assert counts() == (2, 1, 1)


def _increment(table):
    """A transaction's entry adding 1 to item (a, 1)'s n."""
    update = {"Key": {"pk": {"S": "a"}, "sk": {"N": "1"}}, "UpdateExpression": "SET n = n + :one"}
    return {"Update": {"TableName": table, **update, "ExpressionAttributeValues": {":one": {"N": "1"}}}}


def _everything(dynamodb, *tables):
    return {t: sorted(map(str, dynamodb.scan(TableName=t, ConsistentRead=True)["Items"])) for t in tables}


def test_a_refused_transaction_leaves_every_item_of_its_tables_as_it_was(dynamodb, table):
    # GIVEN two tables with items, some of which the transaction names and some not
    dynamodb.create_table(
        TableName="plain",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for sk in range(4):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}, "sk": {"N": str(sk)}, "n": {"N": "1"}})
    for i in range(3):
        dynamodb.put_item(TableName="plain", Item={"id": {"S": f"i{i}"}, "n": {"N": "1"}})
    before = _everything(dynamodb, table, "plain")
    # WHEN a transaction updates, puts and deletes in both, and its last check is refused
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(
            TransactItems=[
                _increment(table),
                {"Put": {"TableName": table, "Item": {"pk": {"S": "a"}, "sk": {"N": "9"}, "n": {"N": "9"}}}},
                {"Delete": {"TableName": table, "Key": {"pk": {"S": "a"}, "sk": {"N": "2"}}}},
                {
                    "Update": {
                        "TableName": "plain",
                        "Key": {"id": {"S": "i0"}},
                        "UpdateExpression": "SET n = :z",
                        "ExpressionAttributeValues": {":z": {"N": "0"}},
                    }
                },
                {"Put": {"TableName": "plain", "Item": {"id": {"S": "new"}}}},
                {
                    "ConditionCheck": {
                        "TableName": "plain",
                        "Key": {"id": {"S": "i2"}},
                        "ConditionExpression": "attribute_not_exists(id)",
                    }
                },
            ]
        )
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    # THEN nothing changed, in either table, and both still take writes
    assert _everything(dynamodb, table, "plain") == before
    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": "a"}, "sk": {"N": "1"}},
        UpdateExpression="SET n = :t",
        ExpressionAttributeValues={":t": {"N": "2"}},
    )
    assert dynamodb.get_item(TableName=table, Key={"pk": {"S": "a"}, "sk": {"N": "1"}})["Item"]["n"] == {"N": "2"}
    # AND the same transaction without the refused check applies every write
    dynamodb.transact_write_items(
        TransactItems=[
            _increment(table),
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "a"}, "sk": {"N": "2"}}}},
            {"Put": {"TableName": "plain", "Item": {"id": {"S": "new"}}}},
        ]
    )
    after = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    assert sorted(int(i["sk"]["N"]) for i in after) == [0, 1, 3]
    assert {int(i["sk"]["N"]): i["n"]["N"] for i in after}[1] == "3"
    assert len(dynamodb.scan(TableName="plain")["Items"]) == 4
