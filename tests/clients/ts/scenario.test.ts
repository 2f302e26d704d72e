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
    body: { scopes: ["queues:manage", "messages:send", "messages:consume"], ttl_seconds: 600 },
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
