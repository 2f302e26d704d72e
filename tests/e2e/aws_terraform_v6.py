"""The calls the current Terraform AWS provider (v6, aws-sdk-go-v2: SQS over AWS JSON 1.0, SNS
over the Query protocol) makes for `aws_sqs_queue`, `aws_sqs_queue_redrive_policy`,
`aws_sns_topic` and `aws_sns_topic_subscription`, replayed in the provider's order with boto3.

No v6 provider binary runs here (the Terraform suite, tests/terraform/run.sh, drives the 3.39
provider, which speaks SQS's Query protocol), so this script is the v6 provider's side of
`terraform apply`, a second `terraform plan`, an update and `terraform destroy`, written from the
provider's source (hashicorp/terraform-provider-aws, `internal/...` paths cited per step):

- which action, with which parameters and which attribute values (what
  `internal/attrmap/attrmap.go` `ResourceDataToAPIAttributesCreate` / `...Update` send: every
  Optional integer with a default, a boolean only when true, a JSON string after
  `structure.NormalizeJsonString`, i.e. compact with sorted keys);
- the provider's wait loops as it runs them (`StateChangeConf`: the refresh function, its target
  and how many consecutive target reads it needs). The provider would retry a read that does not
  show the target yet; a user's `terraform apply` must not sit in such a loop against Sluice, so
  here every wait must reach its target at the first read (and stay there for the reads the
  provider makes);
- the equality each wait and each refresh uses (strings for numbers and booleans, JSON
  equivalence for redrive policies, IAM policy equivalence for `policy`), and the diff a second
  plan computes (`attrmap` `APIAttributesToResourceData` into the state, then the schema's
  `StateFunc` / `DiffSuppressFunc` against the configuration): every attribute a configuration
  set must read back so that the plan is empty.

Run by tests/e2e/aws_terraform_v6.rs, with the endpoint and the tenant's account id in the
environment, and a key with the queue and topic scopes. Prints cargo-style lines per phase and
a summary; exits non-zero when a phase fails.
"""

import json
import os
import sys
import traceback

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["SLUICE_ENDPOINT"]
ACCOUNT = os.environ["SLUICE_ACCOUNT"]
REGION = "us-east-1"

# The provider's SDK retries throttling and 5xx itself; a replay that must see every answer
# at the first attempt turns that off.
NO_RETRIES = Config(retries={"max_attempts": 1})
sqs = boto3.client("sqs", endpoint_url=ENDPOINT, region_name=REGION, config=NO_RETRIES)
sns = boto3.client("sns", endpoint_url=ENDPOINT, region_name=REGION, config=NO_RETRIES)
CALLS = []


def call(client, action, **params):
    """One provider call, recorded (the summary prints the sequence's length)."""
    CALLS.append(action)
    return getattr(client, action)(**params)


def error_of(client, action, **params):
    """The AWS error code of a call that must fail."""
    try:
        answer = call(client, action, **params)
    except ClientError as error:
        return error.response["Error"]["Code"]
    raise AssertionError(f"{action}({params}) succeeded: {answer}")


# --- the provider's value handling ------------------------------------------------------------


def normalize_json(text):
    """`structure.NormalizeJsonString` (terraform-plugin-sdk helper/structure): Go's
    `json.Marshal` of the decoded value — compact, keys sorted, `<`, `>`, `&` escaped."""
    out = json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return out.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def json_equal(a, b):
    """`verify.JSONStringsEqual` / `verify.JSONBytesEqual` (internal/verify/json.go): both must
    be JSON (an empty string is not) and decode to equal values."""
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return False


def _as_set(value):
    return frozenset(value) if isinstance(value, list) else frozenset([value])


def _statement(statement):
    """A statement as `awspolicyequivalence` compares it: single strings and one-element lists
    alike, list order ignored, `Principal: "*"` the same as `{"AWS": "*"}`."""
    out = {}
    for key, value in statement.items():
        if key in ("Action", "NotAction", "Resource", "NotResource"):
            value = _as_set(value)
        elif key in ("Principal", "NotPrincipal"):
            value = {"AWS": "*"} if value == "*" else value
            value = frozenset((k, _as_set(v)) for k, v in value.items())
        elif key == "Condition":
            value = frozenset(
                (op, frozenset((k, _as_set(v)) for k, v in conds.items()))
                for op, conds in value.items()
            )
        out[key] = value
    return frozenset(out.items())


def policies_equivalent(a, b):
    """`awspolicyequivalence.PoliciesAreEquivalent` as the provider uses it for `policy`
    (`verify.SuppressEquivalentPolicyDiffs`, `verify.PolicyToSet`): the same statements, as
    sets, up to the forms IAM treats as equal."""
    try:
        pa, pb = json.loads(a), json.loads(b)
    except ValueError:
        return False
    statements = lambda p: frozenset(_statement(s) for s in _as_list(p.get("Statement", [])))
    rest = lambda p: {k: v for k, v in p.items() if k != "Statement"}
    return rest(pa) == rest(pb) and statements(pa) == statements(pb)


def _as_list(value):
    return value if isinstance(value, list) else [value]


def go_parse_bool(text):
    """`strconv.ParseBool`, which `APIAttributesToResourceData` applies to boolean attributes."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise AssertionError(f"strconv.ParseBool fails on {text!r}: the refresh would error")


def go_atoi(text):
    """`strconv.Atoi`, for integer attributes."""
    try:
        return int(text, 10)
    except ValueError:
        raise AssertionError(f"strconv.Atoi fails on {text!r}: the refresh would error")


def to_state(schema, attributes, state):
    """`attrmap.APIAttributesToResourceData` with `WithMissingSetToNil("*")`: each mapped API
    attribute parsed by its schema type into the state; a missing one set to null (None). An
    IAM policy keeps the state's old text when equivalent (`verify.PolicyToSet`)."""
    out = dict(state)
    for tf_name, (api_name, kind) in schema.items():
        if api_name not in attributes:
            out[tf_name] = None
            continue
        value = attributes[api_name]
        if kind == "bool":
            value = go_parse_bool(value)
        elif kind == "int":
            value = go_atoi(value)
        elif kind == "policy" and state.get(tf_name) and policies_equivalent(state[tf_name], value):
            value = state[tf_name]
        out[tf_name] = value
    return out


def zero(kind):
    return {"bool": False, "int": 0}.get(kind, "")


def plan_diff(schema, config, defaults, state, suppress):
    """The attributes a second `terraform plan` would show as changed: each configured (or
    defaulted) attribute against the refreshed state. `suppress` maps an attribute to the
    schema's `DiffSuppressFunc` (the configured value passes through its `StateFunc` first)."""
    diff = {}
    for tf_name, (_, kind) in schema.items():
        if tf_name in config:
            want = config[tf_name]
        elif tf_name in defaults:
            want = defaults[tf_name]
        else:
            continue  # Optional+Computed or unset: the state's value is taken as is.
        got = state.get(tf_name)
        got = zero(kind) if got is None else got
        if tf_name in suppress:
            if not suppress[tf_name](got, want, state):
                diff[tf_name] = (got, want)
        elif got != want:
            diff[tf_name] = (got, want)
    return diff


# --- aws_sqs_queue (internal/service/sqs/queue.go) --------------------------------------------

QUEUE_SCHEMA = {  # queue.go `queueAttributeMap`
    "arn": ("QueueArn", "computed"),
    "content_based_deduplication": ("ContentBasedDeduplication", "bool"),
    "deduplication_scope": ("DeduplicationScope", "string"),
    "delay_seconds": ("DelaySeconds", "int"),
    "fifo_queue": ("FifoQueue", "bool"),
    "fifo_throughput_limit": ("FifoThroughputLimit", "string"),
    "kms_data_key_reuse_period_seconds": ("KmsDataKeyReusePeriodSeconds", "int"),
    "kms_master_key_id": ("KmsMasterKeyId", "string"),
    "max_message_size": ("MaximumMessageSize", "int"),
    "message_retention_seconds": ("MessageRetentionPeriod", "int"),
    "policy": ("Policy", "policy"),
    "receive_wait_time_seconds": ("ReceiveMessageWaitTimeSeconds", "int"),
    "redrive_allow_policy": ("RedriveAllowPolicy", "json"),
    "redrive_policy": ("RedrivePolicy", "json"),
    "sqs_managed_sse_enabled": ("SqsManagedSseEnabled", "bool"),
    "visibility_timeout_seconds": ("VisibilityTimeout", "int"),
}
# queue.go `queueSchema` defaults (consts.go `defaultQueue*`).
QUEUE_DEFAULTS = {
    "content_based_deduplication": False,
    "delay_seconds": 0,
    "fifo_queue": False,
    "max_message_size": 262_144,
    "message_retention_seconds": 345_600,
    "receive_wait_time_seconds": 0,
    "visibility_timeout_seconds": 30,
}
# Optional+Computed attributes: `ResourceDataToAPIAttributesCreate` sends them only when set.
QUEUE_OPTIONAL_COMPUTED = {
    "deduplication_scope", "fifo_throughput_limit", "kms_data_key_reuse_period_seconds",
    "policy", "redrive_allow_policy", "redrive_policy", "sqs_managed_sse_enabled",
}
# The queue's `policy` diff is suppressed when equivalent; `redrive_policy` and
# `redrive_allow_policy` have only a `StateFunc` (NormalizeJsonString), so the state's text
# must equal the normalized configuration exactly.
QUEUE_SUPPRESS = {
    "policy": lambda got, want, _: policies_equivalent(got, want),
    # Its DiffSuppressFunc: no diff for a queue with neither SSE nor a KMS key.
    "kms_data_key_reuse_period_seconds": lambda got, want, state: got == want or (
        not state.get("sqs_managed_sse_enabled") and not state.get("kms_master_key_id")
    ),
}


def queue_config(config):
    """The configuration as the provider holds it: JSON strings through their `StateFunc`."""
    out = dict(config)
    for name in ("policy", "redrive_allow_policy", "redrive_policy"):
        if name in out:
            out[name] = normalize_json(out[name])
    return out


def queue_create_attributes(config):
    """attrmap.go `ResourceDataToAPIAttributesCreate` over `queueAttributeMap`."""
    values = {**QUEUE_DEFAULTS, **config}
    attributes = {}
    for tf_name, (api_name, kind) in QUEUE_SCHEMA.items():
        if kind == "computed" or tf_name not in values:
            continue
        value = values[tf_name]
        if kind == "bool":
            if value:  # false is not sent (sqs_managed_sse_enabled only when configured)
                attributes[api_name] = "true"
            elif tf_name == "sqs_managed_sse_enabled" and tf_name in config:
                attributes[api_name] = "false"
        elif kind == "int":
            if tf_name not in QUEUE_OPTIONAL_COMPUTED or value != 0:
                attributes[api_name] = str(value)
        elif value != "":
            attributes[api_name] = value
    return attributes


def queue_attributes_match(got, expected):
    """queue.go `statusQueueAttributeState`'s `attributesMatch`: a missing attribute equals an
    expected empty one (and an unencrypted queue's KmsDataKeyReusePeriodSeconds); `Policy` by
    IAM equivalence; the redrive policies by JSON equality; everything else as strings."""
    for name, want in expected.items():
        if name not in got:
            if want == "":
                continue
            if name == "KmsDataKeyReusePeriodSeconds":
                continue
            return False
        have = got[name]
        if name == "Policy":
            if not policies_equivalent(have, want):
                return False
        elif name in ("RedriveAllowPolicy", "RedrivePolicy"):
            if not json_equal(have, want):
                return False
        elif have != want:
            return False
    return True


def find_queue_attributes(url, names=("All",)):
    """queue.go `findQueueAttributesByURL` / `findQueueAttributes`: GetQueueAttributes; an empty
    map is an `EmptyResultError` (not found)."""
    got = call(sqs, "get_queue_attributes", QueueUrl=url, AttributeNames=list(names))
    attributes = got.get("Attributes", {})
    assert attributes, f"GetQueueAttributes({url}, {names}) answered no attributes"
    return attributes


def wait_queue_attributes_propagated(url, expected):
    """queue.go `waitQueueAttributesPropagated`: `StateChangeConf` with target "equal" and
    `ContinuousTargetOccurence: 6` — six consecutive reads of GetQueueAttributes(All) must match.
    The first must already (the provider would otherwise poll again for up to its timeout)."""
    for read in range(6):
        got = find_queue_attributes(url)
        assert queue_attributes_match(got, expected), (
            f"read {read + 1} of {url} does not echo what was set: {expected} vs {got}"
        )


def read_queue(url, state):
    """queue.go `resourceQueueRead` (GetQueueAttributes(All) through `RetryWhenNotFound`, which
    must find it at once) then the transparent tagging interceptor's `listTags`
    (internal/service/sqs/tags_gen.go: ListQueueTags)."""
    state = to_state(QUEUE_SCHEMA, find_queue_attributes(url), state)
    if state.get("kms_data_key_reuse_period_seconds") in (None, 0):
        state["kms_data_key_reuse_period_seconds"] = 300  # the read's backwards-compat default
    state["url"] = url
    state["tags"] = call(sqs, "list_queue_tags", QueueUrl=url).get("Tags", {})
    return state


def create_queue(name, config, tags):
    """queue.go `resourceQueueCreate`: CreateQueue with the attributes and tags (tag-on-create),
    `waitQueueAttributesPropagated` on what it sent, then `resourceQueueRead`."""
    config = queue_config(config)
    attributes = queue_create_attributes(config)
    params = {"QueueName": name, "Attributes": attributes}
    if tags:
        params["tags"] = tags
    url = call(sqs, "create_queue", **params)["QueueUrl"]
    assert url == f"{ENDPOINT}/{ACCOUNT}/{name}", url
    wait_queue_attributes_propagated(url, attributes)
    state = read_queue(url, dict(config))
    assert plan_after(state, config, tags) == {}, plan_after(state, config, tags)
    return {"url": url, "config": config, "tags": tags, "state": state}


def plan_after(state, config, tags):
    diff = plan_diff(QUEUE_SCHEMA, config, QUEUE_DEFAULTS, state, QUEUE_SUPPRESS)
    if state["tags"] != tags:
        diff["tags"] = (state["tags"], tags)
    return diff


def update_queue(queue, changes):
    """queue.go `resourceQueueUpdate`: SetQueueAttributes with the changed attributes
    (`ResourceDataToAPIAttributesUpdate`: booleans and integers always formatted), the same
    propagation wait, then the read."""
    changes = queue_config(changes)
    attributes = {}
    for tf_name, value in changes.items():
        api_name, kind = QUEUE_SCHEMA[tf_name]
        attributes[api_name] = (
            str(value).lower() if kind == "bool" else str(value) if kind == "int" else value
        )
    call(sqs, "set_queue_attributes", QueueUrl=queue["url"], Attributes=attributes)
    wait_queue_attributes_propagated(queue["url"], attributes)
    queue["config"].update(changes)
    queue["state"] = read_queue(queue["url"], queue["state"])
    assert plan_after(queue["state"], queue["config"], queue["tags"]) == {}


def update_queue_tags(queue, tags):
    """The tagging interceptor's `updateTags` (tags_gen.go): UntagQueue for removed keys, then
    TagQueue for new and changed ones; then the read."""
    old = queue["tags"]
    removed = [k for k in old if k not in tags]
    changed = {k: v for k, v in tags.items() if old.get(k) != v}
    if removed:
        call(sqs, "untag_queue", QueueUrl=queue["url"], TagKeys=removed)
    if changed:
        call(sqs, "tag_queue", QueueUrl=queue["url"], Tags=changed)
    queue["tags"] = tags
    queue["state"] = read_queue(queue["url"], queue["state"])
    assert plan_after(queue["state"], queue["config"], tags) == {}


def delete_queue(queue):
    """queue.go `resourceQueueDelete`: DeleteQueue, then `waitQueueDeleted`: GetQueueAttributes
    (All) until QueueDoesNotExist, `ContinuousTargetOccurence: 15` consecutive times."""
    call(sqs, "delete_queue", QueueUrl=queue["url"])
    for _ in range(15):
        # The provider matches `errCodeQueueDoesNotExist` (sqs/consts.go), the Query-protocol
        # code that aws-sdk-go-v2 reads from the JSON answer's `x-amzn-query-error` header, as
        # botocore does; any other code would fail the wait.
        code = error_of(sqs, "get_queue_attributes", QueueUrl=queue["url"], AttributeNames=["All"])
        assert code == "AWS.SimpleQueueService.NonExistentQueue", code


# --- aws_sqs_queue_redrive_policy (internal/service/sqs/queue_redrive_policy.go, whose
# handler is attribute_funcs.go `queueAttributeHandler`) -----------------------------------------


def upsert_redrive_policy(url, policy):
    """attribute_funcs.go `queueAttributeHandler.Upsert`: SetQueueAttributes {RedrivePolicy:
    NormalizeJsonString(value)}, `waitQueueAttributesPropagated` on it (JSON equality), then
    `Read`."""
    value = normalize_json(policy)
    call(sqs, "set_queue_attributes", QueueUrl=url, Attributes={"RedrivePolicy": value})
    wait_queue_attributes_propagated(url, {"RedrivePolicy": value})
    return read_redrive_policy(url, value)


def read_redrive_policy(url, state):
    """attribute_funcs.go `queueAttributeHandler.Read`: `findQueueAttributeByTwoPartKey`
    (GetQueueAttributes [RedrivePolicy]; missing or empty is not found), then `ToSet`: the
    state keeps its text when the read is JSON-equal (`BytesEqual`). A second plan compares
    that with the normalized configuration."""
    got = find_queue_attributes(url, ["RedrivePolicy"]).get("RedrivePolicy", "")
    assert got != "", f"{url} has no RedrivePolicy: the resource would be gone from the state"
    new_state = state if json_equal(state, got) else got
    assert new_state == state, f"a second plan would change redrive_policy: {state} -> {got}"
    return new_state


def delete_redrive_policy(url):
    """attribute_funcs.go `queueAttributeHandler.Delete`: SetQueueAttributes {RedrivePolicy: ""},
    then the propagation wait with the expectation "" — met only when the attribute is absent
    (JSON equality of "" with anything, even "", is false)."""
    call(sqs, "set_queue_attributes", QueueUrl=url, Attributes={"RedrivePolicy": ""})
    wait_queue_attributes_propagated(url, {"RedrivePolicy": ""})


# --- aws_sns_topic (internal/service/sns/topic.go) ---------------------------------------------

SAMPLE_RATES = ["Application", "Firehose", "HTTP", "Lambda", "SQS"]
TOPIC_SCHEMA = {  # topic.go `topicAttributeMap` (the feedback role ARNs are strings, unset here)
    "arn": ("TopicArn", "computed"),
    "content_based_deduplication": ("ContentBasedDeduplication", "bool"),
    "delivery_policy": ("DeliveryPolicy", "json"),
    "display_name": ("DisplayName", "string"),
    "fifo_topic": ("FifoTopic", "bool"),
    "kms_master_key_id": ("KmsMasterKeyId", "string"),
    "owner": ("Owner", "computed"),
    "policy": ("Policy", "policy"),
    "signature_version": ("SignatureVersion", "int"),
    "tracing_config": ("TracingConfig", "string"),
    **{
        f"{kind.lower()}_success_feedback_sample_rate": (f"{kind}SuccessFeedbackSampleRate", "int")
        for kind in SAMPLE_RATES
    },
}
TOPIC_DEFAULTS = {
    "content_based_deduplication": False,
    "fifo_topic": False,
    # Optional integers without a default are planned as 0 and sent on create as "0".
    **{f"{kind.lower()}_success_feedback_sample_rate": 0 for kind in SAMPLE_RATES},
}
TOPIC_OPTIONAL_COMPUTED = {"policy", "signature_version", "tracing_config"}
TOPIC_SUPPRESS = {
    "policy": lambda got, want, _: policies_equivalent(got, want),  # SuppressEquivalentPolicyDiffs
    "delivery_policy": lambda got, want, _: json_equal(got, want),  # SuppressEquivalentJSONDiffs
}


def topic_create_attributes(config):
    """attrmap.go `ResourceDataToAPIAttributesCreate` over `topicAttributeMap`."""
    values = {**TOPIC_DEFAULTS, **config}
    attributes = {}
    for tf_name, (api_name, kind) in TOPIC_SCHEMA.items():
        if kind == "computed" or tf_name not in values:
            continue
        value = values[tf_name]
        if kind == "bool":
            if value:
                attributes[api_name] = "true"
        elif kind == "int":
            if tf_name not in TOPIC_OPTIONAL_COMPUTED or value != 0:
                attributes[api_name] = str(value)
        elif value != "":
            attributes[api_name] = normalize_json(value) if kind in ("json", "policy") else value
    return attributes


def valid_aws_principals(policy):
    """iam `PolicyHasValidAWSPrincipals`, which topic.go `findTopicAttributesWithValid
    AWSPrincipalsByARN` runs on every read: the policy must be JSON with a `Statement` list
    (else the read fails), and each `Principal.AWS` string an ARN, an account id or "*" (else
    the read is retried for two minutes)."""
    document = json.loads(policy)  # an unparsable or missing Policy fails the read
    statements = document.get("Statement")
    assert isinstance(statements, list), f"Statement[*] finds nothing in {policy}"
    for statement in statements:
        principal = statement.get("Principal")
        aws = principal.get("AWS") if isinstance(principal, dict) else None
        if isinstance(aws, str):
            ok = aws == "*" or aws.startswith("arn:") or (len(aws) == 12 and aws.isdigit())
            assert ok, f"invalid AWS principal {aws!r}: the provider would retry the read"


def read_topic(arn, state):
    """topic.go `resourceTopicRead`: GetTopicAttributes (principals checked), the attribute map
    into the state, then the tagging interceptor's ListTagsForResource (sns/tags_gen.go)."""
    attributes = call(sns, "get_topic_attributes", TopicArn=arn)["Attributes"]
    assert attributes, "GetTopicAttributes answered no attributes"
    valid_aws_principals(attributes.get("Policy", ""))
    state = to_state(TOPIC_SCHEMA, attributes, state)
    tags = call(sns, "list_tags_for_resource", ResourceArn=arn)["Tags"]
    state["tags"] = {t["Key"]: t["Value"] for t in tags}
    return state


def topic_plan(topic):
    config = topic["config"]
    diff = plan_diff(TOPIC_SCHEMA, config, TOPIC_DEFAULTS, topic["state"], TOPIC_SUPPRESS)
    if topic["state"]["tags"] != topic["tags"]:
        diff["tags"] = (topic["state"]["tags"], topic["tags"])
    return diff


def create_topic(name, config, tags):
    """topic.go `resourceTopicCreate`: CreateTopic with the tags and only `FifoTopic` among the
    attributes, then `putTopicAttributes`: one SetTopicAttributes per remaining attribute (an
    empty Policy skipped; Go's map order — sorted here), then the read."""
    config = {k: normalize_json(v) if k in ("policy", "delivery_policy") else v
              for k, v in config.items()}
    attributes = topic_create_attributes(config)
    params = {"Name": name}
    if tags:  # `getTagsIn` is nil without tags
        params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    if "FifoTopic" in attributes:
        params["Attributes"] = {"FifoTopic": attributes.pop("FifoTopic")}
    arn = call(sns, "create_topic", **params)["TopicArn"]
    assert arn == f"arn:aws:sns:{REGION}:{ACCOUNT}:{name}", arn
    for attribute, value in sorted(attributes.items()):
        call(sns, "set_topic_attributes", TopicArn=arn, AttributeName=attribute,
             AttributeValue=value)
    topic = {"arn": arn, "config": config, "tags": tags}
    topic["state"] = read_topic(arn, dict(config))
    assert topic_plan(topic) == {}, topic_plan(topic)
    return topic


def delete_topic(topic):
    """topic.go `resourceTopicDelete`: DeleteTopic and no wait; a later refresh's
    GetTopicAttributes answers NotFound (`findTopicAttributesByARN` → removed from state)."""
    call(sns, "delete_topic", TopicArn=topic["arn"])
    assert error_of(sns, "get_topic_attributes", TopicArn=topic["arn"]) == "NotFound"


# --- aws_sns_topic_subscription (internal/service/sns/topic_subscription.go) -------------------

SUBSCRIPTION_SCHEMA = {  # topic_subscription.go `subscriptionAttributeMap`
    "arn": ("SubscriptionArn", "computed"),
    "confirmation_was_authenticated": ("ConfirmationWasAuthenticated", "computed-bool"),
    "delivery_policy": ("DeliveryPolicy", "json"),
    "endpoint": ("Endpoint", "string"),
    "filter_policy": ("FilterPolicy", "json"),
    "filter_policy_scope": ("FilterPolicyScope", "string"),
    "owner_id": ("Owner", "computed"),
    "pending_confirmation": ("PendingConfirmation", "computed-bool"),
    "protocol": ("Protocol", "string"),
    "raw_message_delivery": ("RawMessageDelivery", "bool"),
    "redrive_policy": ("RedrivePolicy", "json"),
    "replay_policy": ("ReplayPolicy", "json"),
    "subscription_role_arn": ("SubscriptionRoleArn", "string"),
    "topic_arn": ("TopicArn", "string"),
}
SUBSCRIPTION_DEFAULTS = {"raw_message_delivery": False}
SUBSCRIPTION_SUPPRESS = {  # verify.SuppressEquivalentJSONDiffs on the JSON attributes
    name: lambda got, want, _: json_equal(got, want)
    for name in ("filter_policy", "redrive_policy", "replay_policy")
}


def to_subscription_state(attributes, state):
    schema = {k: (a, "bool" if kind == "computed-bool" else kind)
              for k, (a, kind) in SUBSCRIPTION_SCHEMA.items()}
    return to_state(schema, attributes, state)


def find_subscription(arn):
    """topic_subscription.go `findSubscriptionAttributesByARN`: GetSubscriptionAttributes; no
    attributes is not found."""
    attributes = call(sns, "get_subscription_attributes", SubscriptionArn=arn)["Attributes"]
    assert attributes, "GetSubscriptionAttributes answered no attributes"
    return attributes


def subscription_plan(subscription):
    return plan_diff(SUBSCRIPTION_SCHEMA, subscription["config"], SUBSCRIPTION_DEFAULTS,
                     subscription["state"], SUBSCRIPTION_SUPPRESS)


def subscribe(config):
    """topic_subscription.go `resourceTopicSubscriptionCreate`: Subscribe with the attributes
    (Endpoint, Protocol and TopicArn as parameters instead) and `ReturnSubscriptionArn: true`;
    for `sqs` `waitSubscriptionConfirmed` (GetSubscriptionAttributes until PendingConfirmation
    is "false"; any other value than "true"/"false" fails the wait); then the read."""
    config = {k: normalize_json(v) if SUBSCRIPTION_SCHEMA[k][1] == "json" else v
              for k, v in config.items()}
    attributes = {}
    for tf_name, value in config.items():
        api_name, kind = SUBSCRIPTION_SCHEMA[tf_name]
        if tf_name in ("endpoint", "protocol", "topic_arn"):
            continue
        if kind == "bool":
            if value:
                attributes[api_name] = "true"
        elif value != "":
            attributes[api_name] = value
    arn = call(
        sns, "subscribe", TopicArn=config["topic_arn"], Protocol=config["protocol"],
        Endpoint=config["endpoint"], Attributes=attributes, ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    assert arn.startswith(config["topic_arn"] + ":"), arn
    pending = find_subscription(arn).get("PendingConfirmation")
    assert pending == "false", f"PendingConfirmation {pending!r}: the wait would not end"
    subscription = {"arn": arn, "config": config}
    subscription["state"] = to_subscription_state(find_subscription(arn), dict(config))
    assert subscription_plan(subscription) == {}, subscription_plan(subscription)
    return subscription


def update_subscription(subscription, changes):
    """topic_subscription.go `resourceTopicSubscriptionUpdate` → `putSubscriptionAttributes`:
    one SetSubscriptionAttributes per changed attribute (booleans formatted), then the read."""
    for tf_name, value in changes.items():
        api_name, kind = SUBSCRIPTION_SCHEMA[tf_name]
        text = str(value).lower() if kind == "bool" else value
        call(sns, "set_subscription_attributes", SubscriptionArn=subscription["arn"],
             AttributeName=api_name, AttributeValue=text)
    subscription["config"].update(changes)
    subscription["state"] = to_subscription_state(
        find_subscription(subscription["arn"]), subscription["state"])
    assert subscription_plan(subscription) == {}, subscription_plan(subscription)


def unsubscribe(subscription):
    """topic_subscription.go `resourceTopicSubscriptionDelete`: Unsubscribe, then
    `waitSubscriptionDeleted`: GetSubscriptionAttributes until NotFound."""
    call(sns, "unsubscribe", SubscriptionArn=subscription["arn"])
    code = error_of(sns, "get_subscription_attributes", SubscriptionArn=subscription["arn"])
    assert code == "NotFound", code


# --- the run: apply, a second plan, an update, destroy ----------------------------------------

RESOURCES = {}


def queue_arn(name):
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def apply():
    """`terraform apply` of a configuration like infra/terraform's modules, in dependency
    order: the queues, the redrive policy resource, the topic, the subscription."""
    RESOURCES["dlq"] = create_queue("tf6-dlq", {
        "message_retention_seconds": 1_209_600,
        "sqs_managed_sse_enabled": True,
        "redrive_allow_policy": json.dumps({
            "redrivePermission": "byQueue", "sourceQueueArns": [queue_arn("tf6-main")],
        }),
    }, {"team": "payments", "env": "test"})
    RESOURCES["main"] = create_queue("tf6-main", {
        "visibility_timeout_seconds": 60,
        "receive_wait_time_seconds": 20,
        "delay_seconds": 5,
        "max_message_size": 2048,
        # jsonencode() output: key order as written, a single statement's Action a string.
        "policy": json.dumps({
            "Version": "2012-10-17",
            "Statement": [{
                "Sid": "topic", "Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
                "Action": "sqs:SendMessage", "Resource": queue_arn("tf6-main"),
                "Condition": {"ArnEquals": {
                    "aws:SourceArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:tf6-events"}},
            }],
        }),
    }, {"team": "payments"})
    RESOURCES["orders_dlq"] = create_queue("tf6-orders-dlq.fifo", {"fifo_queue": True}, {})
    RESOURCES["orders"] = create_queue("tf6-orders.fifo", {
        "fifo_queue": True,
        "content_based_deduplication": True,
        "deduplication_scope": "messageGroup",
        "fifo_throughput_limit": "perMessageGroupId",
        # v6 validates max_message_size up to 1 MiB, SQS's limit since 2025.
        "max_message_size": 1_048_576,
        "kms_master_key_id": "alias/aws/sqs",
        "kms_data_key_reuse_period_seconds": 600,
        "redrive_policy": json.dumps({
            "maxReceiveCount": 4, "deadLetterTargetArn": queue_arn("tf6-orders-dlq.fifo"),
        }),
    }, {"kind": "fifo"})
    RESOURCES["redrive"] = upsert_redrive_policy(RESOURCES["main"]["url"], json.dumps({
        "deadLetterTargetArn": queue_arn("tf6-dlq"), "maxReceiveCount": 3,
    }))
    RESOURCES["topic"] = create_topic("tf6-events", {
        "display_name": "Events & <more>",
        "signature_version": 2,
        "tracing_config": "Active",
        "policy": json.dumps({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow", "Principal": {"AWS": ACCOUNT},
                "Action": ["SNS:Publish", "SNS:Subscribe"],
                "Resource": f"arn:aws:sns:{REGION}:{ACCOUNT}:tf6-events",
            }],
        }),
        "delivery_policy": json.dumps({"http": {"defaultHealthyRetryPolicy": {
            "numRetries": 3, "minDelayTarget": 20, "maxDelayTarget": 20}}}),
    }, {"team": "payments"})
    RESOURCES["fifo_topic"] = create_topic("tf6-orders.fifo", {
        "fifo_topic": True, "content_based_deduplication": True,
    }, {})
    RESOURCES["subscription"] = subscribe({
        "topic_arn": RESOURCES["topic"]["arn"],
        "protocol": "sqs",
        "endpoint": queue_arn("tf6-main"),
        "filter_policy": json.dumps({"kind": ["order"], "total": [{"numeric": [">", 10]}]}),
        "filter_policy_scope": "MessageBody",
        "raw_message_delivery": True,
        "redrive_policy": json.dumps({"deadLetterTargetArn": queue_arn("tf6-dlq")}),
    })


def second_plan():
    """A second `terraform plan`: every resource refreshed with its read sequence, none with a
    diff."""
    for name in ("dlq", "main", "orders_dlq", "orders"):
        queue = RESOURCES[name]
        queue["state"] = read_queue(queue["url"], queue["state"])
        assert plan_after(queue["state"], queue["config"], queue["tags"]) == {}, name
    RESOURCES["redrive"] = read_redrive_policy(RESOURCES["main"]["url"], RESOURCES["redrive"])
    # The main queue's own redrive_policy is Optional+Computed and not configured: it reads the
    # redrive policy resource's value and shows no diff.
    assert json_equal(RESOURCES["main"]["state"]["redrive_policy"], RESOURCES["redrive"])
    topic = RESOURCES["topic"]
    topic["state"] = read_topic(topic["arn"], topic["state"])
    assert topic_plan(topic) == {}, topic_plan(topic)
    fifo_topic = RESOURCES["fifo_topic"]
    fifo_topic["state"] = read_topic(fifo_topic["arn"], fifo_topic["state"])
    assert topic_plan(fifo_topic) == {}, topic_plan(fifo_topic)
    subscription = RESOURCES["subscription"]
    subscription["state"] = to_subscription_state(
        find_subscription(subscription["arn"]), subscription["state"])
    assert subscription_plan(subscription) == {}, subscription_plan(subscription)


def update():
    """One attribute per resource changed and applied, then planned again without a diff."""
    update_queue(RESOURCES["main"], {"visibility_timeout_seconds": 90})
    update_queue(RESOURCES["orders"], {"content_based_deduplication": False})
    update_queue_tags(RESOURCES["dlq"], {"team": "payments", "env": "prod"})
    RESOURCES["redrive"] = upsert_redrive_policy(RESOURCES["main"]["url"], json.dumps({
        "deadLetterTargetArn": queue_arn("tf6-dlq"), "maxReceiveCount": 5,
    }))
    topic = RESOURCES["topic"]
    call(sns, "set_topic_attributes", TopicArn=topic["arn"], AttributeName="DisplayName",
         AttributeValue="Renamed")  # topic.go `resourceTopicUpdate` → `putTopicAttributes`
    topic["config"]["display_name"] = "Renamed"
    topic["state"] = read_topic(topic["arn"], topic["state"])
    assert topic_plan(topic) == {}, topic_plan(topic)
    update_subscription(RESOURCES["subscription"], {"raw_message_delivery": False})
    second_plan()


def destroy():
    """`terraform destroy`, dependents first."""
    unsubscribe(RESOURCES["subscription"])
    delete_topic(RESOURCES["topic"])
    delete_topic(RESOURCES["fifo_topic"])
    delete_redrive_policy(RESOURCES["main"]["url"])
    for name in ("orders", "orders_dlq", "main", "dlq"):
        delete_queue(RESOURCES[name])


def main():
    passed = failed = 0
    for phase in (apply, second_plan, update, destroy):
        if failed:
            print(f"test terraform_v6::{phase.__name__} ... FAILED (an earlier phase failed)")
            failed += 1
            continue
        try:
            phase()
            print(f"test terraform_v6::{phase.__name__} ... ok")
            passed += 1
        except Exception:
            print(f"test terraform_v6::{phase.__name__} ... FAILED")
            traceback.print_exc(file=sys.stdout)
            failed += 1
    print(f"replayed {len(CALLS)} provider calls ({sqs.meta.service_model.protocol} protocol "
          f"for SQS, {sns.meta.service_model.protocol} for SNS)")
    print(f"terraform v6 replay result: {passed} passed; {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
