// Console end-to-end test: opens Junction's web console in headless
// Chromium, checks that the queues table shows a queue a STOMP client
// filled (the Makefile sends the messages with `junction send`) with its
// depth, purges it with the row's button, and waits for depth 0. Then,
// through the page's Send form: a last-value key sent twice shows 1
// replaced in the queues table; a duplicate id sent twice shows 1
// duplicate in the Addresses view; the Settings view's Reload button
// applies a ring-size written to CONFIG_FILE (the broker's --config),
// and a ring of 2 given 3 messages shows 1 dropped; the Events view
// shows the address added and the ring's drop; a scheduled message's
// cancel button in the message browser removes it, and a repeating
// message's removes its job. Screenshots of the
// overview, queues, addresses, events and settings views are saved.
//
// usage: node console.mjs http://127.0.0.1:8161 QUEUE DEPTH OUT_DIR CONFIG_FILE
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const [consoleURL, queue, depthArg, outArg, configFile] = process.argv.slice(2);
if (!consoleURL || !queue || !depthArg || !outArg || !configFile) {
  console.error("usage: node console.mjs CONSOLE_URL QUEUE DEPTH OUT_DIR CONFIG_FILE");
  process.exit(2);
}
const out = outArg;
fs.mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
let ok = false;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // A script error, or anything the page's Content-Security-Policy
  // refused, fails the test.
  const pageErrors = [];
  page.on("pageerror", e => { console.log("page error:", e.message); pageErrors.push(e.message); });
  page.on("console", m => {
    if (m.type() === "error" && /Content.Security.Policy/i.test(m.text())) {
      console.log("CSP violation:", m.text());
      pageErrors.push(m.text());
    }
  });
  await page.goto(consoleURL);
  await page.waitForTimeout(2500); // let the overview chart gather a few points
  await page.screenshot({ path: path.join(out, "console-overview.png"), fullPage: true });

  await page.click('a[data-view="queues"]');
  const row = page.locator(`[data-queue="${queue}"]`).first();
  const depth = row.locator(".depth");
  await depth.waitFor({ timeout: 15000 });
  await page.waitForFunction(
    ([q, want]) => document.querySelector(`[data-queue="${q}"] .depth`)?.textContent.trim() === want,
    [queue, depthArg], { timeout: 15000 });
  console.log(`console: queue ${queue} shows depth ${depthArg}`);
  await page.screenshot({ path: path.join(out, "console-queues.png"), fullPage: true });

  await row.locator(".purge").click();
  await page.click("#confirm-ok"); // the console's own confirmation
  await page.waitForFunction(
    q => document.querySelector(`[data-queue="${q}"] .depth`)?.textContent.trim() === "0",
    queue, { timeout: 15000 });
  console.log(`console: purged ${queue} with the button, depth 0`);
  await page.screenshot({ path: path.join(out, "console-purged.png"), fullPage: true });

  // The send form with the priority field cleared sends the default
  // priority (4), not 0.
  await page.click('a[data-view="send"]');
  await page.fill("#send-address", queue);
  await page.fill("#send-priority", "");
  await page.fill("#send-body", "from the console");
  await page.click("#send-submit");
  await page.waitForFunction(() => document.querySelector("#send-result")?.textContent.startsWith("sent message"), null, { timeout: 15000 });
  const browsed = await page.evaluate(async q => (await fetch(`/api/v1/queues/${q}/messages`)).json(), queue);
  const sent = browsed.messages?.[0];
  if (!sent || sent.body !== "from the console" || sent.priority !== 4) {
    throw new Error(`the console's send with an empty priority gave ${JSON.stringify(sent)}, want body "from the console" and priority 4`);
  }
  console.log("console: sent with the form, default priority 4");

  // sendForm sends one message with the console's Send form and
  // returns what it says ("sent message ID to ADDRESS").
  const sendForm = async (address, properties, body) => {
    await page.click('a[data-view="send"]');
    await page.fill("#send-address", address);
    await page.fill("#send-priority", "");
    await page.fill("#send-properties", JSON.stringify(properties));
    await page.fill("#send-body", body);
    await page.evaluate(() => { document.querySelector("#send-result").textContent = ""; });
    await page.click("#send-submit");
    await page.waitForFunction(() => document.querySelector("#send-result")?.textContent.startsWith("sent message"), null, { timeout: 15000 });
    return page.textContent("#send-result");
  };
  // cellIs waits until the cell sel (in the view shown) reads want.
  const cellIs = (sel, want) => page.waitForFunction(
    ([s, w]) => document.querySelector(s)?.textContent.trim() === w, [sel, want], { timeout: 15000 })
    .catch(async () => {
      const got = await page.evaluate(s => document.querySelector(s)?.textContent, sel);
      throw new Error(`${sel} reads ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    });

  // Last value: the second message with the key replaces the first.
  await sendForm("e2e.lvq", { _AMQ_LVQ_NAME: "price" }, "10");
  await sendForm("e2e.lvq", { _AMQ_LVQ_NAME: "price" }, "11");
  await page.click('a[data-view="queues"]');
  await cellIs('[data-queue="e2e.lvq"] .replaced', "1");
  await cellIs('[data-queue="e2e.lvq"] .depth', "1");
  await cellIs('[data-queue="e2e.lvq"] .dropped', "0");
  console.log("console: queue e2e.lvq shows 1 replaced (_AMQ_LVQ_NAME sent twice), depth 1");

  // Duplicate detection: the second send with the id is refused (and
  // confirmed), counted for the address.
  await sendForm("e2e.dedup", { _AMQ_DUPL_ID: "order-1" }, "first");
  const second = await sendForm("e2e.dedup", { _AMQ_DUPL_ID: "order-1" }, "again");
  await page.click('a[data-view="addresses"]');
  await cellIs('[data-address="e2e.dedup"] .duplicates', "1");
  await cellIs('[data-address="e2e.dedup"] .routing', "anycast");
  await cellIs('[data-address="e2e.lvq"] .duplicates', "0");
  const dq = await page.evaluate(async () => (await fetch("/api/v1/queues/e2e.dedup")).json());
  if (dq.depth !== 1) throw new Error(`e2e.dedup holds ${dq.depth} messages after a duplicate send, want 1`);
  console.log(`console: address e2e.dedup shows 1 duplicate (the form said "${second}"), its queue holds 1`);
  await page.screenshot({ path: path.join(out, "console-addresses.png"), fullPage: true });

  // Settings: the Reload button makes the broker read CONFIG_FILE again;
  // the ring-size written there is applied (new queues of e2e.ring hold 2).
  fs.writeFileSync(configFile, [
    "config-watch-interval: 0s # only the Reload button reloads",
    "address-settings:",
    "  - match: e2e.ring",
    "    ring-size: 2",
    ""].join("\n"));
  await page.click('a[data-view="settings"]');
  await page.waitForFunction(() => document.querySelector("#config-last")?.textContent.startsWith("No reload since the start"), null, { timeout: 15000 });
  await page.click("#config-reload");
  await page.waitForFunction(
    () => /^Last reload .*\(api\): applied address-settings/.test(document.querySelector("#config-last")?.textContent),
    null, { timeout: 15000 }).catch(async () => {
    throw new Error(`after Reload the settings view says ${JSON.stringify(await page.textContent("#config-last"))}`);
  });
  await page.waitForFunction(() => /"e2e\.ring"/.test(document.querySelector("#config-json")?.textContent), null, { timeout: 15000 });
  console.log("console: Reload applied " + JSON.stringify(await page.textContent("#config-last")));
  await page.screenshot({ path: path.join(out, "console-settings.png"), fullPage: true });
  for (const body of ["one", "two", "three"]) await sendForm("e2e.ring", {}, body);
  await page.click('a[data-view="queues"]');
  await cellIs('[data-queue="e2e.ring"] .dropped', "1");
  await cellIs('[data-queue="e2e.ring"] .depth', "2");
  await cellIs('[data-queue="e2e.ring"] .replaced', "0");
  console.log("console: queue e2e.ring (ring-size 2 from the reload) shows 1 dropped after 3 sends, depth 2");
  await page.screenshot({ path: path.join(out, "console-queues-counters.png"), fullPage: true });

  // Events: the address the duplicate test created, and the ring's drop.
  await page.click('a[data-view="events"]');
  const eventRow = (type, address) => page.waitForFunction(([t, a]) =>
    [...document.querySelectorAll("#events-table tbody tr")].some(tr =>
      tr.cells[1]?.textContent === t && tr.cells[2]?.textContent === a), [type, address], { timeout: 15000 })
    .catch(() => { throw new Error(`the Events view shows no ${type} event of ${address}`); });
  await eventRow("ADDRESS_ADDED", "e2e.dedup");
  await eventRow("MESSAGE_DROPPED", "e2e.ring");
  await page.waitForFunction(() => /^Published to activemq\.notifications: [1-9]/.test(document.querySelector("#events-summary")?.textContent), null, { timeout: 15000 });
  console.log("console: the Events view shows ADDRESS_ADDED of e2e.dedup and MESSAGE_DROPPED of e2e.ring");
  await page.screenshot({ path: path.join(out, "console-events.png"), fullPage: true });

  // Scheduling: a message held back 10 minutes is listed by the message
  // browser with a cancel button, which removes it.
  const sent2 = await sendForm("e2e.sched", { AMQ_SCHEDULED_DELAY: 600000 }, "later");
  const schedID = /^sent message (\d+) /.exec(sent2)?.[1];
  if (!schedID) throw new Error(`the form said ${JSON.stringify(sent2)}`);
  await page.click('a[data-view="queues"]');
  await cellIs('[data-queue="e2e.sched"] .scheduled', "1");
  await page.locator('[data-queue="e2e.sched"] .browse').click();
  const card = page.locator(`#browse-list [data-scheduled="${schedID}"]`);
  await card.locator("button.cancel-scheduled").click({ timeout: 15000 });
  await page.click("#confirm-ok");
  await card.waitFor({ state: "detached", timeout: 15000 });
  await page.waitForFunction(() => document.querySelector("#browse-count")?.textContent === "no messages", null, { timeout: 15000 });
  const sq = await page.evaluate(async () => (await fetch("/api/v1/queues/e2e.sched")).json());
  if (sq.depth !== 0 || sq.scheduled !== 0) throw new Error(`after cancel e2e.sched has depth ${sq.depth}, scheduled ${sq.scheduled}, want 0 and 0`);
  console.log(`console: cancelled scheduled message ${schedID} with its button, e2e.sched empty`);

  // A repeating message (AMQ_SCHEDULED_REPEAT) is a job the browser
  // lists above the messages, with its own cancel button.
  await sendForm("e2e.sched", { AMQ_SCHEDULED_DELAY: 600000, AMQ_SCHEDULED_PERIOD: 600000, AMQ_SCHEDULED_REPEAT: 3 }, "every 10 minutes");
  await page.click('a[data-view="queues"]');
  await page.locator('[data-queue="e2e.sched"] .browse').click();
  const job = page.locator("#browse-jobs [data-scheduled]");
  await job.locator("button.cancel-scheduled").click({ timeout: 15000 });
  await page.click("#confirm-ok");
  await job.waitFor({ state: "detached", timeout: 15000 });
  const jobs = await page.evaluate(async () => (await fetch("/api/v1/scheduled")).json());
  if (jobs.total !== 0) throw new Error(`after cancel ${jobs.total} repeating messages remain: ${JSON.stringify(jobs.jobs)}`);
  console.log("console: cancelled a repeating message with its button, no job left");
  if (pageErrors.length) throw new Error(`${pageErrors.length} script errors or CSP violations: ${pageErrors.join("; ")}`);
  ok = true;
} catch (e) {
  console.log("console e2e FAILED:", e.message);
} finally {
  await browser.close();
}
process.exit(ok ? 0 : 1);
