// The Node clients of the interop suite, with client.py's interface:
//
//   node client.mjs send CLIENT KIND NAME BODY PROPS_JSON
//   node client.mjs recv CLIENT KIND NAME [OPTS_JSON]
//
// CLIENT is rhea (AMQP 1.0 over TCP), mqttjs (MQTT.js, MQTT 5 over TCP)
// or stompjs (@stomp/stompjs, STOMP 1.2 over WebSockets with ws). recv
// prints READY once the broker has confirmed the subscription, then one
// JSON line {"body": ..., "props": {...}} per message, until stdin closes.
import rhea from "rhea";
import mqtt from "mqtt";
import { Client as StompClient } from "@stomp/stompjs";
import WebSocket from "ws";

function hostport(v) {
  const s = process.env[v];
  if (!s) { console.error(`${v} is not set (run the scenario through ./run)`); process.exit(2); }
  const i = s.lastIndexOf(":");
  return { host: s.slice(0, i), port: Number(s.slice(i + 1)) };
}

const STOMP_STD = new Set(["destination", "message-id", "subscription", "ack", "content-length",
  "content-type", "persistent", "priority", "expires", "timestamp", "redelivered"]);

const textOf = b => {
  if (b === undefined || b === null) return null;
  if (typeof b === "string") return b;
  if (Buffer.isBuffer(b)) return b.toString("utf8");
  if (b instanceof Uint8Array) return Buffer.from(b).toString("utf8");
  if (b.typecode === 0x75 && b.content) return Buffer.from(b.content).toString("utf8"); // data section
  return JSON.stringify(b);
};
const emit = (body, props, extra = {}) => process.stdout.write(JSON.stringify({ body, props, ...extra }) + "\n");
const die = (what, e) => { console.error(what, e && (e.stack || e.message || JSON.stringify(e))); process.exit(1); };
// INTEROP_MQTT_VERSION=3.1.1 (run --against a broker without MQTT 5).
const MQTT_V5 = (process.env.INTEROP_MQTT_VERSION || "5") === "5";
const mqttTopic = name => name.replace(/\./g, "/");

function stompClient(onConnect, headers = {}) {
  const { host, port } = hostport("INTEROP_WS");
  const c = new StompClient({
    webSocketFactory: () => new WebSocket(`ws://${host}:${port}/stomp`, ["v12.stomp"]),
    connectHeaders: headers,
    reconnectDelay: 0, heartbeatIncoming: 0, heartbeatOutgoing: 0,
    debug: () => {},
  });
  c.onConnect = () => onConnect(c);
  c.onStompError = f => die("stompjs ERROR frame:", { headers: f.headers, body: f.body });
  c.onWebSocketError = e => die("stompjs websocket error:", e.message || String(e));
  c.activate();
  return c;
}

function rheaConnect(id) {
  const { host, port } = hostport("INTEROP_AMQP");
  const cont = rhea.create_container({ id });
  cont.on("connection_error", ctx => die("rhea connection error:", ctx.connection.error));
  cont.on("receiver_error", ctx => die("rhea receiver error:", ctx.receiver.error));
  cont.on("sender_error", ctx => die("rhea sender error:", ctx.sender.error));
  cont.on("rejected", ctx => die("rhea: delivery rejected:", ctx.delivery.remote_state));
  cont.on("disconnected", ctx => { if (!ctx.connection.closed_by_us) die("rhea disconnected:", ctx.error); });
  const conn = cont.connect({ host, port, reconnect: false });
  return { cont, conn };
}

function mqttConnect(id) {
  const { host, port } = hostport("INTEROP_MQTT");
  const c = mqtt.connect(`mqtt://${host}:${port}`, { clientId: id, protocolVersion: MQTT_V5 ? 5 : 4, reconnectPeriod: 0, connectTimeout: 10000 });
  c.on("error", e => die("mqttjs error:", e));
  return c;
}

function send(client, kind, name, body, props) {
  if (client === "rhea") {
    const { conn } = rheaConnect(`interop-send-${process.pid}`);
    const snd = conn.open_sender(`${kind}://${name}`);
    let sent = false;
    snd.on("sendable", () => {
      if (sent) return;
      sent = true;
      snd.send({ body, durable: true, application_properties: props });
    });
    snd.on("accepted", () => { conn.closed_by_us = true; conn.close(); });
    conn.on("connection_close", () => process.exit(0));
  } else if (client === "mqttjs") {
    const c = mqttConnect(`interop-send-${process.pid}`);
    // mqtt-packet writes nothing at all for an empty userProperties
    // object (the publish silently never leaves), so leave it out then.
    const opts = MQTT_V5 && Object.keys(props).length ? { qos: 1, properties: { userProperties: props } } : { qos: 1 };
    c.on("connect", () => c.publish(mqttTopic(name), body, opts, err => {
      if (err) die("mqttjs publish:", err);
      c.end(false, {}, () => process.exit(0));
    }));
  } else if (client === "stompjs") {
    stompClient(c => {
      c.watchForReceipt("sent", () => c.deactivate().then(() => process.exit(0)));
      c.publish({ destination: `/${kind}/${name}`, body, headers: { ...props, persistent: "true", receipt: "sent" } });
    });
  } else die("unknown client", client);
}

function recv(client, kind, name, opts) {
  const stopped = new Promise(r => { process.stdin.on("end", r); process.stdin.on("close", r); process.stdin.resume(); });
  if (client === "rhea") {
    const { conn } = rheaConnect(`interop-recv-${process.pid}`);
    // opts.receivers links on the connection's session (rhea names each
    // uniquely), and opts.same_name_sessions more, each on a session of
    // its own and all named "same-name"; every message line says which
    // receiver got it. READY once all are attached.
    const links = [];
    for (let i = 0; i < (opts.receivers ?? 1); i++) links.push(conn);
    for (let i = 0; i < (opts.same_name_sessions ?? 0); i++) links.push(conn.create_session());
    let open = 0;
    links.forEach((on, i) => {
      const o = { source: { address: `${kind}://${name}` }, credit_window: opts.credit ?? 100 };
      if (on !== conn) { o.name = "same-name"; on.begin(); }
      const rcv = on.open_receiver(o);
      rcv.on("receiver_open", () => { if (++open === links.length) console.log("READY"); });
      rcv.on("message", ctx => emit(textOf(ctx.message.body), ctx.message.application_properties || {}, { receiver: i }));
    });
    stopped.then(() => { conn.closed_by_us = true; conn.close(); setTimeout(() => process.exit(0), 200); });
  } else if (client === "mqttjs") {
    const c = mqttConnect(`interop-recv-${process.pid}`);
    c.on("connect", () => c.subscribe(mqttTopic(name), { qos: 1 }, (err, granted) => {
      if (err || granted.some(g => g.qos >= 0x80)) die("mqttjs subscribe:", err || granted);
      console.log("READY");
    }));
    c.on("message", (topic, payload, packet) => emit(payload.toString("utf8"), packet.properties?.userProperties || {}));
    stopped.then(() => c.end(false, {}, () => process.exit(0)));
  } else if (client === "stompjs") {
    stompClient(c => {
      const h = { ack: "client-individual", receipt: "subscribed" };
      if (opts.credit) h["activemq.prefetchSize"] = String(opts.credit);
      c.watchForReceipt("subscribed", () => console.log("READY"));
      c.subscribe(`/${kind}/${name}`, m => {
        const props = {};
        for (const [k, v] of Object.entries(m.headers)) if (!STOMP_STD.has(k)) props[k] = v;
        emit(m.body, props);
        m.ack();
      }, h);
      stopped.then(() => c.deactivate().then(() => process.exit(0)));
    });
  } else die("unknown client", client);
}

const [cmd, client, kind, name, ...rest] = process.argv.slice(2);
const watchdog = setTimeout(() => die(`${client} ${cmd}: still running after 120s`), 120000);
watchdog.unref();
if (cmd === "send" && rest.length >= 2) send(client, kind, name, rest[0], JSON.parse(rest[1]));
else if (cmd === "recv") recv(client, kind, name, rest[0] ? JSON.parse(rest[0]) : {});
else die("usage: node client.mjs send|recv CLIENT KIND NAME ...");
