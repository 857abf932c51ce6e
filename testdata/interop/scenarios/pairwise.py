#!/usr/bin/python3
# Pairwise: RECEIVER subscribes to a topic (or consumes a queue), then
# every client of the suite sends it one message in turn, each with a
# non-ASCII text body and a non-ASCII string property; the receiver must
# get each of them once, body and property intact.
#
# usage: pairwise.py RECEIVER topic|queue
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

receiver, kind = sys.argv[1], sys.argv[2]
if kind == "queue" and receiver in lib.MQTT_CLIENTS:
    lib.fail(f"{receiver} is an MQTT client: MQTT cannot read queues")
name = f"interop.pair.{kind}.{receiver}"
# Against an external broker, only the clients it supports send.
senders = lib.available(lib.CLIENTS)

r = lib.Receiver(receiver, kind, name)
problems = []
try:
    r.wait_ready()
    for s in senders:
        try:
            lib.send(s, kind, name, lib.body_for(s, receiver), {lib.PROP: lib.prop_for(s)})
        except Exception as e:  # noqa: BLE001
            problems.append(f"{s} -> {receiver}: send failed: {e}")
    r.collect(len(senders), timeout=10)
    r.drain(0.5)  # anything extra (duplicates) shows up here
finally:
    r.stop()

got = r.messages
for s in senders:
    want_body, want_prop = lib.body_for(s, receiver), lib.prop_for(s)
    mine = [m for m in got if (m.get("body") or "").startswith(f"{s} \u2192 ")
            or m.get("props", {}).get(lib.PROP) == want_prop]
    if not mine:
        if not any(p.startswith(f"{s} -> ") for p in problems):
            problems.append(f"{s} -> {receiver}: nothing arrived")
        continue
    if len(mine) > 1:
        problems.append(f"{s} -> {receiver}: arrived {len(mine)} times")
    m = mine[0]
    if m.get("body") != want_body:
        problems.append(f"{s} -> {receiver}: body {m.get('body')!r}, want {want_body!r}")
    if not (lib.has_props(s) and lib.has_props(receiver)):
        pass  # MQTT 3.1.1 has no properties to carry
    elif m.get("props", {}).get(lib.PROP) != want_prop:
        problems.append(f"{s} -> {receiver}: property {lib.PROP}={m.get('props', {}).get(lib.PROP)!r}, "
                        f"want {want_prop!r} (properties: {m.get('props')})")

if problems:
    print("\n".join(problems))
    print(f"receiver stderr: {r.diag()}")
    sys.exit(1)
print(f"{len(senders)} senders -> {receiver} over a {kind}: bodies and properties intact"
      + ("" if lib.MQTT_V5 else " (properties not checked to or from MQTT 3.1.1)"))
