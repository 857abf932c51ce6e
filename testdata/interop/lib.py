# Shared helpers for the Python side of the interop suite: broker
# addresses from the environment the runner sets, destination mapping per
# protocol, thin wrappers around Qpid Proton (AMQP 1.0), stomp.py and
# paho-mqtt, and the subprocess protocol of client.py / client.mjs.
import json
import os
import queue
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Every client of the suite. Each can send; MQTT clients cannot read queues.
PY_CLIENTS = ["proton", "stomppy", "paho", "mosquitto"]
JS_CLIENTS = ["rhea", "mqttjs", "stompjs"]
CLIENTS = PY_CLIENTS + JS_CLIENTS
MQTT_CLIENTS = {"paho", "mosquitto", "mqttjs"}
AMQP_CLIENTS = {"proton", "rhea"}

# Against an external broker (run --against / --external) only some
# clients can run: INTEROP_CLIENTS lists them (unset: all), and
# INTEROP_MQTT_VERSION is 5 (the default) or 3.1.1 for a broker without
# MQTT 5 (MQTT 3.1.1 has no user properties, content type, ...).
AVAILABLE = [c for c in os.environ.get("INTEROP_CLIENTS", ",".join(CLIENTS)).split(",") if c]
MQTT_V5 = os.environ.get("INTEROP_MQTT_VERSION", "5") == "5"


def available(clients):
    """The clients of `clients` that can run against this broker, in order."""
    return [c for c in clients if c in AVAILABLE]


def first_available(*clients):
    """The first of `clients` that can run against this broker."""
    for c in clients:
        if c in AVAILABLE:
            return c
    raise SystemExit(f"none of {clients} can run against this broker (INTEROP_CLIENTS={','.join(AVAILABLE)})")


def has_props(client):
    """Whether `client` can carry string properties (not MQTT 3.1.1)."""
    return MQTT_V5 or client not in MQTT_CLIENTS

# Body and property each sender puts on its message: non-ASCII in both,
# including a 4-byte UTF-8 character (a surrogate pair in JavaScript).
PROP = "interop-from"


def body_for(sender, receiver):
    return f"{sender} \u2192 {receiver}: gr\u00fc\u00dfe, \u65e5\u672c\u8a9e, \U0001F680"


def prop_for(sender):
    return f"{sender} \u2713 \u00e9"


def hostport(var):
    v = os.environ.get(var)
    if not v:
        raise SystemExit(f"{var} is not set (run the scenario through ./run)")
    h, p = v.rsplit(":", 1)
    return h, int(p)


def stomp_addr():
    return hostport("INTEROP_STOMP")


def mqtt_addr():
    return hostport("INTEROP_MQTT")


def amqp_url():
    h, p = hostport("INTEROP_AMQP")
    return f"amqp://{h}:{p}"


def stomp_dest(kind, name):
    return f"/{kind}/{name}"


def amqp_addr(kind, name):
    return f"{kind}://{name}"


def mqtt_topic(name):
    # docs/protocol-mapping.md: '.' separates words, '/' separates levels.
    return name.replace(".", "/")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def text_of(body):
    """A received body as text: AMQP gives str (amqp-value) or bytes/memoryview (data)."""
    if body is None:
        return None
    if isinstance(body, memoryview):
        body = body.tobytes()
    if isinstance(body, (bytes, bytearray)):
        try:
            return bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            return repr(bytes(body))
    return body if isinstance(body, str) else repr(body)


# ---- Qpid Proton (AMQP 1.0), blocking API -------------------------------

def proton_connect(container_id=None, timeout=10):
    from proton.reactor import Container
    from proton.utils import BlockingConnection
    c = Container()
    if container_id:
        c.container_id = container_id
    return BlockingConnection(amqp_url(), timeout=timeout, container=c)


def proton_message(body, props=None, durable=True, **fields):
    from proton import Message
    m = Message(body=body, durable=durable, properties=dict(props or {}))
    for k, v in fields.items():
        setattr(m, k, v)
    return m


# ---- stomp.py ------------------------------------------------------------

class StompListener:
    def __init__(self):
        self.messages = queue.Queue()
        self.receipts = set()
        self.errors = []
        self.cond = threading.Condition()

    def on_message(self, frame):
        self.messages.put(frame)

    def on_receipt(self, frame):
        with self.cond:
            self.receipts.add(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def on_error(self, frame):
        self.errors.append((frame.headers, frame.body))
        log("stomp ERROR frame:", frame.headers, frame.body)

    def wait_receipt(self, rid, timeout=10):
        with self.cond:
            if not self.cond.wait_for(lambda: rid in self.receipts, timeout):
                raise TimeoutError(f"no RECEIPT {rid} (errors: {self.errors})")


_receipt_n = 0


def next_receipt():
    global _receipt_n
    _receipt_n += 1
    return f"r{os.getpid()}-{_receipt_n}"


def stomp_connect(headers=None):
    import stomp
    conn = stomp.Connection12([stomp_addr()], heartbeats=(0, 0))
    lst = StompListener()
    conn.set_listener("l", lst)
    conn.connect(wait=True, headers=dict(headers or {}))
    return conn, lst


def stomp_subscribe(conn, lst, dest, sub_id, ack="auto", headers=None):
    rid = next_receipt()
    h = dict(headers or {})
    h["receipt"] = rid
    conn.subscribe(dest, id=sub_id, ack=ack, headers=h)
    lst.wait_receipt(rid)


def stomp_send(conn, lst, dest, body, headers=None):
    """SEND with a receipt, so the broker has it when this returns."""
    rid = next_receipt()
    h = dict(headers or {})
    h["receipt"] = rid
    conn.send(dest, body, headers=h)
    lst.wait_receipt(rid)


def stomp_disconnect(conn):
    try:
        conn.disconnect(receipt=next_receipt())
    except Exception as e:  # noqa: BLE001
        log("stomp disconnect:", e)


# ---- paho-mqtt (1.6) -----------------------------------------------------

class Paho:
    """A paho client run on its own network thread, with blocking helpers."""

    def __init__(self, client_id, v5=True, clean=True):
        import paho.mqtt.client as mqtt
        self.mqtt = mqtt
        v5 = v5 and MQTT_V5
        self.v5 = v5
        self.clean = clean
        if v5:
            self.c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5)
        else:
            self.c = mqtt.Client(client_id=client_id, clean_session=clean, protocol=mqtt.MQTTv311)
        self.messages = queue.Queue()
        self.events = queue.Queue()
        self.c.on_connect = lambda c, u, f, rc, p=None: self.events.put(("connack", rc, f))
        self.c.on_subscribe = lambda c, u, mid, q, p=None: self.events.put(("suback", mid, q))
        self.c.on_publish = lambda c, u, mid: self.events.put(("puback", mid))
        self.c.on_message = lambda c, u, m: self.messages.put(m)

    def _wait(self, kind, timeout=10):
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"paho: no {kind}")
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if ev[0] == kind:
                return ev

    def connect(self):
        h, p = mqtt_addr()
        if self.v5:
            self.c.connect(h, p, keepalive=30, clean_start=self.clean)
        else:
            self.c.connect(h, p, keepalive=30)
        self.c.loop_start()
        ev = self._wait("connack")
        rc = ev[1]
        if (rc.value if hasattr(rc, "value") else rc) != 0:
            raise RuntimeError(f"paho: CONNACK {rc}")
        return ev

    def subscribe(self, topic, qos=1):
        self.c.subscribe(topic, qos=qos)
        ev = self._wait("suback")
        granted = ev[2]
        g = granted[0]
        g = g.value if hasattr(g, "value") else g
        if g >= 0x80:
            raise RuntimeError(f"paho: SUBACK refused {granted}")

    def publish(self, topic, payload, props=None, qos=1):
        kw = {}
        if props and self.v5:
            from paho.mqtt.properties import Properties
            from paho.mqtt.packettypes import PacketTypes
            pp = Properties(PacketTypes.PUBLISH)
            pp.UserProperty = list(props.items())
            kw["properties"] = pp
        info = self.c.publish(topic, payload.encode("utf-8") if isinstance(payload, str) else payload, qos=qos, **kw)
        info.wait_for_publish(timeout=10)
        if not info.is_published():
            raise TimeoutError("paho: publish not acknowledged")

    def disconnect(self):
        self.c.disconnect()
        self.c.loop_stop()


def paho_props(m):
    props = {}
    p = getattr(m, "properties", None)
    for k, v in (getattr(p, "UserProperty", None) or []):
        props[k] = v
    return props


# ---- client.py / client.mjs subprocesses ---------------------------------

def client_argv(client, *args):
    if client in JS_CLIENTS:
        return ["node", os.path.join(HERE, "client.mjs"), *args]
    return [sys.executable, os.path.join(HERE, "client.py"), *args]


def send(client, kind, name, body, props=None, timeout=20):
    """Send one message with `client` (a fresh process); raises on failure."""
    argv = client_argv(client, "send", client, kind, name, body, json.dumps(props or {}))
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{client} send exited {r.returncode}: {(r.stdout + r.stderr).strip()[-2000:]}")


class Receiver:
    """A client.py/client.mjs receiver in its own process: READY once it is
    subscribed, then one JSON line per message ({"body","props"})."""

    def __init__(self, client, kind, name, *extra):
        self.client = client
        self.p = subprocess.Popen(client_argv(client, "recv", client, kind, name, *extra),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, encoding="utf-8")
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.p.stderr), daemon=True).start()
        self.messages = []

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_ready(self, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError(f"{self.client} receiver exited before READY: {self.diag()}")
            if line == "READY":
                return
        raise TimeoutError(f"{self.client} receiver not READY after {timeout}s: {self.diag()}")

    def collect(self, count, timeout=10):
        """Gather messages until `count` in total have arrived or timeout."""
        deadline = time.time() + timeout
        while len(self.messages) < count:
            left = deadline - time.time()
            if left <= 0:
                break
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.messages.append(json.loads(line))
        return self.messages

    def poll(self):
        """Gather what has arrived so far, without waiting."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return self.messages
            if line is None:
                self.lines.put(None)
                return self.messages
            self.messages.append(json.loads(line))

    def drain(self, quiet=0.5):
        """Gather whatever else arrives until nothing has come for `quiet` seconds."""
        while True:
            try:
                line = self.lines.get(timeout=quiet)
            except queue.Empty:
                return self.messages
            if line is None:
                return self.messages
            self.messages.append(json.loads(line))

    def stop(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except Exception:  # noqa: BLE001
                pass
            try:
                self.p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def diag(self):
        return "".join(self.stderr).strip()[-2000:] or "(no stderr)"
