#!/usr/bin/python3
# Field-mapping probe (not a pass/fail scenario; run does not run it):
# prints what arrives on each side for
#   1. a STOMP SEND to /topic/X with every mappable STOMP header set, as a
#      STOMP subscriber and as an MQTT subscriber (paho) see it;
#   2. an MQTT publish (QoS 1; with MQTT 5 also content type, correlation
#      data, response topic, expiry and a user property) to the same
#      topic, as a STOMP subscriber and an MQTT subscriber see it.
# Compare the output of two brokers against docs/protocol-mapping.md.
#
# usage: INTEROP_STOMP=host:port INTEROP_MQTT=host:port \
#        [INTEROP_MQTT_VERSION=3.1.1] /usr/bin/python3 fields_probe.py
#   e.g. ActiveMQ from /work/shared/peers: INTEROP_STOMP=127.0.0.1:26613
#        INTEROP_MQTT=127.0.0.1:21883 INTEROP_MQTT_VERSION=3.1.1
import json
import os
import queue
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

NAME = f"interop.fields.{os.getpid()}"
TOPIC = lib.mqtt_topic(NAME)
SKIP_STOMP = {"subscription", "ack", "content-length"}


def show(label, d):
    print(f"{label}:")
    for k in sorted(d):
        print(f"    {k}: {json.dumps(d[k], ensure_ascii=False)}")


def stomp_frame(lst):
    f = lst.messages.get(timeout=5)
    h = {k: v for k, v in f.headers.items() if k not in SKIP_STOMP}
    h["(body)"] = f.body
    return h


def mqtt_msg(p):
    m = p.messages.get(timeout=5)
    d = {"(topic)": m.topic, "(payload)": lib.text_of(m.payload), "(qos)": m.qos, "(retain)": bool(m.retain)}
    props = getattr(m, "properties", None)
    if props is not None:
        for attr in ("ContentType", "CorrelationData", "ResponseTopic", "MessageExpiryInterval",
                     "PayloadFormatIndicator", "UserProperty"):
            v = getattr(props, attr, None)
            if v is not None:
                d[attr] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return d


conn, lst = lib.stomp_connect()
lib.stomp_subscribe(conn, lst, f"/topic/{NAME}", "1")
p = lib.Paho(f"interop-fields-{os.getpid()}")
p.connect()
p.subscribe(TOPIC, qos=1)
print(f"broker: STOMP {os.environ['INTEROP_STOMP']}, MQTT {os.environ['INTEROP_MQTT']} "
      f"(MQTT {'5' if lib.MQTT_V5 else '3.1.1'}), topic /topic/{NAME} = {TOPIC}")

expires = int(time.time() * 1000) + 600_000
sent = {
    "persistent": "true",
    "priority": "7",
    "expires": str(expires),
    "content-type": "text/plain;charset=utf-8",
    "correlation-id": "corr-1",
    "reply-to": "/queue/interop.fields.reply",
    "JMSXGroupID": "group-1",
    "type": "probe-type",
    "custom": "v \u00e9",
}
lib.stomp_send(conn, lst, f"/topic/{NAME}", "from stomp", headers=sent)
show("1. STOMP SEND headers", dict(sent, **{"expires": f"{expires} (now + 600 s)"}))
try:
    show("1. -> STOMP subscriber", stomp_frame(lst))
except queue.Empty:
    print("1. -> STOMP subscriber: nothing")
try:
    show("1. -> MQTT subscriber", mqtt_msg(p))
except queue.Empty:
    print("1. -> MQTT subscriber: nothing")

pub = lib.Paho(f"interop-fields-pub-{os.getpid()}")
pub.connect()
if lib.MQTT_V5:
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    pp = Properties(PacketTypes.PUBLISH)
    pp.ContentType = "text/plain"
    pp.CorrelationData = b"corr-2"
    pp.ResponseTopic = "interop/fields/reply"
    pp.MessageExpiryInterval = 600
    pp.UserProperty = [("custom", "v \u00e9")]
    info = pub.c.publish(TOPIC, b"from mqtt", qos=1, properties=pp)
    show("2. MQTT PUBLISH", {"qos": 1, "retain": False, "ContentType": "text/plain", "CorrelationData": "corr-2",
                             "ResponseTopic": "interop/fields/reply", "MessageExpiryInterval": 600,
                             "UserProperty": [["custom", "v \u00e9"]]})
else:
    info = pub.c.publish(TOPIC, b"from mqtt", qos=1)
    show("2. MQTT PUBLISH", {"qos": 1, "retain": False})
info.wait_for_publish(timeout=10)
pub.disconnect()
try:
    show("2. -> STOMP subscriber", stomp_frame(lst))
except queue.Empty:
    print("2. -> STOMP subscriber: nothing")
try:
    show("2. -> MQTT subscriber", mqtt_msg(p))
except queue.Empty:
    print("2. -> MQTT subscriber: nothing")

p.disconnect()
lib.stomp_disconnect(conn)
