// Browser end-to-end test: serves index.html and the client bundles on a
// loopback port, opens it in headless Chromium (Debian's chromium, driven
// by playwright-core), waits until the page's three clients (STOMP, MQTT,
// AMQP 1.0, over WebSockets to Junction) have each received a message
// from each other, saves a screenshot, and exits non-zero on failure.
//
// usage: node run.mjs ws://127.0.0.1:61614 [screenshot.png]
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const dir = path.dirname(fileURLToPath(import.meta.url));
const wsURL = process.argv[2];
const shot = process.argv[3] || path.join(dir, "e2e.png");
fs.mkdirSync(path.dirname(shot), { recursive: true });
if (!wsURL) {
  console.error("usage: node run.mjs ws://HOST:PORT [screenshot.png]");
  process.exit(2);
}
const files = {
  "/": path.join(dir, "index.html"),
  "/lib/stomp.umd.min.js": path.join(dir, "node_modules/@stomp/stompjs/bundles/stomp.umd.min.js"),
  "/lib/mqtt.min.js": path.join(dir, "node_modules/mqtt/dist/mqtt.min.js"),
  "/lib/rhea-umd.js": path.join(dir, "node_modules/rhea/dist/rhea-umd.js"),
};
const server = http.createServer((req, res) => {
  const f = files[new URL(req.url, "http://x").pathname];
  if (!f) { res.writeHead(req.url === "/favicon.ico" ? 204 : 404); res.end(); return; }
  res.writeHead(200, { "content-type": f.endsWith(".html") ? "text/html" : "text/javascript" });
  fs.createReadStream(f).pipe(res);
});
await new Promise(r => server.listen(0, "127.0.0.1", r));
const page_url = `http://127.0.0.1:${server.address().port}/?ws=${encodeURIComponent(wsURL)}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
let ok = false;
try {
  const page = await browser.newPage();
  page.on("console", m => console.log("page:", m.text()));
  page.on("pageerror", e => console.log("page error:", e.message));
  await page.goto(page_url);
  try {
    await page.waitForFunction(() => document.getElementById("status").textContent === "done", null, { timeout: 20000 });
  } catch (e) {
    console.log("page did not finish:", e.message);
  }
  const out = JSON.parse(await page.textContent("#out"));
  await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify(out));
  const want = {
    stomp: ["amqp->stomp \u00e9\u00e8", "mqtt->stomp \u00e9\u00e8"],
    mqtt: ["amqp->mqtt \u00e9\u00e8", "stomp->mqtt \u00e9\u00e8"],
    amqp: ["mqtt->amqp \u00e9\u00e8", "stomp->amqp \u00e9\u00e8"],
  };
  ok = out.errors.length === 0 && JSON.stringify(out.got) === JSON.stringify(want);
  console.log(ok ? "e2e: 6 of 6 cross-protocol messages arrived in the browser" : "e2e: FAILED, want " + JSON.stringify(want));
  console.log("screenshot:", shot);
} finally {
  await browser.close();
  server.close();
}
process.exit(ok ? 0 : 1);
