"""boto3's SNS client against the limits on stored attributes: SNS's limits where it has one
(`Policy` at most 30 KiB, `DisplayName` at most 100 characters), Sluice's bound on the other
stored attributes (`DeliveryPolicy` 30 KiB, ARNs 2 KiB), each refused with `InvalidParameter`
naming the attribute, and each refused call changing nothing.

Run by tests/e2e/aws_sns.rs. Arguments: the endpoint URL and the caller's account id (whose
queue `lq` exists); the key is in the environment. Prints `ok` when every check passed.
"""

import sys

import boto3
from botocore.exceptions import ClientError

endpoint, account = sys.argv[1:3]
REGION = "us-east-1"
sns = boto3.client("sns", endpoint_url=endpoint, region_name=REGION)
KIB30 = 30 * 1024


def refused(call, attribute, **kwargs):
    try:
        answer = call(**kwargs)
    except ClientError as error:
        got = error.response["Error"]
        status = error.response["ResponseMetadata"]["HTTPStatusCode"]
        assert (got["Code"], status) == ("InvalidParameter", 400), (call.__name__, got, status)
        assert f"Invalid parameter: {attribute}" in got["Message"], got
        return
    raise AssertionError(f"{call.__name__} with a long {attribute} succeeded: {answer}")


def policy_of(size):
    """A JSON access policy of exactly `size` bytes."""
    head, tail = '{"Version": "2012-10-17", "Statement": [], "Id": "', '"}'
    return head + "p" * (size - len(head) - len(tail)) + tail


arn = sns.create_topic(Name="limits", Attributes={"DisplayName": "d" * 100})["TopicArn"]


def attributes():
    return sns.get_topic_attributes(TopicArn=arn)["Attributes"]


# At the limits: accepted.
sns.set_topic_attributes(TopicArn=arn, AttributeName="Policy", AttributeValue=policy_of(KIB30))
sns.set_topic_attributes(
    TopicArn=arn, AttributeName="DeliveryPolicy", AttributeValue=policy_of(KIB30)
)
before = attributes()
assert before["DisplayName"] == "d" * 100
assert len(before["Policy"]) == KIB30

# Past them: refused, naming the attribute, and nothing changes.
for name, value in [
    ("DisplayName", "d" * 101),
    ("Policy", policy_of(KIB30 + 1)),
    ("DeliveryPolicy", policy_of(KIB30 + 1)),
    ("SQSSuccessFeedbackRoleArn", "arn:aws:iam::1:role/" + "r" * 2048),
]:
    refused(sns.set_topic_attributes, name, TopicArn=arn, AttributeName=name, AttributeValue=value)
    assert attributes() == before, name

# CreateTopic: a refused creation creates nothing.
refused(sns.create_topic, "DisplayName", Name="never", Attributes={"DisplayName": "n" * 101})
refused(sns.create_topic, "Policy", Name="never", Attributes={"Policy": policy_of(KIB30 + 1)})
topics = [t["TopicArn"] for t in sns.list_topics()["Topics"]]
assert not any(t.endswith(":never") for t in topics), topics

# Subscriptions: Subscribe and SetSubscriptionAttributes.
endpoint_arn = f"arn:aws:sqs:{REGION}:{account}:lq"
refused(
    sns.subscribe,
    "DeliveryPolicy",
    TopicArn=arn,
    Protocol="sqs",
    Endpoint=endpoint_arn,
    Attributes={"DeliveryPolicy": policy_of(KIB30 + 1)},
)
assert sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"] == []
subscription = sns.subscribe(
    TopicArn=arn,
    Protocol="sqs",
    Endpoint=endpoint_arn,
    Attributes={"DeliveryPolicy": policy_of(KIB30)},
    ReturnSubscriptionArn=True,
)["SubscriptionArn"]
kept = sns.get_subscription_attributes(SubscriptionArn=subscription)["Attributes"]
for name, value in [
    ("DeliveryPolicy", policy_of(KIB30 + 1)),
    ("SubscriptionRoleArn", "arn:aws:iam::1:role/" + "r" * 2048),
]:
    refused(
        sns.set_subscription_attributes,
        name,
        SubscriptionArn=subscription,
        AttributeName=name,
        AttributeValue=value,
    )
    now = sns.get_subscription_attributes(SubscriptionArn=subscription)["Attributes"]
    assert now == kept, name

print("ok")
