#!/usr/bin/python3
# Broker events (docs/features.md, "Broker events") read by every
# protocol's clients from the notification address while another client
# makes them:
#
#   stomp.py  subscribes to /topic/activemq.notifications with a selector
#             on _AMQ_NotifType and _AMQ_Address
#   paho      (MQTT 5) subscribes to activemq/notifications: the
#             properties come as user properties, the event as JSON body
#   rhea      an AMQP receiver on topic://activemq.notifications:
#             application properties
#
# Qpid Proton then attaches a receiver to a new queue and detaches it:
# paho and rhea must see CONSUMER_CREATED then CONSUMER_CLOSED for that
# queue, saying it was an AMQP consumer (among the queue's ADDRESS_ADDED
# and BINDING_ADDED and the clients' connection events); stomp.py's
# selector must let through CONSUMER_CREATED alone.
import json
import os
import queue
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

NOTIF = "activemq.notifications"
Q = f"interop.events.{os.getpid()}"


def main():
    conn, lst = lib.stomp_connect()
    lib.stomp_subscribe(conn, lst, lib.stomp_dest("topic", NOTIF), "events", headers={
        "selector": f"_AMQ_NotifType = 'CONSUMER_CREATED' AND _AMQ_Address = '{Q}'"})
    p = lib.Paho(f"interop-events-{os.getpid()}")
    p.connect()
    p.subscribe(lib.mqtt_topic(NOTIF))
    rhea = lib.Receiver("rhea", "topic", NOTIF)
    rhea.wait_ready()
    # A barrier: the subscriptions above are in place before the events.
    lib.stomp_send(conn, lst, lib.stomp_dest("queue", "interop.events.barrier"), "x")

    pc = lib.proton_connect()
    rcv = pc.create_receiver(lib.amqp_addr("queue", Q))
    rcv.close()
    pc.close()

    want = ["CONSUMER_CREATED", "CONSUMER_CLOSED"]
    # stomp.py: exactly the one event its selector matches.
    got = []
    deadline = time.time() + 10
    while time.time() < deadline and not got:
        try:
            got.append(lst.messages.get(timeout=0.5))
        except queue.Empty:
            pass
    try:
        got.append(lst.messages.get(timeout=1))
    except queue.Empty:
        pass
    if len(got) != 1:
        lib.fail(f"stomp.py with a selector: {len(got)} events, want 1: {[f.headers for f in got]}")
    h = got[0].headers
    if h.get("_AMQ_NotifType") != "CONSUMER_CREATED" or h.get("_AMQ_Address") != Q or h.get("_AMQ_Protocol") != "amqp":
        lib.fail(f"stomp.py: event headers {h}")

    # paho: the queue's two events, as user properties and JSON.
    seen = []
    deadline = time.time() + 10
    while time.time() < deadline and len(seen) < 2:
        try:
            m = p.messages.get(timeout=0.5)
        except queue.Empty:
            continue
        props = lib.paho_props(m)
        if props.get("_AMQ_Address") != Q or props.get("_AMQ_NotifType") not in want:
            continue  # the connections' events, and the queue's ADDRESS_ADDED, BINDING_ADDED
        ev = json.loads(m.payload.decode("utf-8"))
        if ev.get("type") != props.get("_AMQ_NotifType") or ev.get("address") != Q or ev.get("protocol") != "amqp":
            lib.fail(f"paho: body {ev} against user properties {props}")
        seen.append(props["_AMQ_NotifType"])
    p.disconnect()
    if seen != want:
        lib.fail(f"paho (MQTT 5): events of {Q}: {seen}, want {want}")

    # rhea: the same two, as application properties.
    seen = []
    deadline = time.time() + 10
    while time.time() < deadline and len(seen) < 2:
        rhea.collect(len(rhea.messages) + 1, timeout=0.5)
        seen = [m["props"].get("_AMQ_NotifType") for m in rhea.messages
                if m["props"].get("_AMQ_Address") == Q and m["props"].get("_AMQ_NotifType") in want
                and m["props"].get("_AMQ_Protocol") == "amqp"]
    rhea.stop()
    if seen != want:
        lib.fail(f"rhea: events of {Q}: {seen}, want {want}")
    lib.stomp_disconnect(conn)
    lib.log("ok")


main()
