// The TypeScript client (openapi-typescript types + openapi-fetch) generated from
// openapi/openapi.json, driving a real server. tests/clients/run.sh generates `schema.d.ts` fresh
// next to this file, type-checks and compiles both with tsc (strict), and runs the result with
// `node --test`, with SLUICE_URL (the server) and SLUICE_ADMIN_TOKEN (an admin token) set. A path,
// parameter or field the spec gets wrong fails the type check or an assertion here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type ErrorBody = components["schemas"]["ErrorBody"];

const baseUrl = process.env.SLUICE_URL!;
const client = (token: string) =>
  createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
const admin = client(process.env.SLUICE_ADMIN_TOKEN!);
const tenantId = `ts-${randomUUID().slice(0, 12)}`;

async function tenantClient() {
  const created = await admin.POST("/v1/admin/tenants", {
    body: { id: tenantId, quotas: { max_queues: 20 } },
  });
  assert.equal(created.response.status, 201);
  assert.equal(created.data?.id, tenantId);
  const minted = await admin.POST("/v1/admin/tenants/{id}/tokens", {
    params: { path: { id: tenantId } },
    body: {
      scopes: ["queues:manage", "messages:send", "messages:consume", "topics:manage", "topics:publish"],
      ttl_seconds: 600,
    },
  });
  assert.ok(minted.data, JSON.stringify(minted.error));
  assert.ok(!Number.isNaN(Date.parse(minted.data.expires_at)));
  return client(minted.data.token);
}
const tenant = await tenantClient();

function assertError(error: ErrorBody | undefined, code: string) {
  assert.ok(error, `expected an ${code} error`);
  assert.equal(error.error.code, code);
  assert.ok(error.error.message.length > 0);
  assert.ok(error.error.request_id.length > 0);
}

test("operations: health and readiness without a token", async () => {
  const anonymous = createClient<paths>({ baseUrl });
  assert.equal((await anonymous.GET("/healthz")).data?.status, "ok");
  assert.equal((await anonymous.GET("/readyz")).data?.status, "ok");
});

test("admin: read, update, list with pagination, delete", async () => {
  const one = await admin.GET("/v1/admin/tenants/{id}", { params: { path: { id: tenantId } } });
  assert.equal(one.data?.quotas.max_queues, 20);
  const updated = await admin.PATCH("/v1/admin/tenants/{id}", {
    params: { path: { id: tenantId } },
    body: { quotas: { max_queues: 30, requests_per_second: 100 } },
  });
  assert.equal(updated.data?.quotas.requests_per_second, 100);
  const seen: string[] = [];
  let next: string | null | undefined;
  do {
    const page = await admin.GET("/v1/admin/tenants", {
      params: { query: { limit: 1, ...(next ? { next_token: next } : {}) } },
    });
    assert.ok(page.data, JSON.stringify(page.error));
    assert.ok(page.data.tenants.length <= 1);
    seen.push(...page.data.tenants.map((t) => t.id));
    next = page.data.next_token;
  } while (next);
  assert.ok(seen.includes(tenantId));
  const doomed = `ts-gone-${randomUUID().slice(0, 8)}`;
  await admin.POST("/v1/admin/tenants", { body: { id: doomed } });
  const deleted = await admin.DELETE("/v1/admin/tenants/{id}", { params: { path: { id: doomed } } });
  assert.equal(deleted.response.status, 204);
  const missing = await admin.GET("/v1/admin/tenants/{id}", { params: { path: { id: doomed } } });
  assert.equal(missing.response.status, 404);
  assertError(missing.error, "TenantNotFound");
});

test("queues: create, replace, configure, list with pagination, delete", async () => {
  const queue = { params: { path: { queue: "ts-orders" } } };
  const created = await tenant.PUT("/v1/queues/{queue}", { ...queue, body: { visibility_timeout_seconds: 45 } });
  assert.equal(created.response.status, 201);
  assert.equal(created.data?.config.visibility_timeout_seconds, 45);
  assert.equal(created.data?.kind, "standard");
  const replaced = await tenant.PUT("/v1/queues/{queue}", { ...queue, body: {} });
  assert.equal(replaced.response.status, 200);
  assert.equal(replaced.data?.config.visibility_timeout_seconds, 30);
  const patched = await tenant.PATCH("/v1/queues/{queue}", {
    ...queue,
    body: { receive_wait_seconds: 2, tags: { team: "billing" } },
  });
  assert.deepEqual(patched.data?.config.tags, { team: "billing" });
  for (const name of ["ts-a", "ts-b", "ts-c"]) {
    await tenant.PUT("/v1/queues/{queue}", { params: { path: { queue: name } }, body: {} });
  }
  const names: string[] = [];
  let next: string | null | undefined;
  do {
    const page = await tenant.GET("/v1/queues", {
      params: { query: { prefix: "ts-", limit: 2, ...(next ? { next_token: next } : {}) } },
    });
    assert.ok(page.data, JSON.stringify(page.error));
    assert.ok(page.data.queues.length <= 2);
    names.push(...page.data.queues.map((q) => q.name));
    next = page.data.next_token;
  } while (next);
  assert.deepEqual(names, ["ts-a", "ts-b", "ts-c", "ts-orders"]);
  for (const name of ["ts-a", "ts-b", "ts-c"]) {
    const gone = await tenant.DELETE("/v1/queues/{queue}", { params: { path: { queue: name } } });
    assert.equal(gone.response.status, 204);
  }
  const missing = await tenant.GET("/v1/queues/{queue}", { params: { path: { queue: "ts-a" } } });
  assert.equal(missing.response.status, 404);
  assertError(missing.error, "QueueNotFound");
});

test("messages: send, batch, peek, receive, visibility, delete, purge", async () => {
  const queue = { params: { path: { queue: "ts-work" } } };
  await tenant.PUT("/v1/queues/{queue}", { ...queue, body: {} });
  const sent = await tenant.POST("/v1/queues/{queue}/messages", {
    ...queue,
    body: { body: "hello", attributes: { kind: { type: "String", value: "greeting" } } },
  });
  assert.equal(sent.response.status, 201);
  assert.equal(sent.data?.md5_of_body, "5d41402abc4b2a76b9719d911017c592");
  const batch = await tenant.POST("/v1/queues/{queue}/messages/batch", {
    ...queue,
    body: { entries: [0, 1, 2].map((i) => ({ id: `e${i}`, body: `batch ${i}` })) },
  });
  assert.deepEqual(batch.data?.successful.map((s) => s.id), ["e0", "e1", "e2"]);
  assert.deepEqual(batch.data?.failed, []);
  const peeked = await tenant.GET("/v1/queues/{queue}/messages", { params: { ...queue.params, query: { limit: 10 } } });
  assert.equal(peeked.data?.messages.length, 4);
  const received = await tenant.POST("/v1/queues/{queue}/messages/receive", {
    ...queue,
    body: { max_messages: 10, visibility_timeout_seconds: 60 },
  });
  assert.ok(received.data, JSON.stringify(received.error));
  assert.equal(received.data.messages.length, 4);
  const byBody = new Map(received.data.messages.map((m) => [m.body, m]));
  const hello = byBody.get("hello")!;
  assert.equal(hello.message_id, sent.data?.message_id);
  assert.equal(hello.attributes.kind?.value, "greeting");
  const inFlight = await tenant.GET("/v1/queues/{queue}/messages", {
    params: { ...queue.params, query: { state: "in_flight" } },
  });
  assert.equal(inFlight.data?.messages.length, 4);
  assert.ok(inFlight.data?.messages.every((m) => m.receipt_handle === undefined));
  const handle = (receipt_handle: string) => ({ params: { path: { queue: "ts-work", receipt_handle } } });
  const changed = await tenant.PATCH("/v1/queues/{queue}/messages/{receipt_handle}", {
    ...handle(hello.receipt_handle!),
    body: { visibility_timeout_seconds: 0 },
  });
  assert.equal(changed.response.status, 204);
  const others = [0, 1, 2].map((i) => byBody.get(`batch ${i}`)!);
  const vis = await tenant.POST("/v1/queues/{queue}/messages/visibility", {
    ...queue,
    body: { entries: [{ id: "v0", receipt_handle: others[0]!.receipt_handle!, visibility_timeout_seconds: 120 }] },
  });
  assert.deepEqual(vis.data?.successful, [{ id: "v0" }]);
  const again = await tenant.POST("/v1/queues/{queue}/messages/receive", { ...queue, body: {} });
  assert.deepEqual(again.data?.messages.map((m) => m.body), ["hello"]);
  const stale = await tenant.DELETE("/v1/queues/{queue}/messages/{receipt_handle}", handle(hello.receipt_handle!));
  assert.equal(stale.response.status, 410);
  assertError(stale.error, "ReceiptHandleStale");
  const deleted = await tenant.DELETE(
    "/v1/queues/{queue}/messages/{receipt_handle}",
    handle(again.data!.messages[0]!.receipt_handle!),
  );
  assert.equal(deleted.response.status, 204);
  const batchDeleted = await tenant.POST("/v1/queues/{queue}/messages/delete", {
    ...queue,
    body: { entries: others.map((m, i) => ({ id: `d${i}`, receipt_handle: m.receipt_handle! })) },
  });
  assert.equal(batchDeleted.data?.successful.length, 3);
  await tenant.POST("/v1/queues/{queue}/messages", { ...queue, body: { body: "to purge" } });
  const purged = await tenant.POST("/v1/queues/{queue}/purge", queue);
  assert.equal(purged.response.status, 204);
  const stats = await tenant.GET("/v1/queues/{queue}", queue);
  assert.equal(stats.data?.stats.visible, 0);
  assert.equal(stats.data?.stats.in_flight, 0);
});

test("redrive: dead-letter a message, then move it back with a task", async () => {
  const dlq = { params: { path: { queue: "ts-dlq" } } };
  const source = { params: { path: { queue: "ts-source" } } };
  await tenant.PUT("/v1/queues/{queue}", { ...dlq, body: {} });
  const created = await tenant.PUT("/v1/queues/{queue}", {
    ...source,
    body: { redrive_policy: { dead_letter_queue: "ts-dlq", max_receive_count: 3 } },
  });
  assert.equal(created.data?.config.redrive_policy?.max_receive_count, 3);
  await tenant.POST("/v1/queues/{queue}/messages", { ...source, body: { body: "poison" } });
  const got = await tenant.POST("/v1/queues/{queue}/messages/receive", { ...source, body: {} });
  const receipt_handle = got.data!.messages[0]!.receipt_handle!;
  const moved = await tenant.POST("/v1/queues/{queue}/messages/{receipt_handle}/dead-letter", {
    params: { path: { queue: "ts-source", receipt_handle } },
    body: { reason: "unparseable" },
  });
  assert.equal(moved.response.status, 204);
  const inDlq = await tenant.GET("/v1/queues/{queue}/messages", dlq);
  assert.equal(inDlq.data?.messages[0]?.dead_letter?.reason, "unparseable");
  const started = await tenant.POST("/v1/queues/{queue}/redrive", { ...dlq, body: { max_messages_per_second: 100 } });
  assert.equal(started.response.status, 202);
  const id = started.data!.id;
  const deadline = Date.now() + 20_000;
  let task = started.data!;
  while (task.status === "running") {
    assert.ok(Date.now() < deadline, JSON.stringify(task));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const read = await tenant.GET("/v1/redrive-tasks/{id}", { params: { path: { id } } });
    task = read.data!;
  }
  assert.deepEqual([task.status, task.moved, task.failed], ["completed", 1, 0]);
  const listed = await tenant.GET("/v1/redrive-tasks", { params: { query: { queue: "ts-dlq" } } });
  assert.deepEqual(listed.data?.tasks.map((t) => t.id), [id]);
  const back = await tenant.GET("/v1/queues/{queue}/messages", source);
  assert.deepEqual(back.data?.messages.map((m) => [m.body, m.receive_count]), [["poison", 0]]);
});

type Message = components["schemas"]["Message"];
type FilterPolicy = NonNullable<components["schemas"]["SubscribeInput"]["filter_policy"]>;
// The spec gives filter policies as `type: object` with neither properties nor
// additionalProperties, which openapi-typescript renders as `Record<string, never>`: a real policy
// only passes the type check through this cast.
const filterPolicy = (policy: Record<string, unknown>) => policy as unknown as FilterPolicy;

// Receives until `count` copies have arrived (a receive may answer fewer than are there), then
// checks that no further copy is waiting.
async function receiveExactly(queue: string, count: number): Promise<Message[]> {
  const params = { path: { queue } };
  const got: Message[] = [];
  const deadline = Date.now() + 10_000;
  while (got.length < count) {
    assert.ok(Date.now() < deadline, `${queue}: ${got.length} of ${count} copies`);
    const page = await tenant.POST("/v1/queues/{queue}/messages/receive", {
      params,
      body: { max_messages: 10, visibility_timeout_seconds: 60, wait_seconds: 1 },
    });
    assert.ok(page.data, JSON.stringify(page.error));
    got.push(...page.data.messages);
  }
  const rest = await tenant.POST("/v1/queues/{queue}/messages/receive", { params, body: { max_messages: 10 } });
  assert.ok(rest.data, JSON.stringify(rest.error));
  assert.deepEqual([...got, ...rest.data.messages].map((m) => m.body).length, count, `${queue}: more copies than expected`);
  return got;
}

test("topics: subscribe with filter policies, publish, raw and enveloped copies, FIFO, errors", async () => {
  const news = { params: { path: { topic: "ts-news" } } };
  const fifoTopic = { params: { path: { topic: "ts-orders.fifo" } } };
  const created = await tenant.PUT("/v1/topics/{topic}", { ...news, body: { tags: { team: "billing" } } });
  assert.equal(created.response.status, 201, JSON.stringify(created.error));
  assert.deepEqual(
    [created.data?.name, created.data?.kind, created.data?.subscription_count, created.data?.config.tags],
    ["ts-news", "standard", 0, { team: "billing" }],
  );
  const replaced = await tenant.PUT("/v1/topics/{topic}", { ...news, body: {} });
  assert.equal(replaced.response.status, 200);
  assert.equal(replaced.data?.created_at, created.data?.created_at);
  assert.deepEqual(replaced.data?.config.tags, {});
  const fifo = await tenant.PUT("/v1/topics/{topic}", { ...fifoTopic, body: { content_based_deduplication: false } });
  assert.equal(fifo.response.status, 201, JSON.stringify(fifo.error));
  assert.equal(fifo.data?.kind, "fifo");
  assert.equal(fifo.data?.config.content_based_deduplication, false);
  for (const queue of ["ts-big", "ts-all", "ts-ship.fifo"]) {
    const made = await tenant.PUT("/v1/queues/{queue}", { params: { path: { queue } }, body: {} });
    assert.equal(made.response.status, 201, JSON.stringify(made.error));
  }

  // A raw subscription with a filter policy on the attributes, and an enveloped one for all.
  const policy = { amount: [{ numeric: [">=", 100] }] };
  const bigInput = {
    queue: "ts-big",
    filter_policy: filterPolicy(policy),
    filter_policy_scope: "attributes",
    raw_delivery: true,
  } as const;
  const made = await tenant.POST("/v1/topics/{topic}/subscriptions", { ...news, body: bigInput });
  assert.equal(made.response.status, 201, JSON.stringify(made.error));
  const big = made.data!;
  assert.deepEqual(
    [big.topic, big.queue, big.filter_policy, big.filter_policy_scope, big.raw_delivery, big.dead_letter_queue],
    ["ts-news", "ts-big", policy, "attributes", true, null],
  );
  assert.deepEqual(big.stats, { delivered: 0, filtered_out: 0, failed: 0 });
  const madeAll = await tenant.POST("/v1/topics/{topic}/subscriptions", { ...news, body: { queue: "ts-all" } });
  assert.equal(madeAll.response.status, 201, JSON.stringify(madeAll.error));
  const all = madeAll.data!;
  assert.equal(all.raw_delivery, false);
  assert.equal(all.filter_policy ?? null, null);
  const again = await tenant.POST("/v1/topics/{topic}/subscriptions", { ...news, body: bigInput });
  assert.equal(again.response.status, 200, "identical: the existing subscription");
  assert.equal(again.data?.id, big.id);

  // Publish one message the policy matches and one it does not.
  const amount = (value: number) => ({ amount: { type: "Number", value: String(value) } });
  const published = await tenant.POST("/v1/topics/{topic}/messages", {
    ...news,
    body: { body: '{"order": 42}', subject: "Big order", attributes: amount(250) },
  });
  assert.equal(published.response.status, 201, JSON.stringify(published.error));
  assert.equal(published.data?.duplicate, false);
  assert.equal(published.data?.sequence_number ?? null, null);
  const small = await tenant.POST("/v1/topics/{topic}/messages", { ...news, body: { body: "small", attributes: amount(5) } });
  assert.equal(small.response.status, 201, JSON.stringify(small.error));

  // The raw copy: the body and attributes as published, under an id of its own.
  const [raw] = await receiveExactly("ts-big", 1);
  assert.equal(raw?.body, '{"order": 42}');
  assert.deepEqual(raw?.attributes, amount(250));
  assert.notEqual(raw?.message_id, published.data?.message_id);
  // The enveloped copies: SNS notifications, without attributes of their own.
  const copies = await receiveExactly("ts-all", 2);
  const envelopes = new Map(
    copies.map((m) => JSON.parse(m.body) as Record<string, unknown>).map((e) => [e.MessageId, e]),
  );
  assert.deepEqual(
    [...envelopes.keys()].sort(),
    [published.data!.message_id, small.data!.message_id].sort(),
  );
  const envelope = envelopes.get(published.data!.message_id)!;
  assert.equal(envelope.Type, "Notification");
  assert.equal(envelope.Message, '{"order": 42}');
  assert.equal(envelope.Subject, "Big order");
  assert.deepEqual(envelope.MessageAttributes, { amount: { Type: "Number", Value: "250" } });
  assert.match(String(envelope.TopicArn), /:ts-news$/);
  assert.equal(envelopes.get(small.data!.message_id)?.Message, "small");
  assert.ok(copies.every((m) => Object.keys(m.attributes).length === 0));
  const subscription = (id: string) => ({ params: { path: { id } } });
  const stats = await tenant.GET("/v1/subscriptions/{id}", subscription(big.id));
  assert.deepEqual(stats.data?.stats, { delivered: 1, filtered_out: 1, failed: 0 });
  assert.equal((await tenant.GET("/v1/subscriptions/{id}", subscription(all.id))).data?.stats.delivered, 2);

  // A batch: each entry on its own, a bad one fails alone.
  const batch = await tenant.POST("/v1/topics/{topic}/messages/batch", {
    ...news,
    body: {
      entries: [
        { id: "p500", body: "amount 500", attributes: amount(500) },
        { id: "p1", body: "amount 1", attributes: amount(1) },
        { id: "bad", body: "no subject", subject: "" },
      ],
    },
  });
  assert.equal(batch.response.status, 200, JSON.stringify(batch.error));
  assert.deepEqual(batch.data?.successful.map((s) => s.id).sort(), ["p1", "p500"]);
  assert.ok(batch.data?.successful.every((s) => s.message_id.length > 0 && !s.duplicate));
  assert.deepEqual(batch.data?.failed.map((f) => [f.id, f.code]), [["bad", "ValidationError"]]);
  assert.deepEqual((await receiveExactly("ts-big", 1)).map((m) => m.body), ["amount 500"]);
  assert.equal((await receiveExactly("ts-all", 2)).length, 2);
  const counted = await tenant.GET("/v1/subscriptions/{id}", subscription(big.id));
  assert.deepEqual(counted.data?.stats, { delivered: 2, filtered_out: 2, failed: 0 });

  // FIFO: a group and a deduplication id; repeating the id answers the original.
  const shipping = await tenant.POST("/v1/topics/{topic}/subscriptions", {
    ...fifoTopic,
    body: { queue: "ts-ship.fifo", raw_delivery: true },
  });
  assert.equal(shipping.response.status, 201, JSON.stringify(shipping.error));
  const publishFifo = (body: string, deduplication_id: string) =>
    tenant.POST("/v1/topics/{topic}/messages", { ...fifoTopic, body: { body, group_id: "g", deduplication_id } });
  const first = await publishFifo("first", "d1");
  assert.equal(first.response.status, 201, JSON.stringify(first.error));
  assert.equal(first.data?.duplicate, false);
  assert.equal(typeof first.data?.sequence_number, "string");
  const repeated = await publishFifo("first", "d1");
  assert.equal(repeated.response.status, 200, JSON.stringify(repeated.error));
  assert.equal(repeated.data?.duplicate, true);
  assert.equal(repeated.data?.sequence_number, first.data?.sequence_number);
  assert.equal(repeated.data?.message_id, first.data?.message_id);
  const second = await publishFifo("second", "d2");
  assert.equal(second.response.status, 201);
  assert.ok(BigInt(second.data!.sequence_number!) > BigInt(first.data!.sequence_number!));
  const shipped = await receiveExactly("ts-ship.fifo", 2);
  assert.deepEqual(shipped.map((m) => m.body), ["first", "second"]);
  assert.deepEqual([shipped[0]?.group_id, shipped[0]?.deduplication_id], ["g", "d1"]);

  // Patch: drop the policy and envelope the copies; the old settings now conflict.
  const patched = await tenant.PATCH("/v1/subscriptions/{id}", {
    ...subscription(big.id),
    body: { filter_policy: null, raw_delivery: false },
  });
  assert.equal(patched.response.status, 200, JSON.stringify(patched.error));
  assert.equal(patched.data?.filter_policy ?? null, null);
  assert.equal(patched.data?.raw_delivery, false);
  const conflict = await tenant.POST("/v1/topics/{topic}/subscriptions", { ...news, body: bigInput });
  assert.equal(conflict.response.status, 409);
  assertError(conflict.error, "Conflict");
  const tiny = await tenant.POST("/v1/topics/{topic}/messages", { ...news, body: { body: "tiny", attributes: amount(1) } });
  const [copy] = await receiveExactly("ts-big", 1);
  assert.equal((JSON.parse(copy!.body) as { MessageId: string }).MessageId, tiny.data?.message_id);
  await receiveExactly("ts-all", 1);

  // Listing, one at a time.
  const topics: [string, number][] = [];
  let next: string | null | undefined;
  do {
    const page = await tenant.GET("/v1/topics", { params: { query: { limit: 1, ...(next ? { next_token: next } : {}) } } });
    assert.ok(page.data, JSON.stringify(page.error));
    assert.ok(page.data.topics.length <= 1);
    topics.push(...page.data.topics.map((t): [string, number] => [t.name, t.subscription_count]));
    next = page.data.next_token;
  } while (next);
  assert.deepEqual(topics, [["ts-news", 2], ["ts-orders.fifo", 1]]);
  const ids: string[] = [];
  do {
    const page = await tenant.GET("/v1/topics/{topic}/subscriptions", {
      params: { ...news.params, query: { limit: 1, ...(next ? { next_token: next } : {}) } },
    });
    assert.ok(page.data, JSON.stringify(page.error));
    assert.ok(page.data.subscriptions.length <= 1);
    ids.push(...page.data.subscriptions.map((s) => s.id));
    next = page.data.next_token;
  } while (next);
  assert.deepEqual(ids, [big.id, all.id].sort());

  // Typed errors.
  const missing = await tenant.GET("/v1/topics/{topic}", { params: { path: { topic: "ts-no-such-topic" } } });
  assert.equal(missing.response.status, 404);
  assertError(missing.error, "TopicNotFound");
  const nowhere = await tenant.POST("/v1/topics/{topic}/messages", {
    params: { path: { topic: "ts-no-such-topic" } },
    body: { body: "x" },
  });
  assert.equal(nowhere.response.status, 404);
  assertError(nowhere.error, "TopicNotFound");
  const noSubscription = await tenant.GET("/v1/subscriptions/{id}", subscription("no-such-subscription"));
  assert.equal(noSubscription.response.status, 404);
  assertError(noSubscription.error, "SubscriptionNotFound");
  const noQueue = await tenant.POST("/v1/topics/{topic}/subscriptions", { ...news, body: { queue: "ts-no-such-queue" } });
  assert.equal(noQueue.response.status, 404);
  assertError(noQueue.error, "QueueNotFound");
  const bad = await tenant.POST("/v1/topics/{topic}/subscriptions", {
    ...news,
    body: { queue: "ts-all", filter_policy: filterPolicy({ amount: 100 }) },
  });
  assert.equal(bad.response.status, 400);
  assertError(bad.error, "ValidationError");
  assert.match(bad.error!.error.message, /^filter_policy:/);

  // Unsubscribe, then delete the topics: deleting a topic deletes its subscriptions.
  assert.equal((await tenant.DELETE("/v1/subscriptions/{id}", subscription(all.id))).response.status, 204);
  const gone = await tenant.GET("/v1/subscriptions/{id}", subscription(all.id));
  assert.equal(gone.response.status, 404);
  assertError(gone.error, "SubscriptionNotFound");
  const twice = await tenant.DELETE("/v1/subscriptions/{id}", subscription(all.id));
  assert.equal(twice.response.status, 404);
  assertError(twice.error, "SubscriptionNotFound");
  for (const topic of [news, fifoTopic]) {
    assert.equal((await tenant.DELETE("/v1/topics/{topic}", topic)).response.status, 204);
  }
  assert.equal((await tenant.GET("/v1/topics/{topic}", news)).response.status, 404);
  assert.equal((await tenant.GET("/v1/subscriptions/{id}", subscription(big.id))).response.status, 404);
  const deletedTwice = await tenant.DELETE("/v1/topics/{topic}", news);
  assert.equal(deletedTwice.response.status, 404);
  assertError(deletedTwice.error, "TopicNotFound");
  assert.deepEqual((await tenant.GET("/v1/topics")).data?.topics, []);
});

test("errors: validation, no token, wrong scope decode into ErrorBody", async () => {
  const bad = await tenant.PUT("/v1/queues/{queue}", {
    params: { path: { queue: "ts-bad" } },
    body: { delay_seconds: 901 },
  });
  assert.equal(bad.response.status, 400);
  assertError(bad.error, "ValidationError");
  assert.match(bad.error!.error.message, /delay_seconds/);
  assert.equal(bad.error!.error.request_id, bad.response.headers.get("x-request-id"));
  const unauth = await client("not-a-token").GET("/v1/queues");
  assert.equal(unauth.response.status, 401);
  assertError(unauth.error, "Unauthenticated");
  const forbidden = await tenant.GET("/v1/admin/tenants");
  assert.equal(forbidden.response.status, 403);
  assertError(forbidden.error, "Forbidden");
});
