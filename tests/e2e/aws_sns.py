"""boto3's SNS client, unchanged but for the endpoint URL, over every SNS action Sluice serves.

Run by tests/e2e/aws_sns.rs, which starts the server, makes the tenants, keys and queues, and
afterwards receives over REST what this script published. Arguments: the endpoint URL, the
caller's account id, another tenant's account id (whose topic `secret` and queue `theirs`
exist), and a key id and secret that carry `topics:publish` alone. The full key is in the
environment. Asserts as it goes (a failure exits non-zero naming the check) and prints one
JSON object of what the Rust side verifies.
"""

import json
import sys

import boto3
from botocore.exceptions import ClientError

endpoint, account, other_account, publish_key_id, publish_secret = sys.argv[1:6]
REGION = "us-east-1"
sns = boto3.client("sns", endpoint_url=endpoint, region_name=REGION)
publisher = boto3.client(
    "sns",
    endpoint_url=endpoint,
    region_name=REGION,
    aws_access_key_id=publish_key_id,
    aws_secret_access_key=publish_secret,
)


def topic_arn(name, acct=account):
    return f"arn:aws:sns:{REGION}:{acct}:{name}"


def queue_arn(name, acct=account):
    return f"arn:aws:sqs:{REGION}:{acct}:{name}"


def fails(call, code, status, fragment=None, **kwargs):
    """Asserts that call(**kwargs) answers the SNS error `code` with HTTP `status`."""
    try:
        answer = call(**kwargs)
    except ClientError as error:
        got = error.response["Error"]
        got_status = error.response["ResponseMetadata"]["HTTPStatusCode"]
        assert (got["Code"], got_status) == (code, status), (call.__name__, kwargs, got, got_status)
        if fragment is not None:
            assert fragment in got["Message"], (fragment, got)
        return got["Message"]
    raise AssertionError(f"{call.__name__}({kwargs}) succeeded: {answer}")


def attributes(name):
    return sns.get_topic_attributes(TopicArn=topic_arn(name))["Attributes"]


# Topics: attributes stored and echoed byte-for-byte, idempotent creation.
policy = '{ "Version": "2012-10-17",\n  "Statement": [] }'
delivery = '{"http": {"defaultHealthyRetryPolicy": {"numRetries": 5}}}'
news = sns.create_topic(
    Name="news",
    Attributes={"DisplayName": "News & <more>", "Policy": policy, "DeliveryPolicy": delivery},
    Tags=[{"Key": "team", "Value": "a"}],
)["TopicArn"]
assert news == topic_arn("news"), news
again = sns.create_topic(Name="news", Attributes={"DisplayName": "News & <more>"})
assert again["TopicArn"] == news, again
fails(sns.create_topic, "InvalidParameter", 400, "different attributes",
      Name="news", Attributes={"DisplayName": "Other"})
got = attributes("news")
assert got["TopicArn"] == news, got
assert got["Owner"] == account, got
assert got["DisplayName"] == "News & <more>", got
assert got["Policy"] == policy, got
assert got["DeliveryPolicy"] == delivery, got
assert got["EffectiveDeliveryPolicy"] == delivery, got
assert (got["SubscriptionsConfirmed"], got["SubscriptionsPending"], got["SubscriptionsDeleted"]) == ("0", "0", "0"), got
assert "FifoTopic" not in got, got
sns.set_topic_attributes(TopicArn=news, AttributeName="DisplayName", AttributeValue="Renamed")
sns.set_topic_attributes(TopicArn=news, AttributeName="KmsMasterKeyId", AttributeValue="alias/aws/sns")
got = attributes("news")
assert (got["DisplayName"], got["KmsMasterKeyId"], got["Policy"]) == ("Renamed", "alias/aws/sns", policy), got
fails(sns.set_topic_attributes, "InvalidParameter", 400, "Colour",
      TopicArn=news, AttributeName="Colour", AttributeValue="x")
fails(sns.set_topic_attributes, "InvalidParameter", 400, "FifoTopic",
      TopicArn=news, AttributeName="FifoTopic", AttributeValue="true")

plain = sns.create_topic(Name="plain", Attributes={"ContentBasedDeduplication": "false"})["TopicArn"]
sns.set_topic_attributes(TopicArn=plain, AttributeName="ContentBasedDeduplication", AttributeValue="false")
fails(sns.set_topic_attributes, "InvalidParameter", 400, "ContentBasedDeduplication",
      TopicArn=plain, AttributeName="ContentBasedDeduplication", AttributeValue="true")
got = attributes("plain")
assert json.loads(got["Policy"])["Statement"][0]["Resource"] == plain, got
assert got["DisplayName"] == "", got
assert json.loads(got["EffectiveDeliveryPolicy"])["http"]["defaultHealthyRetryPolicy"]["numRetries"] == 3, got

orders = sns.create_topic(
    Name="orders.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "false"}
)["TopicArn"]
got = attributes("orders.fifo")
assert (got["FifoTopic"], got["ContentBasedDeduplication"]) == ("true", "false"), got
fails(sns.create_topic, "InvalidParameter", 400, None, Name="nofifo.fifo")
fails(sns.create_topic, "InvalidParameter", 400, None, Name="plain2", Attributes={"FifoTopic": "true"})
fails(sns.create_topic, "InvalidParameter", 400, "ContentBasedDeduplication",
      Name="plain3", Attributes={"ContentBasedDeduplication": "true"})
fails(sns.create_topic, "InvalidParameter", 400, "Name", Name="bad name!")

# Listing pages 100 at a time.
many = [sns.create_topic(Name=f"t{n:03}")["TopicArn"] for n in range(105)]
first = sns.list_topics()
assert len(first["Topics"]) == 100 and "NextToken" in first, len(first["Topics"])
listed = [t["TopicArn"] for page in sns.get_paginator("list_topics").paginate() for page_topic in [page] for t in page_topic["Topics"]]
assert sorted(listed) == sorted(many + [news, plain, orders]), listed
for arn in many:
    sns.delete_topic(TopicArn=arn)
sns.delete_topic(TopicArn=many[0])  # deleting again is no error
fails(sns.get_topic_attributes, "NotFound", 404, None, TopicArn=many[0])

# Subscriptions to queues of the account.
all_sub = sns.subscribe(TopicArn=news, Protocol="sqs", Endpoint=queue_arn("all"), ReturnSubscriptionArn=True)["SubscriptionArn"]
assert all_sub.startswith(news + ":"), all_sub
red_policy = '{"color": ["red"]}'
red_sub = sns.subscribe(TopicArn=news, Protocol="sqs", Endpoint=queue_arn("red"),
                        Attributes={"FilterPolicy": red_policy})["SubscriptionArn"]
same = sns.subscribe(TopicArn=news, Protocol="sqs", Endpoint=queue_arn("red"),
                     Attributes={"FilterPolicy": red_policy})["SubscriptionArn"]
assert same == red_sub, (same, red_sub)
fails(sns.subscribe, "InvalidParameter", 400, None, TopicArn=news, Protocol="sqs",
      Endpoint=queue_arn("red"), Attributes={"FilterPolicy": '{"color": ["blue"]}'})
raw_sub = sns.subscribe(TopicArn=news, Protocol="sqs", Endpoint=queue_arn("raw"),
                        Attributes={"RawMessageDelivery": "true"})["SubscriptionArn"]
body_sub = sns.subscribe(TopicArn=news, Protocol="sqs", Endpoint=queue_arn("body"),
                         Attributes={"FilterPolicy": '{"kind": ["a"]}', "FilterPolicyScope": "MessageBody"})["SubscriptionArn"]
fifo_sub = sns.subscribe(TopicArn=orders, Protocol="sqs", Endpoint=queue_arn("fifo-q.fifo"))["SubscriptionArn"]

got = sns.get_subscription_attributes(SubscriptionArn=red_sub)["Attributes"]
expected = {
    "SubscriptionArn": red_sub, "TopicArn": news, "Owner": account, "Protocol": "sqs",
    "Endpoint": queue_arn("red"), "ConfirmationWasAuthenticated": "true",
    "PendingConfirmation": "false", "RawMessageDelivery": "false",
    "FilterPolicy": red_policy, "FilterPolicyScope": "MessageAttributes",
}
assert all(got.get(k) == v for k, v in expected.items()), got
got = sns.get_subscription_attributes(SubscriptionArn=raw_sub)["Attributes"]
assert got["RawMessageDelivery"] == "true" and "FilterPolicy" not in got, got
redrive = '{"deadLetterTargetArn": "%s"}' % queue_arn("dlq")
sns.set_subscription_attributes(SubscriptionArn=raw_sub, AttributeName="RedrivePolicy", AttributeValue=redrive)
sns.set_subscription_attributes(SubscriptionArn=raw_sub, AttributeName="DeliveryPolicy", AttributeValue='{"healthyRetryPolicy": {"numRetries": 2}}')
got = sns.get_subscription_attributes(SubscriptionArn=raw_sub)["Attributes"]
assert got["RedrivePolicy"] == redrive, got
assert got["DeliveryPolicy"] == '{"healthyRetryPolicy": {"numRetries": 2}}', got
fails(sns.set_subscription_attributes, "InvalidParameter", 400, "FilterPolicy",
      SubscriptionArn=raw_sub, AttributeName="FilterPolicy", AttributeValue='{"color": "red"}')

by_topic = sns.list_subscriptions_by_topic(TopicArn=news)["Subscriptions"]
assert sorted(s["SubscriptionArn"] for s in by_topic) == sorted([all_sub, red_sub, raw_sub, body_sub]), by_topic
everything = sns.list_subscriptions()["Subscriptions"]
assert len(everything) == 5, everything
for s in everything:
    assert s["Protocol"] == "sqs" and s["Owner"] == account, s
    assert s["TopicArn"] == (orders if s["SubscriptionArn"] == fifo_sub else news), s
assert {s["Endpoint"] for s in everything} == {queue_arn(q) for q in ["all", "red", "raw", "body", "fifo-q.fifo"]}

# Refused subscriptions.
for protocol in ["http", "email", "lambda"]:
    fails(sns.subscribe, "InvalidParameter", 400, protocol, TopicArn=news, Protocol=protocol, Endpoint="https://example.com")
fails(sns.subscribe, "InvalidParameter", 400, "FilterPolicy", TopicArn=news, Protocol="sqs",
      Endpoint=queue_arn("all2"), Attributes={"FilterPolicy": '{"color": "red"}'})
fails(sns.subscribe, "InvalidParameter", 400, "FilterPolicy", TopicArn=news, Protocol="sqs",
      Endpoint=queue_arn("all2"), Attributes={"FilterPolicy": "{not json"})
fails(sns.subscribe, "NotFound", 404, None, TopicArn=news, Protocol="sqs", Endpoint=queue_arn("theirs", other_account))
fails(sns.subscribe, "NotFound", 404, None, TopicArn=news, Protocol="sqs", Endpoint=queue_arn("missing"))
fails(sns.subscribe, "InvalidParameter", 400, "Endpoint", TopicArn=news, Protocol="sqs", Endpoint="all")
fails(sns.subscribe, "InvalidParameter", 400, "Endpoint", TopicArn=orders, Protocol="sqs", Endpoint=queue_arn("all"))

# Publishing.
red = sns.publish(TopicArn=news, Message="hello red", Subject="Greetings",
                  MessageAttributes={"color": {"DataType": "String", "StringValue": "red"}})["MessageId"]
blue = sns.publish(TargetArn=news, Message="hello blue",
                   MessageAttributes={"color": {"DataType": "String", "StringValue": "blue"},
                                      "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}})["MessageId"]
body = publisher.publish(TopicArn=news, Message='{"kind": "a"}')["MessageId"]
structured = sns.publish(TopicArn=news, MessageStructure="json",
                         Message=json.dumps({"default": "for everyone", "sqs": "for queues"}))["MessageId"]
batch = sns.publish_batch(TopicArn=news, PublishBatchRequestEntries=[
    {"Id": "ok", "Message": "batched"},
    {"Id": "bad", "Message": "x", "Subject": "caf\u00e9"},
])
assert [s["Id"] for s in batch["Successful"]] == ["ok"], batch
assert [(f["Id"], f["Code"], f["SenderFault"]) for f in batch["Failed"]] == [("bad", "InvalidParameter", True)], batch
assert "Subject" in batch["Failed"][0]["Message"], batch
fails(sns.publish_batch, "BatchEntryIdsNotDistinct", 400, None, TopicArn=news,
      PublishBatchRequestEntries=[{"Id": "a", "Message": "1"}, {"Id": "a", "Message": "2"}])
fails(sns.publish_batch, "TooManyEntriesInBatchRequest", 400, None, TopicArn=news,
      PublishBatchRequestEntries=[{"Id": f"e{n}", "Message": "m"} for n in range(11)])
fails(sns.publish_batch, "BatchRequestTooLong", 400, None, TopicArn=news,
      PublishBatchRequestEntries=[{"Id": f"e{n}", "Message": "x" * 300_000} for n in range(4)])
fails(sns.publish_batch, "InvalidBatchEntryId", 400, None, TopicArn=news,
      PublishBatchRequestEntries=[{"Id": "no spaces", "Message": "m"}])
fails(sns.publish, "InvalidParameter", 400, "Message", TopicArn=news, MessageStructure="json", Message='{"sqs": "no default"}')
fails(sns.publish, "InvalidParameter", 400, "Subject", TopicArn=news, Message="m", Subject="caf\u00e9")

first = sns.publish(TopicArn=orders, Message="order 1", MessageGroupId="g1", MessageDeduplicationId="d1")
assert first["SequenceNumber"].isdigit(), first
repeat = sns.publish(TopicArn=orders, Message="order 1 again", MessageGroupId="g1", MessageDeduplicationId="d1")
assert repeat["MessageId"] == first["MessageId"], (first, repeat)
fails(sns.publish, "InvalidParameter", 400, "MessageGroupId", TopicArn=orders, Message="m", MessageDeduplicationId="d2")
fails(sns.publish, "InvalidParameter", 400, "MessageDeduplicationId", TopicArn=orders, Message="m", MessageGroupId="g1")
fifo_batch = sns.publish_batch(TopicArn=orders, PublishBatchRequestEntries=[
    {"Id": "o2", "Message": "order 2", "MessageGroupId": "g1", "MessageDeduplicationId": "d2"},
])
assert fifo_batch["Successful"][0]["SequenceNumber"].isdigit(), fifo_batch

# Tags.
sns.tag_resource(ResourceArn=news, Tags=[{"Key": "env", "Value": "prod"}])
tags = {t["Key"]: t["Value"] for t in sns.list_tags_for_resource(ResourceArn=news)["Tags"]}
assert tags == {"team": "a", "env": "prod"}, tags
sns.untag_resource(ResourceArn=news, TagKeys=["team"])
tags = sns.list_tags_for_resource(ResourceArn=news)["Tags"]
assert tags == [{"Key": "env", "Value": "prod"}], tags
fails(sns.tag_resource, "ResourceNotFound", 404, None, ResourceArn=topic_arn("gone"), Tags=[{"Key": "k", "Value": "v"}])
fails(sns.create_topic, "InvalidParameter", 400, "tags", Name="news", Tags=[{"Key": "team", "Value": "b"}])

# Scopes: the publish-only key publishes and reads, nothing else.
got = publisher.get_topic_attributes(TopicArn=news)["Attributes"]
assert got["TopicArn"] == news, got
fails(publisher.create_topic, "AuthorizationError", 403, "topics:manage", Name="nope")
fails(publisher.subscribe, "AuthorizationError", 403, None, TopicArn=news, Protocol="sqs", Endpoint=queue_arn("all"))

# Another account's topic is not found, whatever the action.
secret = topic_arn("secret", other_account)
fails(sns.get_topic_attributes, "NotFound", 404, None, TopicArn=secret)
fails(sns.publish, "NotFound", 404, None, TopicArn=secret, Message="m")
fails(sns.subscribe, "NotFound", 404, None, TopicArn=secret, Protocol="sqs", Endpoint=queue_arn("all"))
fails(sns.delete_topic, "NotFound", 404, None, TopicArn=secret)
fails(sns.get_topic_attributes, "InvalidParameter", 400, "TopicArn", TopicArn="not-an-arn")

# Unsubscribing, twice.
sns.unsubscribe(SubscriptionArn=body_sub)
sns.unsubscribe(SubscriptionArn=body_sub)
fails(sns.get_subscription_attributes, "NotFound", 404, None, SubscriptionArn=body_sub)
assert len(sns.list_subscriptions_by_topic(TopicArn=news)["Subscriptions"]) == 3

print(json.dumps({
    "red": red, "blue": blue, "body": body, "structured": structured,
    "batched": batch["Successful"][0]["MessageId"], "order": first["MessageId"],
    "red_subscription": red_sub,
}))
