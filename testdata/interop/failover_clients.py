#!/usr/bin/env python3
"""The failover snippets of docs/ha.md for the Python clients, and the
check that scenarios/failover.py runs with each:

    python3 failover_clients.py CLIENT DEST HOST:PORT,HOST:PORT

CLIENT is stomppy, paho or proton; the brokers are a shared-store pair
(the backup may come first: it opens no listener, so the client moves on).
The check sends "one" (confirmed), receives it and, except with paho
(which acknowledges by itself), leaves it unacknowledged; prints READY;
then, while the scenario kills the live broker, waits for the client to
fail over: "one" again, flagged redelivered, then "two" sent and received
through the new live broker. It prints DONE {"redelivered": ...} and
exits 0, or exits 1 after 60 s.

The code between "snippet: NAME" and "end snippet" is what docs/ha.md
shows; internal/lint checks that the two stay the same.
"""
import json
import queue
import sys
import threading
import time
import uuid

TIMEOUT = 60

# snippet: stomppy
import time

import stomp


class Resubscribe(stomp.ConnectionListener):
    """Connects again, to whichever broker answers, when the connection drops."""

    def __init__(self, conn, destination):
        self.conn, self.destination, self.closing = conn, destination, False

    def on_disconnected(self):
        # The old connection may still be closing when this is called: a
        # try that fails (a closed socket, no broker yet) is tried again.
        while not self.closing:
            try:
                connect_and_subscribe(self.conn, self.destination)
                return
            except Exception:
                time.sleep(0.5)


def connect_and_subscribe(conn, destination):
    conn.connect(wait=True)
    conn.subscribe(destination, id="1", ack="client-individual")


def stomppy_connect(brokers, destination, listener):
    # brokers: every broker of the group, e.g. [("127.0.0.1", 61613), ("127.0.0.1", 61623)];
    # connect() tries them in turn until one answers.
    conn = stomp.Connection12(brokers, heartbeats=(0, 0), reconnect_attempts_max=-1, reconnect_sleep_max=2.0)
    conn.set_listener("app", listener)
    resubscribe = Resubscribe(conn, destination)
    conn.set_listener("resubscribe", resubscribe)
    connect_and_subscribe(conn, destination)
    return conn, resubscribe
# end snippet

# snippet: paho
import itertools

import paho.mqtt.client as mqtt


def paho_connect(brokers, client_id, topic, on_message):
    # brokers: every broker of the group, e.g. [("127.0.0.1", 1883), ("127.0.0.1", 1893)].
    # paho-mqtt reconnects to the host it last used, so each failed or lost
    # connection moves it on to the next broker of the list.
    brokers = itertools.cycle(brokers)

    def next_broker(client, *_):
        host, port = next(brokers)
        client.connect_async(host, port, keepalive=10)

    def on_disconnect(client, userdata, rc):
        if rc != mqtt.MQTT_ERR_SUCCESS:  # lost, not client.disconnect()
            next_broker(client)

    def on_connect(client, userdata, flags, rc):
        client.subscribe(topic, qos=1)

    client = mqtt.Client(client_id=client_id, clean_session=False)  # the session survives the takeover
    client.on_connect = on_connect
    client.on_message = on_message
    client.on_disconnect = on_disconnect
    client.on_connect_fail = next_broker
    client.reconnect_delay_set(min_delay=0.1, max_delay=2)
    next_broker(client)
    client.loop_start()
    return client
# end snippet

# snippet: proton
from proton.handlers import MessagingHandler
from proton.reactor import Backoff


class Orders(MessagingHandler):
    def __init__(self, urls, address):
        super().__init__(auto_accept=False)  # accept each message once it is handled
        self.urls, self.address = urls, address

    def on_start(self, event):
        # urls: every broker of the group, e.g. ["amqp://127.0.0.1:5672", "amqp://127.0.0.1:5682"];
        # after a disconnect Proton tries them in turn and attaches the links again.
        conn = event.container.connect(urls=self.urls, reconnect=Backoff(initial=0.1, max_delay=2))
        self.receiver = event.container.create_receiver(conn, self.address)
        self.sender = event.container.create_sender(conn, self.address)
# end snippet


class Received:
    def __init__(self, body, redelivered, handle=None):
        self.body, self.redelivered, self.handle = body, redelivered, handle


def deadline_left(deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise SystemExit(f"timed out after {TIMEOUT}s")
    return left


class StompPy:
    """stomp.py behind the check's interface."""

    class Listener(stomp.ConnectionListener):
        def __init__(self, outer):
            self.outer = outer

        def on_message(self, frame):
            self.outer.got.put(Received(frame.body, frame.headers.get("redelivered") == "true", frame.headers["ack"]))

        def on_receipt(self, frame):
            ev = self.outer.receipts.get(frame.headers["receipt-id"])
            if ev:
                ev.set()

    def __init__(self, brokers, dest):
        self.got, self.receipts, self.dest = queue.Queue(), {}, dest
        self.conn, self.resub = stomppy_connect(brokers, dest, StompPy.Listener(self))

    def send(self, body):
        rid = uuid.uuid4().hex
        ev = self.receipts[rid] = threading.Event()
        try:
            self.conn.send(self.dest, body, headers={"persistent": "true", "receipt": rid})
        except stomp.exception.NotConnectedException:
            return False
        return ev.wait(5)

    def ack(self, m):
        self.conn.ack(m.handle)

    def close(self):
        self.resub.closing = True
        self.conn.disconnect()


class Paho:
    def __init__(self, brokers, dest):
        self.got, self.topic = queue.Queue(), dest.replace(".", "/")
        self.client = paho_connect(brokers, "failover-" + uuid.uuid4().hex[:8], self.topic,
                                   lambda c, u, m: self.got.put(Received(m.payload.decode(), None)))

    def send(self, body):
        if not self.client.is_connected():
            return False
        info = self.client.publish(self.topic, body, qos=1)
        try:
            info.wait_for_publish(5)
        except (RuntimeError, ValueError):
            return False
        return info.is_published()

    def ack(self, m):
        pass  # paho-mqtt acknowledges when on_message returns

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


class Proton:
    def __init__(self, brokers, dest):
        from proton import Message
        from proton.reactor import ApplicationEvent, Container, EventInjector
        outer = self
        self.got, self.accepted = queue.Queue(), {}
        self.ApplicationEvent, self.Message = ApplicationEvent, Message

        class Check(Orders):
            def on_message(self, event):
                m = event.message
                outer.got.put(Received(m.body, not m.first_acquirer or m.delivery_count > 0, event.delivery))

            def on_accepted(self, event):
                ev = outer.accepted.get(str(event.delivery.tag))
                if ev:
                    ev.set()

            def on_send(self, event):  # an ApplicationEvent from the check's thread
                body, tag = event.subject
                if self.sender.credit:
                    self.sender.send(outer.Message(body=body, durable=True), tag=tag)

            def on_accept(self, event):
                self.accept(event.subject)

            def on_stop(self, event):
                event.container.stop()

        self.handler = Check(["amqp://" + f"{h}:{p}" for h, p in brokers], "queue://" + dest)
        self.container = Container(self.handler)
        self.injector = EventInjector()
        self.container.selectable(self.injector)
        self.thread = threading.Thread(target=self.container.run, daemon=True)
        self.thread.start()

    def send(self, body):
        tag = uuid.uuid4().hex
        ev = self.accepted[tag] = threading.Event()
        self.injector.trigger(self.ApplicationEvent("send", subject=(body, tag)))
        return ev.wait(5)

    def ack(self, m):
        self.injector.trigger(self.ApplicationEvent("accept", subject=m.handle))

    def close(self):
        self.injector.trigger(self.ApplicationEvent("stop"))
        self.thread.join(5)


def expect(client, body, deadline):
    """The next message with this body (others, left over, are acknowledged)."""
    while True:
        try:
            m = client.got.get(timeout=deadline_left(deadline))
        except queue.Empty:
            continue
        if m.body == body:
            return m
        client.ack(m)


def send_until_confirmed(client, body, deadline):
    while not client.send(body):
        deadline_left(deadline)
        time.sleep(0.1)


def main():
    name, dest, brokers = sys.argv[1], sys.argv[2], sys.argv[3]
    brokers = [(h, int(p)) for h, p in (b.rsplit(":", 1) for b in brokers.split(","))]
    deadline = time.monotonic() + TIMEOUT
    client = {"stomppy": StompPy, "paho": Paho, "proton": Proton}[name](brokers, dest)
    # MQTT: the subscription may not be in place yet; send until it arrives.
    while True:
        send_until_confirmed(client, "one", deadline)
        try:
            first = client.got.get(timeout=2 if name == "paho" else deadline_left(deadline))
            break
        except queue.Empty:
            continue
    if first.body != "one":
        raise SystemExit(f"got {first.body!r}, want 'one'")
    if name == "paho":
        client.ack(first)
    print("READY", flush=True)
    redelivered = None
    if name != "paho":  # the unacknowledged "one" comes back from the new live broker
        again = expect(client, "one", deadline)
        redelivered = again.redelivered
        client.ack(again)
    send_until_confirmed(client, "two", deadline)
    client.ack(expect(client, "two", deadline))
    print("DONE " + json.dumps({"redelivered": redelivered}), flush=True)
    client.close()


if __name__ == "__main__":
    main()
