// Regenerates the dashboard's screenshots in docs/screenshots/ (the README shows them):
// `tests/dashboard/run.sh --screenshots` starts the real binary and runs this with the tokens it
// minted. Seeds a small tenant through the REST API, then photographs the main pages.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const base = process.env.SLUICE_URL;
const token = process.env.TENANT_TOKEN;
const adminToken = process.env.ADMIN_TOKEN;
const out = process.argv[2];
mkdirSync(out, { recursive: true });

async function api(method, path, auth, body) {
  const response = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${auth}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status >= 400) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

// A tenant with a few queues, messages in each state, dead letters and a topic.
for (const name of ["billing", "billing-dlq", "emails", "invoices.fifo", "webhooks"]) {
  await api("PUT", `/v1/queues/${name}`, token, {});
}
await api("PATCH", "/v1/queues/billing", token, {
  redrive_policy: { dead_letter_queue: "billing-dlq", max_receive_count: 5 },
});
for (let i = 0; i < 12; i++) {
  await api("POST", "/v1/queues/billing/messages", token, {
    body: JSON.stringify({ invoice: 1000 + i, amount: 19.9 + i, currency: "EUR" }),
    attributes: { kind: { type: "String", value: i % 2 ? "refund" : "charge" } },
  });
}
for (let i = 0; i < 5; i++) {
  await api("POST", "/v1/queues/emails/messages", token, { body: `welcome mail ${i}`, delay_seconds: 600 });
}
const received = await api("POST", "/v1/queues/billing/messages/receive", token, {
  max_messages: 4, visibility_timeout_seconds: 600, wait_seconds: 0,
});
for (const m of received.messages.slice(0, 3)) {
  await api("POST", `/v1/queues/billing/messages/${encodeURIComponent(m.receipt_handle)}/dead-letter`, token, {
    reason: "card declined: insufficient funds",
  });
}
await api("PUT", "/v1/topics/orders", token, {});
await api("POST", "/v1/topics/orders/subscriptions", token, { queue: "billing", filter_policy: { kind: ["charge", "refund"] } });
await api("POST", "/v1/topics/orders/subscriptions", token, { queue: "emails" });
await api("POST", "/v1/topics/orders/subscriptions", token, {
  queue: "webhooks", filter_policy: { amount: [{ numeric: [">=", 100] }] }, filter_policy_scope: "body",
});
await api("POST", "/v1/topics/orders/messages", token, {
  body: JSON.stringify({ amount: 42 }), attributes: { kind: { type: "String", value: "charge" } },
});

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});

async function signedIn(auth, options) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  await page.goto(base + "/dashboard/login");
  await page.getByLabel("Token").fill(auth);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((url) => !url.pathname.endsWith("/login"));
  return { context, page };
}

const laptop = { viewport: { width: 1280, height: 860 }, colorScheme: "light" };
const shot = (page, name, fullPage = true) => page.screenshot({ path: `${out}/${name}.png`, fullPage });

const { context, page } = await signedIn(token, laptop);
await shot(page, "overview");
await page.goto(base + "/dashboard/queues/billing");
await page.locator("#chart canvas").first().waitFor();
await shot(page, "queue");
await page.goto(base + "/dashboard/queues/billing-dlq/dead-letters");
await page.getByLabel(/At most messages per second/).fill("1");
await page.getByRole("button", { name: "Start redrive" }).click();
await page.locator("#redrive-result .task").waitFor();
await page.waitForTimeout(3500);
await shot(page, "dead-letters");
await page.goto(base + "/dashboard/topics/orders");
await page.getByLabel("Body", { exact: true }).fill(JSON.stringify({ amount: 250 }));
await page.getByLabel("Attributes (JSON, optional)").fill(JSON.stringify({ kind: { type: "String", value: "gift" } }));
await page.getByRole("button", { name: "Test" }).click();
await page.locator("#test-result table").waitFor();
await shot(page, "topic");
await context.close();

const dark = await signedIn(token, { viewport: { width: 390, height: 844 }, colorScheme: "dark", deviceScaleFactor: 1 });
await dark.page.goto(base + "/dashboard/queues/billing");
await shot(dark.page, "queue-phone-dark", false);
await dark.context.close();

const admin = await signedIn(adminToken, laptop);
await shot(admin.page, "admin");
await admin.context.close();
await browser.close();
console.log(`screenshots written to ${out}`);
