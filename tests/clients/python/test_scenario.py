"""The Python client generated from openapi/openapi.json, driving a real server.

tests/clients/run.sh generates the `sluice_client` package fresh from the committed spec, puts it
on PYTHONPATH and runs this file with SLUICE_URL (the server) and SLUICE_ADMIN_TOKEN (an admin
token) set. Every call goes through the generated code: a route, parameter or field that the
spec gets wrong shows up as an error status, an undocumented status (the client raises
UnexpectedStatus) or a model that does not parse.
"""

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
from sluice_client.api.redrive import (
    cancel_redrive_task,
    get_redrive_task,
    list_redrive_tasks,
    start_redrive,
)
from sluice_client.types import Unset
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
    MessageList,
    MintToken,
    PeekState,
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
    Tenant,
    TenantList,
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
        body=MintToken(scopes=["queues:manage", "messages:send", "messages:consume"], ttl_seconds=600),
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
