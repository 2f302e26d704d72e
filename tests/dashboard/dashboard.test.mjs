// The dashboard in a real headless Chromium (Debian's, driven by playwright-core) against the
// real `sluice` binary that tests/dashboard/run.sh started. Each test signs in as a user would,
// acts through the page, and checks the outcome through the REST API, which is the source of
// truth. Environment: SLUICE_URL, TENANT_TOKEN (every tenant scope, tenant `dash`),
// SEND_TOKEN (`messages:send` only, same tenant), ADMIN_TOKEN, CHROMIUM.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const base = process.env.SLUICE_URL;
const tenantToken = process.env.TENANT_TOKEN;
const sendToken = process.env.SEND_TOKEN;
const adminToken = process.env.ADMIN_TOKEN;
const XSS = `<script>window.__xss=1;alert(1)</script><img src=x onerror="window.__xss=1">`;

export const LAUNCH = {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
};

let browser;
before(async () => {
  browser = await chromium.launch(LAUNCH);
});
after(async () => {
  await browser?.close();
});

/** A REST call as a client would make it; answers { status, body }. */
async function api(method, path, token, body) {
  const response = await fetch(base + path, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function queueStats(name) {
  const { status, body } = await api("GET", `/v1/queues/${name}`, tenantToken);
  assert.equal(status, 200, JSON.stringify(body));
  return body.stats;
}

async function send(queue, body, extra = {}) {
  const answer = await api("POST", `/v1/queues/${queue}/messages`, tenantToken, { body, ...extra });
  assert.equal(answer.status, 201, JSON.stringify(answer.body));
  return answer.body;
}

/** A fresh browser context signed in with `token` through the sign-in form; the page records
 * every dialog (an executed `alert` would be one). */
async function signIn(token) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.dialogs = [];
  page.on("dialog", (dialog) => {
    page.dialogs.push(dialog.message());
    dialog.dismiss().catch(() => {});
  });
  page.cspErrors = [];
  page.on("console", (message) => {
    if (/Content Security Policy/i.test(message.text())) page.cspErrors.push(message.text());
  });
  await page.goto(base + "/dashboard");
  assert.match(page.url(), /\/dashboard\/login$/);
  await page.getByLabel("Token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((url) => !url.pathname.endsWith("/login"));
  return { context, page };
}

async function xssInert(page) {
  assert.deepEqual(page.dialogs, [], "no dialog opened");
  assert.equal(await page.evaluate(() => window.__xss), undefined, "no injected script ran");
}

before(async () => {
  for (const name of ["orders", "orders-dlq", "audit"]) {
    const { status } = await api("PUT", `/v1/queues/${name}`, tenantToken, {});
    assert.ok(status === 201 || status === 200, `create ${name}: ${status}`);
  }
  const patched = await api("PATCH", "/v1/queues/orders", tenantToken, {
    redrive_policy: { dead_letter_queue: "orders-dlq", max_receive_count: 3 },
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
});

test("signing in keeps the token in an HttpOnly cookie, out of URLs and pages", async () => {
  const { context, page } = await signIn(tenantToken);
  assert.match(page.url(), /\/dashboard\/queues$/);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "sluice_dashboard");
  assert.ok(session, "session cookie set");
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, "Strict");
  assert.equal(session.path, "/dashboard");
  assert.ok(!(await page.content()).includes(tenantToken), "token not in the page");
  assert.ok(!page.url().includes(tenantToken));
  assert.equal(await page.evaluate(() => document.cookie), "", "scripts cannot read it");
  const response = await page.goto(base + "/dashboard/queues");
  const csp = response.headers()["content-security-policy"];
  assert.match(csp, /script-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  await context.close();
});

test("a bad token is refused with the reason and sets no cookie", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(base + "/dashboard/login");
  await page.getByLabel("Token").fill("not-a-jwt");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").waitFor();
  assert.match(await page.getByRole("alert").textContent(), /token: invalid bearer token/);
  assert.equal((await context.cookies()).length, 0);
  await context.close();
});

test("the overview lists queues with counts and dead-letter depth, searches and pages", async () => {
  for (let i = 0; i < 55; i++) {
    await api("PUT", `/v1/queues/bulk-${String(i).padStart(3, "0")}`, tenantToken, {});
  }
  await send("orders-dlq", "poison");
  const { context, page } = await signIn(tenantToken);
  // More than a page of queues sort before `orders`: it is on a later page.
  assert.equal(await page.locator("#queues tbody tr").count(), 50);
  await page.getByLabel("Queue names starting with").fill("orders");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/prefix=orders/);
  assert.equal(await page.locator("#queues tbody tr").count(), 2);
  const row = page.locator("#queues tbody tr", { has: page.getByRole("link", { name: "orders", exact: true }) });
  const cells = await row.locator("td").allTextContents();
  assert.equal(cells.length, 6, "counts, dead letters and the send-rate sparkline");
  assert.equal(cells[4].trim(), "1", "the DLQ depth of orders");
  await page.getByLabel("Queue names starting with").fill("bulk-");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/prefix=bulk-/);
  assert.equal(await page.locator("#queues tbody tr").count(), 50);
  await page.getByRole("link", { name: "Next page" }).click();
  await page.waitForURL(/page=/);
  assert.equal(await page.locator("#queues tbody tr").count(), 5);
  assert.equal(await page.locator("#queues tbody tr th a").first().textContent(), "bulk-050");
  assert.equal(await page.getByRole("link", { name: "Next page" }).count(), 0);
  await page.getByRole("link", { name: "First page" }).click();
  assert.equal(await page.locator("#queues tbody tr").count(), 50);
  await context.close();
});

test("a queue page sends a test message and peeks it with its attributes, as text", async () => {
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/audit");
  await page.getByLabel("Body").fill(XSS);
  await page.getByLabel("Attributes (JSON, optional)").fill(
    JSON.stringify({ note: { type: "String", value: XSS } }),
  );
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.locator("#send-result .alert.ok").waitFor();
  assert.match(await page.locator("#send-result").textContent(), /Sent message/);
  assert.equal((await queueStats("audit")).visible, 1);
  await page.reload();
  assert.equal(await page.locator("pre.body").first().textContent(), XSS);
  assert.equal(await page.locator("dl.attributes dd code").first().textContent(), XSS);
  await xssInert(page);
  assert.deepEqual(page.cspErrors, [], "nothing the page needs is blocked by its CSP");
  await context.close();
});

test("a bad send answers the field at fault and stores nothing", async () => {
  const before = (await queueStats("audit")).visible;
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/audit");
  await page.getByLabel("Body").fill("x");
  await page.getByLabel("Attributes (JSON, optional)").fill("{not json");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.locator("#send-result [role=alert]").waitFor();
  assert.match(await page.locator("#send-result").textContent(), /attributes/);
  // The refusal is a fragment for the form's result area, not a page inside the page.
  assert.equal(await page.locator("#send-result footer, #send-result h1").count(), 0);
  assert.equal((await queueStats("audit")).visible, before);
  await context.close();
});

test("counts update live and peek shows each state", async () => {
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/orders");
  const visible = page.locator('dd[data-stat="visible"]');
  const start = Number((await visible.textContent()).replace(/,/g, ""));
  await send("orders", "live one");
  await send("orders", "live two");
  await page.waitForFunction(
    (n) => document.querySelector('dd[data-stat="visible"]').textContent.replace(/,/g, "") === String(n),
    start + 2,
    { timeout: 10_000 },
  );
  const received = await api("POST", "/v1/queues/orders/messages/receive", tenantToken, {
    max_messages: 1, visibility_timeout_seconds: 600, wait_seconds: 0,
  });
  assert.equal(received.body.messages.length, 1);
  await page.getByRole("link", { name: "In flight" }).click();
  await page.waitForURL(/state=in_flight/);
  assert.equal(await page.locator("table.messages tbody tr").count(), 1);
  assert.equal(
    await page.locator("table.messages pre.body").textContent(),
    received.body.messages[0].body,
  );
  await page.getByRole("link", { name: "Delayed" }).click();
  await page.waitForURL(/state=delayed/);
  assert.match(await page.locator("#messages").textContent(), /No message in this state/);
  await context.close();
});

test("a queue page charts the counts history the server keeps", async () => {
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/orders");
  // The page view recorded a point: the chart draws it.
  await page.locator("#chart canvas").first().waitFor();
  const history = await page.evaluate(async () =>
    (await fetch("/dashboard/queues/orders/history?span=hour")).json());
  const stats = await queueStats("orders");
  assert.ok(history.t.length >= 1);
  assert.equal(history.visible.at(-1), stats.visible, JSON.stringify({ history, stats }));
  // The x axis spans the last hour, also with a single point (uPlot alone would auto-range it
  // over years).
  const hour = await page.evaluate(() => {
    const x = document.querySelector("#chart").charts[0].scales.x;
    return { min: x.min, max: x.max };
  });
  assert.equal(hour.max - hour.min, 3600, JSON.stringify(hour));
  assert.ok(Math.abs(hour.max - Date.now() / 1000) < 300, JSON.stringify(hour));
  await page.getByRole("button", { name: "Last day" }).click();
  await page.waitForFunction(() =>
    document.querySelector('button[data-span="day"]').getAttribute("aria-pressed") === "true");
  await page.locator("#chart .u-title", { hasText: /^Last day$/ }).waitFor();
  const day = await page.evaluate(() => {
    const x = document.querySelector("#chart").charts[0].scales.x;
    return x.max - x.min;
  });
  assert.equal(day, 86400);
  const bad = await page.evaluate(async () =>
    (await fetch("/dashboard/queues/orders/history?span=week")).status);
  assert.equal(bad, 400);
  assert.deepEqual(page.cspErrors, []);
  await context.close();
});

test("the chart's rates are the server's counts of known traffic", async () => {
  assert.equal((await api("PUT", "/v1/queues/rates", tenantToken)).status, 201);
  const started = Date.now();
  for (let i = 0; i < 6; i++) {
    assert.equal((await api("POST", "/v1/queues/rates/messages", tenantToken, { body: `m${i}` })).status, 201);
  }
  const received = await api("POST", "/v1/queues/rates/messages/receive", tenantToken, {
    max_messages: 4, visibility_timeout_seconds: 600, wait_seconds: 0,
  });
  assert.equal(received.body.messages.length, 4);
  for (const m of received.body.messages.slice(0, 2)) {
    const handle = encodeURIComponent(m.receipt_handle);
    assert.equal((await api("DELETE", `/v1/queues/rates/messages/${handle}`, tenantToken)).status, 204);
  }
  // Rates are over at least a second.
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/rates");
  await page.locator("#chart .u-title", { hasText: "messages per second" }).waitFor();
  const history = await page.evaluate(async () =>
    (await fetch("/dashboard/queues/rates/history?span=hour")).json());
  const elapsed = (Date.now() - started) / 1000;
  const [sent, receivedRate, deleted] = [
    history.sent_per_second.at(-1), history.received_per_second.at(-1),
    history.deleted_per_second.at(-1),
  ];
  const why = JSON.stringify({ history, elapsed });
  // 6 sent since counting began, over between a second and the time this test took.
  assert.ok(sent >= 6 / elapsed - 0.01 && sent <= 6, why);
  // Over the same interval: received and deleted in proportion (4 and 2 of 6).
  assert.ok(Math.abs(receivedRate - sent * 4 / 6) <= 0.02, why);
  assert.ok(Math.abs(deleted - sent * 2 / 6) <= 0.02, why);
  assert.deepEqual(page.cspErrors, []);
  await context.close();
});

test("a queue nobody opened has a history, kept from the queue sampler", async () => {
  assert.equal((await api("PUT", "/v1/queues/unopened", tenantToken)).status, 201);
  for (const body of ["a", "b"]) {
    assert.equal((await api("POST", "/v1/queues/unopened/messages", tenantToken, { body })).status, 201);
  }
  const { context, page } = await signIn(tenantToken);
  // Only the history endpoint is read, never the queue's page (which records a point itself).
  let h;
  for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
    h = await page.evaluate(async () =>
      (await fetch("/dashboard/queues/unopened/history?span=hour")).json());
    if (h.t.length > 0 && h.visible.at(-1) === 2) break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  assert.equal(h.visible.at(-1), 2, JSON.stringify(h));
  assert.ok(h.sent_per_second.at(-1) > 0, JSON.stringify(h));
  // The overview draws that rate as the row's sparkline, named by its values.
  await page.goto(`${base}/dashboard/queues?prefix=unopened`);
  const spark = page.locator("#queues tbody tr", { has: page.getByRole("link", { name: "unopened", exact: true }) })
    .getByRole("img", { name: /^sent per second over the last hour: latest \d/ });
  assert.equal(await spark.count(), 1);
  const peak = Number((await spark.getAttribute("aria-label")).match(/peak ([\d.]+)/)[1]);
  assert.ok(peak > 0, `peak rate ${peak}`);
  await context.close();
});

test("settings are saved, and a bad value is refused naming its field", async () => {
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/audit");
  await page.getByLabel("Visibility timeout (s)").fill("45");
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.locator("#settings-result .alert.ok").waitFor();
  let queue = (await api("GET", "/v1/queues/audit", tenantToken)).body;
  assert.equal(queue.config.visibility_timeout_seconds, 45);
  await page.getByLabel("Visibility timeout (s)").fill("abc");
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.locator("#settings-result [role=alert]").waitFor();
  assert.match(await page.locator("#settings-result").textContent(), /visibility_timeout_seconds/);
  await page.getByLabel("Visibility timeout (s)").fill("99999");
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.waitForFunction(() => /ValidationError/.test(document.querySelector("#settings-result").textContent));
  queue = (await api("GET", "/v1/queues/audit", tenantToken)).body;
  assert.equal(queue.config.visibility_timeout_seconds, 45, "unchanged by refused forms");
  await context.close();
});

test("purging needs the queue's name typed, then empties the queue", async () => {
  await send("audit", "to be purged");
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/audit");
  await page.getByLabel(/Type the queue name/).fill("orders");
  await page.getByRole("button", { name: "Purge queue" }).click();
  await page.locator("#purge-result [role=alert]").waitFor();
  assert.match(await page.locator("#purge-result").textContent(), /confirm/);
  assert.ok((await queueStats("audit")).visible > 0, "nothing purged");
  await page.getByLabel(/Type the queue name/).fill("audit");
  await page.getByRole("button", { name: "Purge queue" }).click();
  await page.locator("#purge-result .alert.ok").waitFor();
  const stats = await queueStats("audit");
  assert.equal(stats.visible + stats.in_flight + stats.delayed, 0);
  await context.close();
});

/** Moves `n` messages of `queue` to its dead-letter queue with `reason`, as a consumer would. */
async function deadLetter(queue, n, reason) {
  for (let i = 0; i < n; i++) await send(queue, `dead ${i} ${XSS}`);
  let moved = 0;
  while (moved < n) {
    const received = await api("POST", `/v1/queues/${queue}/messages/receive`, tenantToken, {
      max_messages: 10, visibility_timeout_seconds: 600, wait_seconds: 0,
    });
    for (const m of received.body.messages) {
      const answer = await api(
        "POST",
        `/v1/queues/${queue}/messages/${encodeURIComponent(m.receipt_handle)}/dead-letter`,
        tenantToken,
        { reason },
      );
      assert.equal(answer.status, 204, JSON.stringify(answer.body));
      moved++;
    }
  }
}

test("dead letters show their reasons; a redrive runs with live progress to completion", async () => {
  await api("PUT", "/v1/queues/jobs", tenantToken, {});
  await api("PUT", "/v1/queues/jobs-dlq", tenantToken, {});
  await api("PATCH", "/v1/queues/jobs", tenantToken, {
    redrive_policy: { dead_letter_queue: "jobs-dlq", max_receive_count: 5 },
  });
  await deadLetter("jobs", 6, `bad input ${XSS}`);
  assert.equal((await queueStats("jobs-dlq")).visible, 6);
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/jobs-dlq/dead-letters");
  assert.equal(await page.locator("table.messages tbody tr").count(), 6);
  assert.equal(await page.locator("td.dead-letter .reason").first().textContent(), `bad input ${XSS}`);
  await page.getByLabel(/At most messages per second/).fill("2");
  await page.getByRole("button", { name: "Start redrive" }).click();
  const task = page.locator("#redrive-result .task");
  await task.waitFor();
  // Progress arrives over SSE while the task runs, then the stream ends at `completed`.
  const seen = new Set();
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const status = await task.locator(".status").textContent();
    seen.add(`${status}:${await task.locator(".moved").textContent()}`);
    if (status === "completed") break;
    await page.waitForTimeout(200);
  }
  const tasks = (await api("GET", "/v1/redrive-tasks?queue=jobs-dlq", tenantToken)).body.tasks;
  assert.equal(await task.locator(".status").textContent(), "completed",
    `seen ${[...seen].join(" ")}; the API says ${JSON.stringify(tasks.at(-1))}`);
  assert.equal(await task.locator(".moved").textContent(), "6");
  assert.ok(
    [...seen].some((s) => s.startsWith("running:") && s !== "running:0" && s !== "running:6"),
    `intermediate progress shown: ${[...seen].join(" ")}`,
  );
  assert.equal((await queueStats("jobs-dlq")).visible, 0);
  assert.equal((await queueStats("jobs")).visible, 6);
  await xssInert(page);
  await context.close();
});

test("a running redrive can be cancelled", async () => {
  await api("PUT", "/v1/queues/slow", tenantToken, {});
  await api("PUT", "/v1/queues/slow-dlq", tenantToken, {});
  await api("PATCH", "/v1/queues/slow", tenantToken, {
    redrive_policy: { dead_letter_queue: "slow-dlq", max_receive_count: 5 },
  });
  await deadLetter("slow", 20, "timeout");
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/slow-dlq/dead-letters");
  await page.getByLabel(/At most messages per second/).fill("1");
  await page.getByRole("button", { name: "Start redrive" }).click();
  await page.getByRole("button", { name: "Cancel redrive" }).click();
  await page.waitForFunction(() =>
    document.querySelector("#redrive-result .status")?.textContent === "cancelled",
  );
  const tasks = (await api("GET", "/v1/redrive-tasks?queue=slow-dlq", tenantToken)).body.tasks;
  assert.equal(tasks.at(-1).status, "cancelled");
  assert.ok((await queueStats("slow-dlq")).visible > 10, "most messages stayed");
  await context.close();
});

test("topics: subscribe with a policy, test messages against it, unsubscribe", async () => {
  assert.equal((await api("PUT", "/v1/topics/events", tenantToken, {})).status, 201);
  await api("PUT", "/v1/queues/red-events", tenantToken, {});
  await api("PUT", "/v1/queues/all-events", tenantToken, {});
  assert.equal(
    (await api("POST", "/v1/topics/events/subscriptions", tenantToken, { queue: "all-events" })).status,
    201,
  );
  const { context, page } = await signIn(tenantToken);
  await page.getByRole("link", { name: "Topics" }).click();
  await page.getByRole("link", { name: "events" }).click();
  await page.waitForURL(/\/dashboard\/topics\/events$/);
  await page.getByLabel("Queue", { exact: true }).fill("red-events");
  await page.getByLabel(/Filter policy/).fill(JSON.stringify({ color: ["red", XSS] }));
  await page.getByRole("button", { name: "Subscribe" }).click();
  // The page reloads with the new subscription.
  await page.locator("table.subscriptions tbody tr", { hasText: "red-events" }).waitFor();
  assert.equal(await page.locator("table.subscriptions tbody tr").count(), 2);
  assert.match(await page.locator("code.policy").first().textContent(), /<script>/);
  const subs = (await api("GET", "/v1/topics/events/subscriptions", tenantToken)).body.subscriptions;
  const red = subs.find((s) => s.queue === "red-events");
  assert.deepEqual(red.filter_policy, { color: ["red", XSS] });

  const tryMessage = async (color) => {
    await page.locator("#test-result").evaluate((e) => { e.innerHTML = ""; });
    await page.getByLabel("Body", { exact: true }).fill("hello");
    await page.getByLabel("Attributes (JSON, optional)").fill(
      JSON.stringify({ color: { type: "String", value: color } }),
    );
    await page.getByRole("button", { name: "Test" }).click();
    await page.locator("#test-result table").waitFor();
    return page.locator(`#test-result tr[data-subscription="${red.id}"] td`).last().textContent();
  };
  assert.match(await tryMessage("red"), /matches/);
  assert.match(await tryMessage("blue"), /no match: key "color" matches none of its conditions/);
  const allRow = page.locator("#test-result tr", { hasText: "all-events" });
  assert.match(await allRow.locator("td").last().textContent(), /matches/);

  await page.getByRole("button", { name: `Remove subscription ${red.id}` }).click();
  await page.waitForFunction(() => document.querySelectorAll("table.subscriptions tbody tr").length === 1);
  const left = (await api("GET", "/v1/topics/events/subscriptions", tenantToken)).body.subscriptions;
  assert.deepEqual(left.map((s) => s.queue), ["all-events"]);
  await xssInert(page);
  await context.close();
});

test("admin: tenants with usage against quotas, create a tenant, mint a token that works", async () => {
  const { context, page } = await signIn(adminToken);
  assert.match(page.url(), /\/dashboard\/admin$/);
  const dash = page.locator("#tenants tbody tr", { hasText: "dash" }).first();
  assert.match(await dash.textContent(), /\d+ \/ unlimited/);
  await page.getByLabel(/Tenant id/).fill("minted");
  await page.getByLabel(/Max queues/).fill("2");
  await page.getByRole("button", { name: "Create tenant" }).click();
  const minted = page.locator("#tenants tbody tr", { hasText: "minted" });
  await minted.waitFor();
  assert.match(await minted.textContent(), /0 \/ 2/);

  await page.getByLabel("Tenant", { exact: true }).fill("minted");
  await page.getByLabel("queues:manage").check();
  await page.getByLabel("Valid for (seconds, 60–31536000)").fill("600");
  await page.getByRole("button", { name: "Mint token" }).click();
  const token = await page.locator("#minted-token").inputValue();
  assert.ok(token.split(".").length === 3, "a JWT");
  assert.equal((await api("PUT", "/v1/queues/from-minted", token, {})).status, 201);
  assert.equal((await api("POST", "/v1/queues/from-minted/messages", token, { body: "x" })).status, 403,
    "only the scopes ticked");
  await page.reload();
  assert.match(await page.locator("#tenants tbody tr", { hasText: "minted" }).textContent(), /1 \/ 2/);
  await context.close();
});

test("scopes are the API's: a messages:send token can send but not peek, purge or administer", async () => {
  await send("orders", "keep me");
  const before = await queueStats("orders");
  const { context, page } = await signIn(sendToken);
  await page.goto(base + "/dashboard/queues/orders");
  assert.match(await page.locator("#messages [role=alert]").textContent(), /messages:consume/);
  await page.getByLabel("Body").fill("sent by the send-only token");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.locator("#send-result .alert.ok").waitFor();
  await page.getByLabel(/Type the queue name/).fill("orders");
  await page.getByRole("button", { name: "Purge queue" }).click();
  await page.locator("#purge-result [role=alert]").waitFor();
  assert.match(await page.locator("#purge-result").textContent(), /Forbidden.*queues:manage/);
  const after = await queueStats("orders");
  assert.equal(after.visible + after.in_flight, before.visible + before.in_flight + 1);
  const admin = await page.goto(base + "/dashboard/admin");
  assert.equal(admin.status(), 403);
  await context.close();
});

test("CSRF: posts without the session's token, or from another origin, are refused and change nothing", async () => {
  await send("orders", "still here");
  const before = await queueStats("orders");
  const { context, page } = await signIn(tenantToken);
  await page.goto(base + "/dashboard/queues/orders");
  const csrf = await page.locator('input[name="csrf"]').first().inputValue();
  // From the page itself, so the session cookie goes along.
  const post = (fields) =>
    page.evaluate(async (fields) => {
      const response = await fetch("/dashboard/queues/orders/purge", {
        method: "POST",
        body: new URLSearchParams(fields),
      });
      return { status: response.status, text: await response.text() };
    }, fields);
  const missing = await post({ confirm: "orders" });
  assert.equal(missing.status, 403);
  assert.match(missing.text, /no CSRF token/);
  const wrong = await post({ confirm: "orders", csrf: "00".repeat(32) });
  assert.equal(wrong.status, 403);
  const otherSession = await post({ confirm: "orders", csrf: csrf.slice(0, -2) + "00" });
  assert.equal(otherSession.status, 403);
  // Another origin, even with the right token and the cookie.
  const cookie = (await context.cookies()).find((c) => c.name === "sluice_dashboard");
  const crossSite = await fetch(base + "/dashboard/queues/orders/purge", {
    method: "POST",
    headers: {
      origin: "http://evil.example",
      cookie: `sluice_dashboard=${cookie.value}`,
      "content-type": "application/x-www-form-urlencoded",
    },
    body: new URLSearchParams({ confirm: "orders", csrf }),
  });
  assert.equal(crossSite.status, 403);
  const noOrigin = await fetch(base + "/dashboard/queues/orders/purge", {
    method: "POST",
    headers: { cookie: `sluice_dashboard=${cookie.value}`, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ confirm: "orders", csrf }),
  });
  assert.equal(noOrigin.status, 403);
  const after = await queueStats("orders");
  assert.equal(after.visible + after.in_flight, before.visible + before.in_flight, "nothing purged");
  // The same request with the session's token goes through: the refusals were the checks.
  const ok = await post({ confirm: "orders", csrf });
  assert.equal(ok.status, 200, ok.text);
  assert.equal((await queueStats("orders")).visible, 0);
  await context.close();
});

test("signing out clears the session", async () => {
  const { context, page } = await signIn(tenantToken);
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(/\/dashboard\/login$/);
  assert.equal((await context.cookies()).filter((c) => c.name === "sluice_dashboard").length, 0);
  await page.goto(base + "/dashboard/queues");
  assert.match(page.url(), /\/dashboard\/login$/);
  await context.close();
});

test("assets are served with their types and a long cache, from this server only", async () => {
  const { context, page } = await signIn(tenantToken);
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(base + "/dashboard/queues/orders");
  await page.waitForFunction(() => window.htmx && window.uPlot);
  assert.ok(requests.every((url) => url.startsWith(base)), requests.join("\n"));
  const script = requests.find((url) => url.endsWith("/htmx.min.js"));
  const response = await fetch(script);
  assert.match(response.headers.get("content-type"), /^text\/javascript/);
  assert.match(response.headers.get("cache-control"), /max-age=31536000, immutable/);
  const css = await fetch(requests.find((url) => url.endsWith("/app.css")));
  assert.match(css.headers.get("content-type"), /^text\/css/);
  await context.close();
});
