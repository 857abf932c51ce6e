// The failover snippets of docs/ha.md for the Node clients, and the check
// that scenarios/failover.py runs with each:
//
//   node failover_clients.mjs CLIENT DEST HOST:PORT,HOST:PORT
//
// CLIENT is rhea (AMQP 1.0), mqttjs (MQTT 5) or stompjs (STOMP over
// WebSockets); the brokers are a shared-store pair, the backup possibly
// first. The check is failover_clients.py's: "one" sent, received and
// (except with MQTT.js, which acknowledges by itself) left unacknowledged;
// READY; the scenario kills the live broker; "one" again, flagged
// redelivered; "two" sent and received; DONE {"redelivered": ...}.
//
// The code between "snippet: NAME" and "end snippet" is what docs/ha.md
// shows; internal/lint checks that the two stay the same.
import WebSocket from "ws";

// snippet: rhea
import rhea from "rhea";

// brokers: every broker of the group, e.g. [{ host: "127.0.0.1", port: 5672 }, { host: "127.0.0.1", port: 5682 }].
// rhea asks connection_details for the address of each (re)connection and
// attaches the links again once connected.
export function rheaConnect(brokers, address) {
  let attempt = 0;
  const conn = rhea.create_container().connect({
    connection_details: () => brokers[attempt++ % brokers.length],
    reconnect: true, initial_reconnect_delay: 100, max_reconnect_delay: 2000,
  });
  const receiver = conn.open_receiver({ source: address, autoaccept: false }); // accept once handled
  const sender = conn.open_sender(address);
  return { conn, receiver, sender };
}
// end snippet

// snippet: mqttjs
import mqtt from "mqtt";

// servers: every broker of the group, e.g. [{ host: "127.0.0.1", port: 1883 }, { host: "127.0.0.1", port: 1893 }];
// MQTT.js moves on to the next one at each reconnection.
export function mqttjsConnect(servers, clientId, topic) {
  const client = mqtt.connect({
    servers, clientId, reconnectPeriod: 200, connectTimeout: 5000,
    protocolVersion: 5, clean: false, properties: { sessionExpiryInterval: 3600 }, // the session survives the takeover
  });
  client.on("connect", () => client.subscribe(topic, { qos: 1 }));
  return client;
}
// end snippet

// snippet: stompjs
import { Client } from "@stomp/stompjs";

// urls: every broker of the group, e.g. ["ws://127.0.0.1:61614/stomp", "ws://127.0.0.1:61624/stomp"];
// each (re)connection takes the next one.
export function stompjsConnect(urls, destination, onMessage) {
  let next = 0;
  const client = new Client({
    beforeConnect: c => { c.brokerURL = urls[next++ % urls.length]; },
    reconnectDelay: 200,
    onConnect: () => client.subscribe(destination, onMessage, { ack: "client-individual" }),
  });
  client.activate();
  return client;
}
// end snippet

const TIMEOUT = 60000;
const die = (...what) => { console.error(...what); process.exit(1); };
setTimeout(() => die(`timed out after ${TIMEOUT / 1000}s`), TIMEOUT).unref();
const sleep = ms => new Promise(r => setTimeout(r, ms));
const text = b => (b === undefined || b === null ? null : typeof b === "string" ? b
  : b.typecode === 0x75 ? Buffer.from(b.content).toString("utf8") : Buffer.from(b).toString("utf8"));

// got is a queue of {body, redelivered, ack}.
const got = [];
let wake = () => {};
const push = m => { got.push(m); wake(); };
async function next() {
  while (!got.length) await new Promise(r => { wake = r; });
  return got.shift();
}
async function expect(body) {
  for (;;) {
    const m = await next();
    if (m.body === body) return m;
    m.ack(); // a leftover duplicate
  }
}

function rheaCheck(brokers, dest) {
  const { conn, receiver, sender } = rheaConnect(brokers, "queue://" + dest);
  conn.on("disconnected", () => {}); // rhea reconnects; without a handler it only logs
  receiver.on("message", ctx => push({
    body: text(ctx.message.body),
    // first-acquirer is false when absent (AMQP 1.0 §3.2.1).
    redelivered: ctx.message.first_acquirer !== true || ctx.message.delivery_count > 0,
    ack: () => ctx.delivery.accept(),
  }));
  const waiting = new Map();
  sender.on("accepted", ctx => { waiting.get(ctx.delivery)?.(true); });
  return {
    send: body => new Promise(resolve => {
      if (!sender.sendable()) return resolve(false);
      const d = sender.send({ body, durable: true });
      waiting.set(d, resolve);
      setTimeout(() => resolve(false), 5000);
    }),
    close: () => { conn.close(); setTimeout(() => process.exit(0), 200); },
  };
}

function mqttjsCheck(brokers, dest) {
  const topic = dest.replace(/\./g, "/");
  const client = mqttjsConnect(brokers, `failover-${process.pid}`, topic);
  client.on("error", () => {}); // connection refused by the backup, until it is live
  client.on("message", (t, payload) => push({ body: payload.toString("utf8"), redelivered: null, ack: () => {} }));
  return {
    send: body => new Promise(resolve => {
      if (!client.connected) return resolve(false);
      client.publish(topic, body, { qos: 1 }, err => resolve(!err));
      setTimeout(() => resolve(false), 5000);
    }),
    close: () => client.end(false, {}, () => process.exit(0)),
  };
}

function stompjsCheck(brokers, dest) {
  // Browsers have WebSocket; in Node, ws stands in for it.
  Object.assign(globalThis, { WebSocket });
  const destination = "/queue/" + dest;
  const client = stompjsConnect(brokers.map(b => `ws://${b.host}:${b.port}/stomp`), destination,
    m => push({ body: m.body, redelivered: m.headers.redelivered === "true", ack: () => m.ack() }));
  client.debug = () => {};
  let n = 0;
  return {
    send: body => new Promise(resolve => {
      if (!client.connected) return resolve(false);
      const receipt = `r${n++}`;
      client.watchForReceipt(receipt, () => resolve(true));
      try {
        client.publish({ destination, body, headers: { persistent: "true", receipt } });
      } catch (e) {
        return resolve(false);
      }
      setTimeout(() => resolve(false), 5000);
    }),
    close: () => client.deactivate().then(() => process.exit(0)),
  };
}

async function sendUntilConfirmed(c, body) {
  while (!(await c.send(body))) await sleep(100);
}

const [name, dest, list] = process.argv.slice(2);
const brokers = list.split(",").map(a => { const i = a.lastIndexOf(":"); return { host: a.slice(0, i), port: Number(a.slice(i + 1)) }; });
const c = { rhea: rheaCheck, mqttjs: mqttjsCheck, stompjs: stompjsCheck }[name](brokers, dest);
let first;
for (;;) { // MQTT: the subscription may not be in place yet; send until it arrives.
  await sendUntilConfirmed(c, "one");
  first = await Promise.race([next(), sleep(name === "mqttjs" ? 2000 : TIMEOUT).then(() => null)]);
  if (first) break;
}
if (first.body !== "one") die(`got ${JSON.stringify(first.body)}, want "one"`);
if (name === "mqttjs") first.ack();
console.log("READY");
let redelivered = null;
if (name !== "mqttjs") { // the unacknowledged "one" comes back from the new live broker
  const again = await expect("one");
  redelivered = again.redelivered;
  again.ack();
}
await sendUntilConfirmed(c, "two");
(await expect("two")).ack();
console.log("DONE " + JSON.stringify({ redelivered }));
c.close();
