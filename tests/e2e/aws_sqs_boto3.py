"""boto3 against a running Sluice, over every SQS action served: a current botocore speaks
AWS JSON 1.0, one older than 1.31 the Query protocol (both are run by the tests).

Run by tests/e2e/aws_sqs.rs with the endpoint, a key of the tenant under test and another
tenant's queue URL in the environment. boto3 does not check SQS's MD5s, so the checks compute
them here, as the SQS documentation defines them, and compare. Prints one line per check and a
summary; exits non-zero when a check fails.
"""

import hashlib
import json
import os
import struct
import sys
import threading
import time
import traceback

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["SLUICE_ENDPOINT"]
ACCOUNT = os.environ["SLUICE_ACCOUNT"]
OTHER_QUEUE_URL = os.environ["SLUICE_OTHER_QUEUE_URL"]
REGION = "us-east-1"

sqs = boto3.client(
    "sqs",
    endpoint_url=ENDPOINT,
    region_name=REGION,
    config=Config(retries={"max_attempts": 1}),
)

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def error_code(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{call.__name__} succeeded; an error was expected")


def md5_of_body(body):
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def md5_of_attributes(attributes):
    """SQS's digest: per attribute in name order, length-prefixed name, type and value, with a
    transport byte (1 string, 2 binary) before the value."""

    def put(data):
        return struct.pack(">I", len(data)) + data

    out = b""
    for name in sorted(attributes):
        value = attributes[name]
        out += put(name.encode()) + put(value["DataType"].encode())
        if "BinaryValue" in value:
            out += b"\x02" + put(value["BinaryValue"])
        else:
            out += b"\x01" + put(value["StringValue"].encode())
    return hashlib.md5(out).hexdigest()


def arn(name):
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def url(name):
    return f"{ENDPOINT}/{ACCOUNT}/{name}"


def attributes(queue_url, *names):
    return sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(names) or ["All"])[
        "Attributes"
    ]


@check
def create_queue_applies_attributes_and_tags_and_is_idempotent():
    given = {
        "DelaySeconds": "1",
        "MaximumMessageSize": "2048",
        "MessageRetentionPeriod": "120",
        "ReceiveMessageWaitTimeSeconds": "2",
        "VisibilityTimeout": "45",
        "KmsMasterKeyId": "alias/aws/sqs",
        "KmsDataKeyReusePeriodSeconds": "300",
    }
    q = sqs.create_queue(QueueName="b3-create", Attributes=given, tags={"team": "core"})["QueueUrl"]
    assert q == url("b3-create"), q
    got = attributes(q)
    for name, value in given.items():
        assert got[name] == value, (name, got)
    assert got["QueueArn"] == arn("b3-create"), got
    now = time.time()
    for stamp in ("CreatedTimestamp", "LastModifiedTimestamp"):
        assert abs(int(got[stamp]) - now) < 120, (stamp, got)
    assert sqs.list_queue_tags(QueueUrl=q)["Tags"] == {"team": "core"}
    # The same name with the same attributes answers the same URL; other values are refused.
    assert sqs.create_queue(QueueName="b3-create", Attributes=given)["QueueUrl"] == q
    assert sqs.create_queue(QueueName="b3-create")["QueueUrl"] == q
    assert error_code(
        sqs.create_queue, QueueName="b3-create", Attributes={"VisibilityTimeout": "46"}
    ) == ("QueueAlreadyExists", 400)


@check
def create_queue_refuses_bad_names_and_values():
    assert error_code(sqs.create_queue, QueueName="has space") == ("InvalidParameterValue", 400)
    assert error_code(
        sqs.create_queue, QueueName="not-fifo", Attributes={"FifoQueue": "true"}
    ) == ("InvalidParameterValue", 400)
    assert error_code(
        sqs.create_queue, QueueName="b3-bad", Attributes={"VisibilityTimeout": "43201"}
    ) == ("InvalidAttributeValue", 400)
    assert error_code(
        sqs.create_queue, QueueName="b3-bad", Attributes={"Policy": "x" * 20481}
    ) == ("InvalidAttributeValue", 400)
    assert error_code(
        sqs.create_queue, QueueName="b3-bad", Attributes={"NoSuchAttribute": "1"}
    ) == ("InvalidAttributeName", 400)
    assert error_code(
        sqs.create_queue, QueueName="b3-bad", Attributes={"DelaySeconds": "soon"}
    ) == ("InvalidAttributeValue", 400)
    # Nothing was created by the refusals.
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="b3-bad")


@check
def get_queue_url_resolves_only_own_queues():
    sqs.create_queue(QueueName="b3-url")
    assert sqs.get_queue_url(QueueName="b3-url")["QueueUrl"] == url("b3-url")
    assert (
        sqs.get_queue_url(QueueName="b3-url", QueueOwnerAWSAccountId=ACCOUNT)["QueueUrl"]
        == url("b3-url")
    )
    try:
        sqs.get_queue_url(QueueName="b3-missing")
        raise AssertionError("a missing queue resolved")
    except sqs.exceptions.QueueDoesNotExist as e:
        assert e.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue", e.response
    assert error_code(
        sqs.get_queue_url, QueueName="b3-url", QueueOwnerAWSAccountId="123456789012"
    )[0] == "AWS.SimpleQueueService.NonExistentQueue"


@check
def another_tenants_queue_url_does_not_exist():
    for call, kwargs in [
        (sqs.send_message, {"MessageBody": "x"}),
        (sqs.receive_message, {}),
        (sqs.get_queue_attributes, {"AttributeNames": ["All"]}),
        (sqs.purge_queue, {}),
        (sqs.delete_queue, {}),
    ]:
        assert error_code(call, QueueUrl=OTHER_QUEUE_URL, **kwargs) == (
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
        ), call.__name__


@check
def list_queues_filters_by_prefix_and_pages():
    names = [f"b3-list-{i}" for i in range(5)]
    for name in names:
        sqs.create_queue(QueueName=name)
    listed = sqs.list_queues(QueueNamePrefix="b3-list-")
    assert listed["QueueUrls"] == [url(n) for n in names], listed
    assert "NextToken" not in listed
    pages = sqs.get_paginator("list_queues").paginate(
        QueueNamePrefix="b3-list-", PaginationConfig={"PageSize": 2}
    )
    seen = [u for page in pages for u in page.get("QueueUrls", [])]
    assert seen == [url(n) for n in names], seen
    assert error_code(sqs.list_queues, MaxResults=0)[0] == "InvalidParameterValue"


@check
def get_queue_attributes_counts_and_names():
    q = sqs.create_queue(QueueName="b3-counts")["QueueUrl"]
    sqs.send_message(QueueUrl=q, MessageBody="visible")
    sqs.send_message(QueueUrl=q, MessageBody="delayed", DelaySeconds=60)
    sqs.send_message(QueueUrl=q, MessageBody="in flight")
    sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=1)
    got = attributes(
        q,
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    )
    assert got == {
        "ApproximateNumberOfMessages": "1",
        "ApproximateNumberOfMessagesNotVisible": "1",
        "ApproximateNumberOfMessagesDelayed": "1",
    }, got
    assert list(attributes(q, "QueueArn")) == ["QueueArn"]
    assert error_code(sqs.get_queue_attributes, QueueUrl=q, AttributeNames=["Nope"]) == (
        "InvalidAttributeName",
        400,
    )


@check
def set_queue_attributes_echoes_stored_values_byte_for_byte():
    q = sqs.create_queue(QueueName="b3-set")["QueueUrl"]
    dlq = sqs.create_queue(QueueName="b3-set-dlq")["QueueUrl"]
    policy = '{"Version":  "2012-10-17", "Statement": [ ]}'
    sqs.set_queue_attributes(
        QueueUrl=q,
        Attributes={
            "VisibilityTimeout": "7",
            "Policy": policy,
            "SqsManagedSseEnabled": "true",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": arn("b3-set-dlq"), "maxReceiveCount": "3"}
            ),
        },
    )
    got = attributes(q)
    assert got["VisibilityTimeout"] == "7"
    assert got["Policy"] == policy, got
    assert got["SqsManagedSseEnabled"] == "true"
    assert json.loads(got["RedrivePolicy"]) == {
        "deadLetterTargetArn": arn("b3-set-dlq"),
        "maxReceiveCount": 3,
    }, got
    sqs.set_queue_attributes(
        QueueUrl=dlq,
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [arn("b3-set")]})},
    )
    assert json.loads(attributes(dlq, "RedriveAllowPolicy")["RedriveAllowPolicy"]) == {
        "redrivePermission": "byQueue",
        "sourceQueueArns": [arn("b3-set")],
    }
    # An empty value deletes an attribute.
    sqs.set_queue_attributes(QueueUrl=q, Attributes={"Policy": "", "RedrivePolicy": ""})
    got = attributes(q)
    assert "Policy" not in got and "RedrivePolicy" not in got, got
    assert error_code(
        sqs.set_queue_attributes, QueueUrl=q, Attributes={"QueueArn": "x"}
    )[0] == "InvalidAttributeName"
    assert error_code(
        sqs.set_queue_attributes,
        QueueUrl=q,
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:x", "maxReceiveCount": 1})},
    )[0] == "InvalidAttributeValue"


@check
def messages_round_trip_with_attributes_and_system_attributes():
    q = sqs.create_queue(QueueName="b3-messages")["QueueUrl"]
    body = "caf\u00e9 <&> \r\n\t \U0001F600"
    given = {
        "color": {"DataType": "String", "StringValue": "red"},
        "count": {"DataType": "Number", "StringValue": "42"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff\x10"},
        "trace.id": {"DataType": "String.custom", "StringValue": "abc"},
    }
    sent = sqs.send_message(QueueUrl=q, MessageBody=body, MessageAttributes=given)
    assert sent["MessageId"]
    assert sent["MD5OfMessageBody"] == md5_of_body(body), sent
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(given), sent
    # Clients from before MessageSystemAttributeNames ask with AttributeNames.
    system_names = (
        {"MessageSystemAttributeNames": ["All"]}
        if "MessageSystemAttributeNames"
        in sqs.meta.service_model.operation_model("ReceiveMessage").input_shape.members
        else {"AttributeNames": ["All"]}
    )
    got = sqs.receive_message(
        QueueUrl=q, MessageAttributeNames=["All"], WaitTimeSeconds=1, **system_names
    )["Messages"]
    assert len(got) == 1, got
    m = got[0]
    assert m["Body"] == body
    assert m["MessageId"] == sent["MessageId"]
    assert m["MD5OfBody"] == md5_of_body(body)
    assert m["MD5OfMessageAttributes"] == md5_of_attributes(given)
    assert m["MessageAttributes"]["blob"] == {"DataType": "Binary", "BinaryValue": b"\x00\xff\x10"}
    assert m["MessageAttributes"]["count"] == {"DataType": "Number", "StringValue": "42"}
    system = m["Attributes"]
    assert system["ApproximateReceiveCount"] == "1", system
    assert abs(int(system["SentTimestamp"]) / 1000 - time.time()) < 120, system
    assert "ApproximateFirstReceiveTimestamp" in system and "SenderId" in system, system
    sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    # Selected attributes only: a name, and a prefix.
    again = sqs.receive_message(
        QueueUrl=q,
        MessageAttributeNames=["color", "trace.*"],
        AttributeNames=["ApproximateReceiveCount"],
        WaitTimeSeconds=1,
    )["Messages"][0]
    assert sorted(again["MessageAttributes"]) == ["color", "trace.id"], again
    # The digest covers the attributes answered.
    assert again["MD5OfMessageAttributes"] == md5_of_attributes(again["MessageAttributes"])
    assert again["Attributes"] == {"ApproximateReceiveCount": "2"}, again
    sqs.delete_message(QueueUrl=q, ReceiptHandle=again["ReceiptHandle"])
    counts = attributes(q, "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
    assert set(counts.values()) == {"0"}, counts


@check
def send_refuses_bad_messages():
    q = sqs.create_queue(QueueName="b3-bad-send", Attributes={"MaximumMessageSize": "1024"})[
        "QueueUrl"
    ]
    assert error_code(sqs.send_message, QueueUrl=q, MessageBody="x" * 1025) == (
        "InvalidParameterValue",
        400,
    )
    try:
        sqs.send_message(QueueUrl=q, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d")
        raise AssertionError("a deduplication id was accepted on a standard queue")
    except ClientError as e:
        # The message names the parameter as SQS clients know it.
        assert "MessageDeduplicationId" in e.response["Error"]["Message"], e.response
    assert error_code(sqs.send_message, QueueUrl=q, MessageBody="x", DelaySeconds=901)[0] == (
        "InvalidParameterValue"
    )
    assert error_code(
        sqs.send_message,
        QueueUrl=q,
        MessageBody="x",
        MessageAttributes={"a": {"DataType": "String"}},
    )[0] == "InvalidParameterValue"
    assert error_code(sqs.send_message, QueueUrl=q, MessageBody="\u0001")[0] in (
        "InvalidParameterValue",
        "InvalidMessageContents",
    )


@check
def long_poll_wakes_on_a_send():
    q = sqs.create_queue(QueueName="b3-long-poll")["QueueUrl"]
    timer = threading.Timer(1.0, lambda: sqs.send_message(QueueUrl=q, MessageBody="late"))
    started = time.time()
    timer.start()
    got = sqs.receive_message(QueueUrl=q, WaitTimeSeconds=10)
    elapsed = time.time() - started
    timer.join()
    assert [m["Body"] for m in got["Messages"]] == ["late"], got
    assert 0.5 < elapsed < 8, elapsed
    started = time.time()
    assert "Messages" not in sqs.receive_message(QueueUrl=q, WaitTimeSeconds=1)
    assert time.time() - started >= 0.9


@check
def batches_answer_per_entry_and_refuse_bad_batches():
    q = sqs.create_queue(QueueName="b3-batch", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    answer = sqs.send_message_batch(
        QueueUrl=q,
        Entries=[
            {"Id": "a", "MessageBody": "one", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
            {"Id": "b", "MessageBody": "two", "DelaySeconds": 0},
            {"Id": "too-big", "MessageBody": "x" * 2000},
        ],
    )
    assert sorted(e["Id"] for e in answer["Successful"]) == ["a", "b"], answer
    a = next(e for e in answer["Successful"] if e["Id"] == "a")
    assert a["MD5OfMessageBody"] == md5_of_body("one"), a
    assert a["MD5OfMessageAttributes"] == md5_of_attributes(
        {"k": {"DataType": "String", "StringValue": "v"}}
    ), a
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in answer["Failed"]] == [
        ("too-big", "InvalidParameterValue", True)
    ], answer
    assert error_code(
        sqs.send_message_batch,
        QueueUrl=q,
        Entries=[{"Id": "same", "MessageBody": "1"}, {"Id": "same", "MessageBody": "2"}],
    ) == ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400)
    assert error_code(
        sqs.send_message_batch,
        QueueUrl=q,
        Entries=[{"Id": str(i), "MessageBody": "m"} for i in range(11)],
    ) == ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400)
    assert error_code(
        sqs.send_message_batch, QueueUrl=q, Entries=[{"Id": "no spaces", "MessageBody": "m"}]
    ) == ("AWS.SimpleQueueService.InvalidBatchEntryId", 400)
    assert error_code(sqs.send_message_batch, QueueUrl=q, Entries=[]) == (
        "AWS.SimpleQueueService.EmptyBatchRequest",
        400,
    )
    got = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    while len(got) < 2:
        got += sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
    changed = sqs.change_message_visibility_batch(
        QueueUrl=q,
        Entries=[
            {"Id": "x", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 100},
            {"Id": "y", "ReceiptHandle": "forged", "VisibilityTimeout": 100},
        ],
    )
    assert [e["Id"] for e in changed["Successful"]] == ["x"], changed
    assert [(f["Id"], f["Code"]) for f in changed["Failed"]] == [("y", "ReceiptHandleIsInvalid")]
    deleted = sqs.delete_message_batch(
        QueueUrl=q,
        Entries=[{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        + [{"Id": "bad", "ReceiptHandle": "forged"}],
    )
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["d0", "d1"], deleted
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in deleted["Failed"]] == [
        ("bad", "ReceiptHandleIsInvalid", True)
    ], deleted
    counts = attributes(q, "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
    assert set(counts.values()) == {"0"}, counts


@check
def receipt_handles_are_checked():
    q = sqs.create_queue(QueueName="b3-handles")["QueueUrl"]
    assert error_code(sqs.delete_message, QueueUrl=q, ReceiptHandle="forged") == (
        "ReceiptHandleIsInvalid",
        404,
    )
    assert error_code(
        sqs.change_message_visibility, QueueUrl=q, ReceiptHandle="forged", VisibilityTimeout=5
    )[0] == "ReceiptHandleIsInvalid"
    sqs.send_message(QueueUrl=q, MessageBody="m")
    first = sqs.receive_message(QueueUrl=q, VisibilityTimeout=0)["Messages"][0]
    sqs.receive_message(QueueUrl=q, WaitTimeSeconds=1)
    # The first delivery's handle no longer names a message in flight.
    assert error_code(
        sqs.change_message_visibility,
        QueueUrl=q,
        ReceiptHandle=first["ReceiptHandle"],
        VisibilityTimeout=5,
    ) == ("AWS.SimpleQueueService.MessageNotInflight", 400)
    assert error_code(
        sqs.receive_message, QueueUrl=q, MaxNumberOfMessages=11
    ) == ("InvalidParameterValue", 400)


@check
def purge_and_delete_queue():
    q = sqs.create_queue(QueueName="b3-purge")["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=q, MessageBody=str(i))
    sqs.purge_queue(QueueUrl=q)
    assert attributes(q, "ApproximateNumberOfMessages")["ApproximateNumberOfMessages"] == "0"
    sqs.delete_queue(QueueUrl=q)
    assert error_code(sqs.get_queue_url, QueueName="b3-purge")[0] == (
        "AWS.SimpleQueueService.NonExistentQueue"
    )
    assert error_code(sqs.delete_queue, QueueUrl=q)[0] == "AWS.SimpleQueueService.NonExistentQueue"


@check
def tags_are_added_removed_and_listed():
    q = sqs.create_queue(QueueName="b3-tags", tags={"a": "1"})["QueueUrl"]
    sqs.tag_queue(QueueUrl=q, Tags={"b": "2", "a": "3"})
    assert sqs.list_queue_tags(QueueUrl=q)["Tags"] == {"a": "3", "b": "2"}
    sqs.untag_queue(QueueUrl=q, TagKeys=["a", "missing"])
    assert sqs.list_queue_tags(QueueUrl=q)["Tags"] == {"b": "2"}
    sqs.untag_queue(QueueUrl=q, TagKeys=["b"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=q)


@check
def permissions_are_stored_in_the_policy():
    q = sqs.create_queue(QueueName="b3-perms")["QueueUrl"]
    sqs.add_permission(
        QueueUrl=q, Label="send", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
    )
    policy = json.loads(attributes(q, "Policy")["Policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["send"], policy
    statement = policy["Statement"][0]
    assert statement["Principal"] == {"AWS": "arn:aws:iam::111122223333:root"}, statement
    assert statement["Action"] == "SQS:SendMessage" and statement["Resource"] == arn("b3-perms")
    assert error_code(
        sqs.add_permission, QueueUrl=q, Label="send", AWSAccountIds=["1"], Actions=["*"]
    )[0] == "InvalidParameterValue"
    sqs.remove_permission(QueueUrl=q, Label="send")
    assert "Policy" not in attributes(q)
    assert error_code(sqs.remove_permission, QueueUrl=q, Label="send")[0] == "InvalidParameterValue"


@check
def dead_letters_sources_and_message_move_tasks():
    dlq = sqs.create_queue(QueueName="b3-dlq")["QueueUrl"]
    src = sqs.create_queue(
        QueueName="b3-src",
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn("b3-dlq"), "maxReceiveCount": 1})
        },
    )["QueueUrl"]
    sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq)
    assert sources["queueUrls"] == [src], sources
    sqs.send_message(QueueUrl=src, MessageBody="poison")
    sqs.receive_message(QueueUrl=src, VisibilityTimeout=0)
    # The next receive moves it past maxReceiveCount.
    assert "Messages" not in sqs.receive_message(QueueUrl=src)
    dead = sqs.receive_message(
        QueueUrl=dlq, AttributeNames=["DeadLetterQueueSourceArn"], VisibilityTimeout=0
    )["Messages"]
    assert [m["Body"] for m in dead] == ["poison"], dead
    assert dead[0]["Attributes"]["DeadLetterQueueSourceArn"] == arn("b3-src"), dead
    handle = sqs.start_message_move_task(SourceArn=arn("b3-dlq"))["TaskHandle"]
    assert handle
    deadline = time.time() + 20
    while True:
        tasks = sqs.list_message_move_tasks(SourceArn=arn("b3-dlq"))["Results"]
        if tasks[0]["Status"] == "COMPLETED" or time.time() > deadline:
            break
        time.sleep(0.2)
    assert tasks[0]["Status"] == "COMPLETED", tasks
    assert tasks[0]["ApproximateNumberOfMessagesMoved"] == 1, tasks
    assert tasks[0]["SourceArn"] == arn("b3-dlq")
    back = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=2)["Messages"]
    assert [m["Body"] for m in back] == ["poison"], back
    assert error_code(sqs.cancel_message_move_task, TaskHandle="no-such-task")[0] == (
        "ResourceNotFoundException"
    )
    assert error_code(
        sqs.start_message_move_task, SourceArn="arn:aws:sqs:us-east-1:123456789012:b3-dlq"
    )[0] == "AWS.SimpleQueueService.NonExistentQueue"


@check
def message_move_task_can_be_cancelled():
    sqs.create_queue(QueueName="b3-slow-dlq")
    dlq = url("b3-slow-dlq")
    sqs.create_queue(QueueName="b3-slow-target")
    sqs.send_message_batch(
        QueueUrl=dlq, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(10)]
    )
    handle = sqs.start_message_move_task(
        SourceArn=arn("b3-slow-dlq"),
        DestinationArn=arn("b3-slow-target"),
        MaxNumberOfMessagesPerSecond=1,
    )["TaskHandle"]
    running = sqs.list_message_move_tasks(SourceArn=arn("b3-slow-dlq"), MaxResults=10)["Results"]
    assert running[0]["TaskHandle"] == handle and running[0]["Status"] == "RUNNING", running
    assert running[0]["DestinationArn"] == arn("b3-slow-target")
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 0 <= moved < 10, moved
    status = sqs.list_message_move_tasks(SourceArn=arn("b3-slow-dlq"))["Results"][0]["Status"]
    assert status in ("CANCELLING", "CANCELLED"), status


@check
def fifo_queues_order_deduplicate_and_report_sequence_numbers():
    q = sqs.create_queue(
        QueueName="b3-orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    got = attributes(q, "FifoQueue", "ContentBasedDeduplication")
    assert got == {"FifoQueue": "true", "ContentBasedDeduplication": "true"}, got
    first = sqs.send_message(QueueUrl=q, MessageBody="one", MessageGroupId="g")
    again = sqs.send_message(QueueUrl=q, MessageBody="one", MessageGroupId="g")
    assert again["MessageId"] == first["MessageId"], (first, again)
    second = sqs.send_message(
        QueueUrl=q, MessageBody="two", MessageGroupId="g", MessageDeduplicationId="d2"
    )
    assert int(second["SequenceNumber"]) > int(first["SequenceNumber"])
    got = sqs.receive_message(
        QueueUrl=q, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=1
    )["Messages"]
    assert [m["Body"] for m in got] == ["one", "two"], got
    assert got[1]["Attributes"]["MessageGroupId"] == "g"
    assert got[1]["Attributes"]["MessageDeduplicationId"] == "d2"
    assert got[1]["Attributes"]["SequenceNumber"] == second["SequenceNumber"]
    assert error_code(sqs.send_message, QueueUrl=q, MessageBody="no group")[0] == (
        "InvalidParameterValue"
    )


def main():
    passed = failed = 0
    for fn in CHECKS:
        try:
            fn()
            print(f"test boto3::{fn.__name__} ... ok")
            passed += 1
        except Exception:
            print(f"test boto3::{fn.__name__} ... FAILED")
            traceback.print_exc(file=sys.stdout)
            failed += 1
    protocol = sqs.meta.service_model.protocol
    print(f"boto3 ({protocol} protocol) result: {passed} passed; {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
