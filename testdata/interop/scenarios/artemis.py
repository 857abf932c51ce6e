#!/usr/bin/python3
# Artemis and ActiveMQ properties (docs/artemis-features.md) from Python
# clients, across a broker restart:
#
#   artemis.py send
#       stomp.py and Qpid Proton each send one durable message twice with
#       one _AMQ_DUPL_ID (a header; an application property), and Proton
#       once more with a message-id only; stomp.py sends three values of
#       one _AMQ_LVQ_NAME key; both schedule a message for later
#       (AMQ_SCHEDULED_DELAY, AMQ_SCHEDULED_TIME); paho (MQTT 5) publishes
#       twice with one _AMQ_DUPL_ID user property while stomp.py
#       subscribes to the topic. Every send is confirmed.
#   artemis.py check
#       after the restart, both resend their duplicates (confirmed, not
#       stored), and stomp.py drains: one message per duplicate id, the
#       last value of the key, the scheduled messages not before their
#       time.
import os
import queue
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

DUP = "interop.artemis.dup"
LVQ = "interop.artemis.lvq"
SCHED = "interop.artemis.sched"
TOPIC = "interop.artemis.topic"
STAMP = os.path.join(os.environ.get("TMPDIR", "/tmp"), "interop-artemis-due")


def send_dups(conn, lst, proton_conn):
    snd = proton_conn.create_sender(lib.amqp_addr("queue", DUP))
    for _ in range(2):
        lib.stomp_send(conn, lst, lib.stomp_dest("queue", DUP), "from stomp",
                       headers={"persistent": "true", "_AMQ_DUPL_ID": "stomp-1"})
        snd.send(lib.proton_message("from amqp", {"_AMQ_DUPL_ID": "amqp-1"}))
    snd.close()


def main():
    phase = sys.argv[1]
    conn, lst = lib.stomp_connect()
    pc = lib.proton_connect()
    if phase == "send":
        send_dups(conn, lst, pc)
        for v in ("v1", "v2", "v3"):
            lib.stomp_send(conn, lst, lib.stomp_dest("queue", LVQ), v,
                           headers={"persistent": "true", "_AMQ_LVQ_NAME": "price"})
        due = int(time.time() * 1000) + 2500
        with open(STAMP, "w") as f:
            f.write(str(due))
        lib.stomp_send(conn, lst, lib.stomp_dest("queue", SCHED), "stomp later",
                       headers={"persistent": "true", "AMQ_SCHEDULED_DELAY": "2500"})
        snd = pc.create_sender(lib.amqp_addr("queue", SCHED))
        snd.send(lib.proton_message("amqp later", {"AMQ_SCHEDULED_TIME": due}))
        snd.close()
        # MQTT 5: a user property; a STOMP subscriber gets one copy.
        lib.stomp_subscribe(conn, lst, lib.stomp_dest("topic", TOPIC), "t")
        p = lib.Paho(f"interop-artemis-{os.getpid()}")
        p.connect()
        for _ in range(2):
            p.publish(lib.mqtt_topic(TOPIC), "from mqtt", props={"_AMQ_DUPL_ID": "mqtt-1"})
        p.disconnect()
        got = []
        try:
            while True:
                got.append(lst.messages.get(timeout=1).body)
        except queue.Empty:
            pass
        if got != ["from mqtt"]:
            lib.fail(f"MQTT 5 duplicate: the topic's subscriber got {got}, want one message")
    else:
        send_dups(conn, lst, pc)  # after the restart: still duplicates
        with open(STAMP) as f:
            due = int(f.read())
        out = {}
        for name in (DUP, LVQ, SCHED):
            lib.stomp_subscribe(conn, lst, lib.stomp_dest("queue", name), name)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                f = lst.messages.get(timeout=1.5)
            except queue.Empty:
                if time.time() * 1000 > due + 500:
                    break
                continue
            out.setdefault(f.headers["subscription"], []).append((f.body, int(time.time() * 1000)))
        bodies = {k: sorted(b for b, _ in v) for k, v in out.items()}
        want = {DUP: ["from amqp", "from stomp"], LVQ: ["v3"], SCHED: ["amqp later", "stomp later"]}
        if bodies != want:
            lib.fail(f"after the restart got {bodies}, want {want}")
        for body, at in out[SCHED]:
            if at < due - 5:
                lib.fail(f"{body!r} delivered {due - at} ms before its time")
    pc.close()
    lib.stomp_disconnect(conn)
    lib.log("ok")


main()
