#!/usr/bin/python3
# Durable subscriber, offline while messages arrive:
#   amqp   Qpid Proton receiver, source durable + expiry-policy never,
#          named by container-id and link name; detached (not closed)
#   stomp  stomp.py, client-id on CONNECT + activemq.subscriptionName on
#          SUBSCRIBE; DISCONNECT without UNSUBSCRIBE
#   mqtt   paho-mqtt, MQTT 3.1.1 clean session false, QoS 1; DISCONNECT
# The subscriber first gets one message online, goes away, three other
# clients (one per protocol) send one message each, and the subscriber,
# reconnecting with the same identity, must get all three (against an
# external broker, those of the three senders it supports).
#
# usage: durable.py amqp|stomp|mqtt
import os
import queue
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

proto = sys.argv[1]
name = f"interop.durable.{proto}"
ident = f"interop-durable-{proto}-{os.getpid()}"
SUB = "interop-sub"
senders = lib.available({"amqp": ["stomppy", "paho", "rhea"],
                         "stomp": ["proton", "mosquitto", "stompjs"],
                         "mqtt": ["proton", "stomppy", "mqttjs"]}[proto])


def body(s):
    return f"offline from {s}: \u00e7a va? \u2602"


class AMQPSub:
    def open(self):
        from proton.reactor import DurableSubscription
        self.conn = lib.proton_connect(container_id=ident)
        self.rcv = self.conn.create_receiver(f"topic://{name}", name=SUB, credit=10,
                                             options=DurableSubscription())

    def get(self, timeout):
        from proton import Timeout
        try:
            m = self.rcv.receive(timeout=timeout)
        except Timeout:
            return None
        self.rcv.accept()
        return lib.text_of(m.body)

    def away(self):
        self.rcv.link.detach()  # a detach without close keeps the subscription
        self.conn.close()
        del self.rcv, self.conn


class STOMPSub:
    def open(self):
        self.conn, self.lst = lib.stomp_connect(headers={"client-id": ident})
        lib.stomp_subscribe(self.conn, self.lst, f"/topic/{name}", "1", ack="client-individual",
                            headers={"activemq.subscriptionName": SUB})

    def get(self, timeout):
        try:
            f = self.lst.messages.get(timeout=timeout)
        except queue.Empty:
            return None
        self.conn.ack(f.headers["ack"])
        return f.body

    def away(self):
        lib.stomp_disconnect(self.conn)


class MQTTSub:
    def __init__(self):
        self.first = True

    def open(self):
        self.p = lib.Paho(ident, v5=False, clean=False)
        ev = self.p.connect()
        session_present = (ev[2] or {}).get("session present")
        if self.first:
            self.p.subscribe(lib.mqtt_topic(name), qos=1)
            self.first = False
        elif not session_present:
            print("note: CONNACK of the reconnect has session present = 0")

    def get(self, timeout):
        try:
            m = self.p.messages.get(timeout=timeout)
        except queue.Empty:
            return None
        return lib.text_of(m.payload)

    def away(self):
        self.p.disconnect()


sub = {"amqp": AMQPSub, "stomp": STOMPSub, "mqtt": MQTTSub}[proto]()
problems = []
sub.open()
online = f"online {proto} \u00e9"
lib.send(lib.first_available("stomppy") if proto != "stomp" else lib.first_available("proton", "mosquitto"),
         "topic", name, online, {})
got = sub.get(10)
if got != online:
    lib.fail(f"online: the durable subscriber got {got!r}, want {online!r}")
sub.away()
time.sleep(0.3)
for s in senders:
    try:
        lib.send(s, "topic", name, body(s), {})
    except Exception as e:  # noqa: BLE001
        problems.append(f"send from {s} while offline failed: {e}")
sub.open()
got = []
deadline = time.time() + 10
while len(got) < len(senders) and time.time() < deadline:
    b = sub.get(max(0.1, deadline - time.time()))
    if b is not None:
        got.append(b)
while True:  # duplicates?
    b = sub.get(0.5)
    if b is None:
        break
    got.append(b)
sub.away()
for s in senders:
    n = got.count(body(s))
    if n == 0:
        problems.append(f"offline message from {s} not delivered on reconnect")
    elif n > 1:
        problems.append(f"offline message from {s} delivered {n} times")
extra = [b for b in got if b not in {body(s) for s in senders}]
if extra:
    problems.append(f"unexpected messages on reconnect: {extra}")
if problems:
    print(f"received on reconnect: {got}")
    print("\n".join(problems))
    sys.exit(1)
print(f"{proto} durable subscriber got {len(senders)} messages sent while it was away ({', '.join(senders)})")
