"""The Python client generated from openapi/openapi.json, driving a real server.

tests/clients/run.sh generates the `sluice_client` package fresh from the committed spec, puts it
on PYTHONPATH and runs this file with SLUICE_URL (the server) and SLUICE_ADMIN_TOKEN (an admin
token) set. Every call goes through the generated code: a route, parameter or field that the
spec gets wrong shows up as an error status, an undocumented status (the client raises
UnexpectedStatus) or a model that does not parse.
"""

import json
import os
import time
import uuid
from http import HTTPStatus

import pytest

from sluice_client import AuthenticatedClient, Client
from sluice_client.api.admin import (
    create_tenant,
    delete_tenant,
    get_tenant,
    list_tenants,
    mint_tenant_token,
    update_tenant,
)
from sluice_client.api.messages import (
    change_message_visibility,
    change_message_visibility_batch,
    dead_letter_message,
    delete_message,
    delete_message_batch,
    peek_messages,
    receive_messages,
    send_message,
    send_message_batch,
)
from sluice_client.api.topics import (
    delete_topic,
    get_subscription,
    get_topic,
    list_subscriptions,
    list_topics,
    patch_subscription,
    publish_message,
    publish_message_batch,
    put_topic,
    subscribe,
    unsubscribe,
)
from sluice_client.api.redrive import (
    cancel_redrive_task,
    get_redrive_task,
    list_redrive_tasks,
    start_redrive,
)
from sluice_client.types import UNSET, Unset
from sluice_client.api.operations import check_health, check_readiness
from sluice_client.api.queues import (
    delete_queue,
    get_queue,
    list_queues,
    patch_queue,
    purge_queue,
    put_queue,
)
from sluice_client.models import (
    Attribute,
    CreateTenant,
    DeadLetterInput,
    DeleteBatch,
    DeleteBatchEntry,
    ErrorBody,
    FilterPolicyScope,
    MessageList,
    MintToken,
    PeekState,
    PublishBatch,
    PublishBatchEntry,
    PublishBatchEntryAttributesType0,
    PublishBatchOutput,
    PublishMessage,
    PublishMessageAttributesType0,
    Queue,
    QueueConfigInput,
    QueueList,
    QuotasBody,
    ReceiveInput,
    RedriveInput,
    RedrivePolicy,
    RedriveTaskList,
    RedriveTaskOutput,
    SendBatch,
    SendBatchEntry,
    SendMessage,
    SendMessageAttributesType0,
    SubscribeInput,
    SubscribeInputFilterPolicyType0,
    Subscription,
    SubscriptionList,
    SubscriptionPatchInput,
    Tenant,
    TenantList,
    Topic,
    TopicInput,
    TopicInputTagsType0,
    TopicList,
    UpdateTenant,
    VisibilityBatch,
    VisibilityBatchEntry,
    VisibilityInput,
)

BASE = os.environ["SLUICE_URL"]


def client(token: str) -> AuthenticatedClient:
    # Undocumented statuses raise: the spec must list every answer the server gives.
    return AuthenticatedClient(base_url=BASE, token=token, raise_on_unexpected_status=True)


@pytest.fixture(scope="module")
def admin() -> AuthenticatedClient:
    return client(os.environ["SLUICE_ADMIN_TOKEN"])


@pytest.fixture(scope="module")
def tenant_id(admin) -> str:
    tid = f"py-{uuid.uuid4().hex[:12]}"
    answer = create_tenant.sync_detailed(
        client=admin, body=CreateTenant(id=tid, quotas=QuotasBody(max_queues=50))
    )
    assert answer.status_code == HTTPStatus.CREATED, answer.content
    assert isinstance(answer.parsed, Tenant)
    assert answer.parsed.quotas.max_queues == 50
    return tid


@pytest.fixture(scope="module")
def tenant(admin, tenant_id) -> AuthenticatedClient:
    minted = mint_tenant_token.sync(
        tenant_id,
        client=admin,
        body=MintToken(
            scopes=["queues:manage", "messages:send", "messages:consume", "topics:manage", "topics:publish"],
            ttl_seconds=600,
        ),
    )
    assert minted is not None and not isinstance(minted, ErrorBody), minted
    assert minted.expires_at.year >= 2000
    return client(minted.token)


def test_operations_probes():
    anonymous = Client(base_url=BASE, raise_on_unexpected_status=True)
    assert check_health.sync(client=anonymous).status == "ok"
    assert check_readiness.sync(client=anonymous).status == "ok"


def test_admin_tenants(admin, tenant_id):
    one = get_tenant.sync(tenant_id, client=admin)
    assert isinstance(one, Tenant) and one.id == tenant_id
    updated = update_tenant.sync(
        tenant_id, client=admin, body=UpdateTenant(quotas=QuotasBody(max_queues=40, max_topics=3))
    )
    assert isinstance(updated, Tenant)
    assert (updated.quotas.max_queues, updated.quotas.max_topics) == (40, 3)
    # Page through every tenant, one at a time: ours is among them.
    seen, token = [], None
    while True:
        page = list_tenants.sync(client=admin, limit=1, next_token=token if token else None)
        assert isinstance(page, TenantList) and len(page.tenants) <= 1
        seen += [t.id for t in page.tenants]
        token = page.next_token
        if not token:
            break
    assert tenant_id in seen
    # A tenant that does not exist decodes into the typed error.
    missing = get_tenant.sync_detailed("no-such-tenant-x", client=admin)
    assert missing.status_code == HTTPStatus.NOT_FOUND
    assert isinstance(missing.parsed, ErrorBody)
    assert missing.parsed.error.code == "TenantNotFound"


def test_queues(tenant):
    created = put_queue.sync_detailed(
        "py-orders", client=tenant, body=QueueConfigInput(visibility_timeout_seconds=45)
    )
    assert created.status_code == HTTPStatus.CREATED, created.content
    assert isinstance(created.parsed, Queue)
    assert created.parsed.kind == "standard"
    assert created.parsed.config.visibility_timeout_seconds == 45
    replaced = put_queue.sync_detailed("py-orders", client=tenant, body=QueueConfigInput())
    assert replaced.status_code == HTTPStatus.OK
    assert replaced.parsed.config.visibility_timeout_seconds == 30
    patched = patch_queue.sync(
        "py-orders", client=tenant, body=QueueConfigInput(delay_seconds=5, max_depth=1000)
    )
    assert isinstance(patched, Queue)
    assert (patched.config.delay_seconds, patched.config.max_depth) == (5, 1000)
    fifo = put_queue.sync("py-jobs.fifo", client=tenant, body=QueueConfigInput(content_based_deduplication=True))
    assert isinstance(fifo, Queue) and fifo.kind == "fifo"
    assert fifo.config.content_based_deduplication is True
    for name in ("py-a", "py-b", "py-c"):
        assert isinstance(put_queue.sync(name, client=tenant, body=QueueConfigInput()), Queue)
    # Pagination: two at a time over the prefix.
    names, token = [], None
    while True:
        page = list_queues.sync(client=tenant, prefix="py-", limit=2, next_token=token if token else None)
        assert isinstance(page, QueueList) and len(page.queues) <= 2
        names += [q.name for q in page.queues]
        token = page.next_token
        if not token:
            break
    assert names == ["py-a", "py-b", "py-c", "py-jobs.fifo", "py-orders"]
    got = get_queue.sync("py-orders", client=tenant)
    assert isinstance(got, Queue) and got.stats.visible == 0 and got.stats.oldest_age_seconds is None
    for name in ("py-a", "py-b", "py-c"):
        assert delete_queue.sync_detailed(name, client=tenant).status_code == HTTPStatus.NO_CONTENT
    gone = get_queue.sync_detailed("py-a", client=tenant)
    assert gone.status_code == HTTPStatus.NOT_FOUND
    assert isinstance(gone.parsed, ErrorBody) and gone.parsed.error.code == "QueueNotFound"


def test_messages(tenant):
    assert put_queue.sync("py-work", client=tenant, body=QueueConfigInput()) is not None
    attributes = SendMessageAttributesType0.from_dict({"kind": {"type": "String", "value": "greeting"}})
    sent = send_message.sync_detailed(
        "py-work", client=tenant, body=SendMessage(body="hello", attributes=attributes)
    )
    assert sent.status_code == HTTPStatus.CREATED, sent.content
    assert sent.parsed.md5_of_body == "5d41402abc4b2a76b9719d911017c592"
    assert sent.parsed.duplicate is False
    batch = send_message_batch.sync(
        "py-work",
        client=tenant,
        body=SendBatch(entries=[SendBatchEntry(id=f"e{i}", body=f"batch {i}") for i in range(3)]),
    )
    assert [s.id for s in batch.successful] == ["e0", "e1", "e2"] and batch.failed == []
    assert all(s.message_id for s in batch.successful)
    peeked = peek_messages.sync("py-work", client=tenant, limit=10)
    assert isinstance(peeked, MessageList) and len(peeked.messages) == 4
    received = receive_messages.sync(
        "py-work", client=tenant, body=ReceiveInput(max_messages=10, visibility_timeout_seconds=60)
    )
    assert isinstance(received, MessageList) and len(received.messages) == 4
    by_body = {m.body: m for m in received.messages}
    hello = by_body["hello"]
    assert hello.message_id == sent.parsed.message_id
    assert hello.attributes["kind"].value == "greeting"
    assert hello.receive_count == 1 and hello.sent_at.year >= 2000
    in_flight = peek_messages.sync("py-work", client=tenant, state=PeekState.IN_FLIGHT)
    assert len(in_flight.messages) == 4
    assert all(isinstance(m.receipt_handle, Unset) for m in in_flight.messages)
    # One back to visible, one with a longer timeout, in a batch; then delete all four.
    changed = change_message_visibility.sync_detailed(
        "py-work", hello.receipt_handle, client=tenant, body=VisibilityInput(visibility_timeout_seconds=0)
    )
    assert changed.status_code == HTTPStatus.NO_CONTENT
    others = [by_body[f"batch {i}"] for i in range(3)]
    vis = change_message_visibility_batch.sync(
        "py-work",
        client=tenant,
        body=VisibilityBatch(
            entries=[VisibilityBatchEntry(id="v0", receipt_handle=others[0].receipt_handle, visibility_timeout_seconds=120)]
        ),
    )
    assert [s.id for s in vis.successful] == ["v0"] and vis.failed == []
    again = receive_messages.sync("py-work", client=tenant, body=ReceiveInput())
    assert [m.body for m in again.messages] == ["hello"]
    # The first handle is stale now: the message was delivered again.
    stale = delete_message.sync_detailed("py-work", hello.receipt_handle, client=tenant)
    assert stale.status_code == HTTPStatus.GONE
    assert isinstance(stale.parsed, ErrorBody) and stale.parsed.error.code == "ReceiptHandleStale"
    assert delete_message.sync_detailed(
        "py-work", again.messages[0].receipt_handle, client=tenant
    ).status_code == HTTPStatus.NO_CONTENT
    deleted = delete_message_batch.sync(
        "py-work",
        client=tenant,
        body=DeleteBatch(entries=[DeleteBatchEntry(id=f"d{i}", receipt_handle=m.receipt_handle) for i, m in enumerate(others)]),
    )
    assert sorted(s.id for s in deleted.successful) == ["d0", "d1", "d2"] and deleted.failed == []
    assert get_queue.sync("py-work", client=tenant).stats.in_flight == 0
    send_message.sync("py-work", client=tenant, body=SendMessage(body="to purge"))
    assert purge_queue.sync_detailed("py-work", client=tenant).status_code == HTTPStatus.NO_CONTENT
    assert get_queue.sync("py-work", client=tenant).stats.visible == 0


def test_dead_letters_and_redrive(tenant):
    assert isinstance(put_queue.sync("py-dlq", client=tenant, body=QueueConfigInput()), Queue)
    source = put_queue.sync(
        "py-source",
        client=tenant,
        body=QueueConfigInput(redrive_policy=RedrivePolicy(dead_letter_queue="py-dlq", max_receive_count=3)),
    )
    assert isinstance(source, Queue)
    assert source.config.redrive_policy.dead_letter_queue == "py-dlq"
    send_message.sync("py-source", client=tenant, body=SendMessage(body="poison"))
    got = receive_messages.sync("py-source", client=tenant, body=ReceiveInput())
    moved = dead_letter_message.sync_detailed(
        "py-source", got.messages[0].receipt_handle, client=tenant, body=DeadLetterInput(reason="unparseable")
    )
    assert moved.status_code == HTTPStatus.NO_CONTENT, moved.content
    in_dlq = peek_messages.sync("py-dlq", client=tenant)
    assert [m.body for m in in_dlq.messages] == ["poison"]
    assert in_dlq.messages[0].dead_letter.reason == "unparseable"
    assert in_dlq.messages[0].dead_letter.source_queue == "py-source"
    task = start_redrive.sync_detailed("py-dlq", client=tenant, body=RedriveInput(max_messages_per_second=100))
    assert task.status_code == HTTPStatus.ACCEPTED, task.content
    assert isinstance(task.parsed, RedriveTaskOutput) and task.parsed.to_move == 1
    deadline = time.monotonic() + 20
    while True:
        one = get_redrive_task.sync(task.parsed.id, client=tenant)
        assert isinstance(one, RedriveTaskOutput)
        if one.status != "running":
            break
        assert time.monotonic() < deadline, one
        time.sleep(0.05)
    assert (one.status, one.moved, one.failed) == ("completed", 1, 0)
    listed = list_redrive_tasks.sync(client=tenant, queue="py-dlq")
    assert isinstance(listed, RedriveTaskList) and [t.id for t in listed.tasks] == [task.parsed.id]
    ended = cancel_redrive_task.sync_detailed(task.parsed.id, client=tenant)
    assert ended.status_code == HTTPStatus.CONFLICT and ended.parsed.error.code == "Conflict"
    back = peek_messages.sync("py-source", client=tenant)
    assert [m.body for m in back.messages] == ["poison"] and back.messages[0].receive_count == 0
    missing = get_redrive_task.sync_detailed("no-such-task", client=tenant)
    assert missing.status_code == HTTPStatus.NOT_FOUND and missing.parsed.error.code == "TaskNotFound"


def receive_exactly(tenant, queue: str, count: int) -> list:
    """Receives until `count` copies have arrived (publishing makes them receivable at once, but a
    receive may answer fewer than are there), then checks that no further copy is waiting."""
    got, deadline = [], time.monotonic() + 10
    while len(got) < count:
        assert time.monotonic() < deadline, f"{queue}: {len(got)} of {count} copies"
        page = receive_messages.sync(
            queue, client=tenant, body=ReceiveInput(max_messages=10, visibility_timeout_seconds=60, wait_seconds=1)
        )
        assert isinstance(page, MessageList), page
        got += page.messages
    rest = receive_messages.sync(queue, client=tenant, body=ReceiveInput(max_messages=10, wait_seconds=0))
    assert len(got) == count and rest.messages == [], [m.body for m in got + rest.messages]
    return got


def test_topics(tenant):
    # Topics: a standard one (PUT creates, then replaces) and a FIFO one.
    created = put_topic.sync_detailed(
        "py-news", client=tenant, body=TopicInput(tags=TopicInputTagsType0.from_dict({"team": "billing"}))
    )
    assert created.status_code == HTTPStatus.CREATED, created.content
    assert isinstance(created.parsed, Topic)
    assert (created.parsed.name, created.parsed.kind, created.parsed.subscription_count) == ("py-news", "standard", 0)
    assert created.parsed.config.tags["team"] == "billing"
    replaced = put_topic.sync_detailed(
        "py-news", client=tenant, body=TopicInput(tags=TopicInputTagsType0.from_dict({"team": "orders"}))
    )
    assert replaced.status_code == HTTPStatus.OK, replaced.content
    assert replaced.parsed.created_at == created.parsed.created_at
    assert replaced.parsed.config.tags.to_dict() == {"team": "orders"}
    # The body is optional, but the generated client cannot leave it out (it would send UNSET).
    fifo = put_topic.sync_detailed("py-orders.fifo", client=tenant, body=TopicInput())
    assert fifo.status_code == HTTPStatus.CREATED, fifo.content
    assert fifo.parsed.kind == "fifo" and fifo.parsed.config.content_based_deduplication is False
    for name in ("py-big", "py-all", "py-ship.fifo"):
        assert isinstance(put_queue.sync(name, client=tenant, body=QueueConfigInput()), Queue)

    # A raw subscription with a filter policy on the attributes, and an enveloped one for all.
    policy = {"amount": [{"numeric": [">=", 100]}]}
    big_input = SubscribeInput(
        queue="py-big",
        filter_policy=SubscribeInputFilterPolicyType0.from_dict(policy),
        filter_policy_scope=FilterPolicyScope.ATTRIBUTES,
        raw_delivery=True,
    )
    made = subscribe.sync_detailed("py-news", client=tenant, body=big_input)
    assert made.status_code == HTTPStatus.CREATED, made.content
    big = made.parsed
    assert isinstance(big, Subscription)
    assert (big.topic, big.queue, big.raw_delivery) == ("py-news", "py-big", True)
    assert big.filter_policy.to_dict() == policy
    assert big.filter_policy_scope == FilterPolicyScope.ATTRIBUTES and big.dead_letter_queue is None
    assert big.stats.to_dict() == {"delivered": 0, "filtered_out": 0, "failed": 0}
    made = subscribe.sync_detailed("py-news", client=tenant, body=SubscribeInput(queue="py-all"))
    assert made.status_code == HTTPStatus.CREATED, made.content
    everything = made.parsed
    assert everything.raw_delivery is False and everything.filter_policy is None
    assert everything.filter_policy_scope == FilterPolicyScope.ATTRIBUTES
    # The same subscription again: the existing one, with 200.
    again = subscribe.sync_detailed("py-news", client=tenant, body=big_input)
    assert again.status_code == HTTPStatus.OK, again.content
    assert again.parsed.id == big.id

    # Publish one message the policy matches and one it does not.
    published = publish_message.sync_detailed(
        "py-news",
        client=tenant,
        body=PublishMessage(
            body='{"order": 42}',
            subject="Big order",
            attributes=PublishMessageAttributesType0.from_dict({"amount": {"type": "Number", "value": "250"}}),
        ),
    )
    assert published.status_code == HTTPStatus.CREATED, published.content
    assert published.parsed.duplicate is False and published.parsed.sequence_number is None
    small = publish_message.sync_detailed(
        "py-news",
        client=tenant,
        body=PublishMessage(
            body="small", attributes=PublishMessageAttributesType0.from_dict({"amount": {"type": "Number", "value": "5"}})
        ),
    )
    assert small.status_code == HTTPStatus.CREATED, small.content

    # The raw copy: the body and attributes as published, under an id of its own.
    [raw] = receive_exactly(tenant, "py-big", 1)
    assert raw.body == '{"order": 42}'
    assert raw.attributes.to_dict() == {"amount": {"type": "Number", "value": "250"}}
    assert raw.message_id != published.parsed.message_id
    # The enveloped copies: SNS notifications, without attributes of their own.
    copies = receive_exactly(tenant, "py-all", 2)
    envelopes = {e["MessageId"]: e for e in (json.loads(m.body) for m in copies)}
    assert set(envelopes) == {published.parsed.message_id, small.parsed.message_id}
    envelope = envelopes[published.parsed.message_id]
    assert envelope["Type"] == "Notification"
    assert envelope["Message"] == '{"order": 42}' and envelope["Subject"] == "Big order"
    assert envelope["MessageAttributes"] == {"amount": {"Type": "Number", "Value": "250"}}
    assert envelope["TopicArn"].endswith(":py-news")
    assert envelopes[small.parsed.message_id]["Message"] == "small"
    assert all(m.attributes.to_dict() == {} for m in copies)
    stats = get_subscription.sync(big.id, client=tenant)
    assert isinstance(stats, Subscription)
    assert stats.stats.to_dict() == {"delivered": 1, "filtered_out": 1, "failed": 0}
    assert get_subscription.sync(everything.id, client=tenant).stats.delivered == 2

    # A batch: each entry on its own, a bad one fails alone.
    batch = publish_message_batch.sync_detailed(
        "py-news",
        client=tenant,
        body=PublishBatch(
            entries=[
                PublishBatchEntry(
                    id=f"p{amount}",
                    body=f"amount {amount}",
                    attributes=PublishBatchEntryAttributesType0.from_dict({"amount": {"type": "Number", "value": str(amount)}}),
                )
                for amount in (500, 1)
            ]
            + [PublishBatchEntry(id="bad", body="no subject", subject="")]
        ),
    )
    assert batch.status_code == HTTPStatus.OK, batch.content
    assert isinstance(batch.parsed, PublishBatchOutput)
    assert sorted(s.id for s in batch.parsed.successful) == ["p1", "p500"]
    assert all(s.message_id and s.duplicate is False for s in batch.parsed.successful)
    assert [(f.id, f.code) for f in batch.parsed.failed] == [("bad", "ValidationError")]
    assert [m.body for m in receive_exactly(tenant, "py-big", 1)] == ["amount 500"]
    assert len(receive_exactly(tenant, "py-all", 2)) == 2
    assert get_subscription.sync(big.id, client=tenant).stats.to_dict() == {
        "delivered": 2,
        "filtered_out": 2,
        "failed": 0,
    }

    # FIFO: a group and a deduplication id; repeating the id answers the original.
    shipping = subscribe.sync_detailed(
        "py-orders.fifo", client=tenant, body=SubscribeInput(queue="py-ship.fifo", raw_delivery=True)
    )
    assert shipping.status_code == HTTPStatus.CREATED, shipping.content
    first = publish_message.sync_detailed(
        "py-orders.fifo", client=tenant, body=PublishMessage(body="first", group_id="g", deduplication_id="d1")
    )
    assert first.status_code == HTTPStatus.CREATED, first.content
    assert first.parsed.duplicate is False and isinstance(first.parsed.sequence_number, str)
    repeated = publish_message.sync_detailed(
        "py-orders.fifo", client=tenant, body=PublishMessage(body="first", group_id="g", deduplication_id="d1")
    )
    assert repeated.status_code == HTTPStatus.OK, repeated.content
    assert repeated.parsed.duplicate is True
    assert repeated.parsed.sequence_number == first.parsed.sequence_number
    assert repeated.parsed.message_id == first.parsed.message_id
    second = publish_message.sync(
        "py-orders.fifo", client=tenant, body=PublishMessage(body="second", group_id="g", deduplication_id="d2")
    )
    assert int(second.sequence_number) > int(first.parsed.sequence_number)
    shipped = receive_exactly(tenant, "py-ship.fifo", 2)
    assert [m.body for m in shipped] == ["first", "second"]
    assert (shipped[0].group_id, shipped[0].deduplication_id) == ("g", "d1")

    # Patch: drop the policy and envelope the copies; the old settings now conflict.
    patched = patch_subscription.sync_detailed(
        big.id, client=tenant, body=SubscriptionPatchInput(filter_policy=None, raw_delivery=False)
    )
    assert patched.status_code == HTTPStatus.OK, patched.content
    assert patched.parsed.filter_policy is None and patched.parsed.raw_delivery is False
    conflict = subscribe.sync_detailed("py-news", client=tenant, body=big_input)
    assert conflict.status_code == HTTPStatus.CONFLICT and conflict.parsed.error.code == "Conflict"
    tiny = publish_message.sync(
        "py-news",
        client=tenant,
        body=PublishMessage(body="tiny", attributes=PublishMessageAttributesType0.from_dict({"amount": {"type": "Number", "value": "1"}})),
    )
    [copy] = receive_exactly(tenant, "py-big", 1)
    assert json.loads(copy.body)["MessageId"] == tiny.message_id
    receive_exactly(tenant, "py-all", 1)

    # Listing, one at a time.
    names, token = [], None
    while True:
        page = list_topics.sync(client=tenant, limit=1, next_token=token if token else UNSET)
        assert isinstance(page, TopicList) and len(page.topics) <= 1
        names += [(t.name, t.subscription_count) for t in page.topics]
        token = page.next_token
        if not token:
            break
    assert names == [("py-news", 2), ("py-orders.fifo", 1)]
    ids, token = [], None
    while True:
        page = list_subscriptions.sync("py-news", client=tenant, limit=1, next_token=token if token else UNSET)
        assert isinstance(page, SubscriptionList) and len(page.subscriptions) <= 1
        ids += [s.id for s in page.subscriptions]
        token = page.next_token
        if not token:
            break
    assert ids == sorted([big.id, everything.id])

    # Typed errors.
    missing = get_topic.sync_detailed("py-no-such-topic", client=tenant)
    assert missing.status_code == HTTPStatus.NOT_FOUND
    assert isinstance(missing.parsed, ErrorBody) and missing.parsed.error.code == "TopicNotFound"
    nowhere = publish_message.sync_detailed("py-no-such-topic", client=tenant, body=PublishMessage(body="x"))
    assert nowhere.status_code == HTTPStatus.NOT_FOUND and nowhere.parsed.error.code == "TopicNotFound"
    no_sub = get_subscription.sync_detailed("no-such-subscription", client=tenant)
    assert no_sub.status_code == HTTPStatus.NOT_FOUND
    assert isinstance(no_sub.parsed, ErrorBody) and no_sub.parsed.error.code == "SubscriptionNotFound"
    no_queue = subscribe.sync_detailed("py-news", client=tenant, body=SubscribeInput(queue="py-no-such-queue"))
    assert no_queue.status_code == HTTPStatus.NOT_FOUND and no_queue.parsed.error.code == "QueueNotFound"
    bad = subscribe.sync_detailed(
        "py-news",
        client=tenant,
        body=SubscribeInput(queue="py-all", filter_policy=SubscribeInputFilterPolicyType0.from_dict({"amount": 100})),
    )
    assert bad.status_code == HTTPStatus.BAD_REQUEST, bad.content
    assert isinstance(bad.parsed, ErrorBody) and bad.parsed.error.code == "ValidationError"
    assert bad.parsed.error.message.startswith("filter_policy:"), bad.parsed.error.message

    # Unsubscribe, then delete the topics: deleting a topic deletes its subscriptions.
    assert unsubscribe.sync_detailed(everything.id, client=tenant).status_code == HTTPStatus.NO_CONTENT
    gone = get_subscription.sync_detailed(everything.id, client=tenant)
    assert gone.status_code == HTTPStatus.NOT_FOUND and gone.parsed.error.code == "SubscriptionNotFound"
    twice = unsubscribe.sync_detailed(everything.id, client=tenant)
    assert twice.status_code == HTTPStatus.NOT_FOUND and twice.parsed.error.code == "SubscriptionNotFound"
    for name in ("py-news", "py-orders.fifo"):
        assert delete_topic.sync_detailed(name, client=tenant).status_code == HTTPStatus.NO_CONTENT
    assert get_topic.sync_detailed("py-news", client=tenant).status_code == HTTPStatus.NOT_FOUND
    assert get_subscription.sync_detailed(big.id, client=tenant).status_code == HTTPStatus.NOT_FOUND
    again = delete_topic.sync_detailed("py-news", client=tenant)
    assert again.status_code == HTTPStatus.NOT_FOUND and again.parsed.error.code == "TopicNotFound"
    assert list_topics.sync(client=tenant).topics == []


def test_typed_errors(tenant):
    # Validation: the message names the field.
    bad = put_queue.sync_detailed("py-bad", client=tenant, body=QueueConfigInput(delay_seconds=901))
    assert bad.status_code == HTTPStatus.BAD_REQUEST
    assert isinstance(bad.parsed, ErrorBody)
    assert bad.parsed.error.code == "ValidationError" and "delay_seconds" in bad.parsed.error.message
    assert bad.parsed.error.request_id == bad.headers["x-request-id"]
    # No token, or a wrong one: 401 in the same shape.
    nobody = client("not-a-token")
    unauth = get_queue.sync_detailed("py-work", client=nobody)
    assert unauth.status_code == HTTPStatus.UNAUTHORIZED
    assert isinstance(unauth.parsed, ErrorBody) and unauth.parsed.error.code == "Unauthenticated"
    # A tenant token on the admin API: 403.
    forbidden = list_tenants.sync_detailed(client=tenant)
    assert forbidden.status_code == HTTPStatus.FORBIDDEN
    assert isinstance(forbidden.parsed, ErrorBody) and forbidden.parsed.error.code == "Forbidden"


def test_delete_tenant(admin):
    tid = f"py-gone-{uuid.uuid4().hex[:8]}"
    assert isinstance(create_tenant.sync(client=admin, body=CreateTenant(id=tid)), Tenant)
    assert delete_tenant.sync_detailed(tid, client=admin).status_code == HTTPStatus.NO_CONTENT
    assert get_tenant.sync_detailed(tid, client=admin).status_code == HTTPStatus.NOT_FOUND
