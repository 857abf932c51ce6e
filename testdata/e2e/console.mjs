// Console end-to-end test: opens Junction's web console in headless
// Chromium, checks that the queues table shows a queue a STOMP client
// filled (the Makefile sends the messages with `junction send`) with its
// depth, purges it with the row's button, and waits for depth 0.
// Screenshots of the overview and of the queues view are saved.
//
// usage: node console.mjs http://127.0.0.1:8161 QUEUE DEPTH [out-dir]
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const [consoleURL, queue, depthArg, outArg] = process.argv.slice(2);
if (!consoleURL || !queue || !depthArg) {
  console.error("usage: node console.mjs CONSOLE_URL QUEUE DEPTH [out-dir]");
  process.exit(2);
}
const out = outArg || path.dirname(new URL(import.meta.url).pathname);
fs.mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
let ok = false;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", e => console.log("page error:", e.message));
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
  ok = true;
} catch (e) {
  console.log("console e2e FAILED:", e.message);
} finally {
  await browser.close();
}
process.exit(ok ? 0 : 1);
