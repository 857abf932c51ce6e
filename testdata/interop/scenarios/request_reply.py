#!/usr/bin/python3
# Request/reply across protocols: a Qpid Proton requester (AMQP 1.0)
# opens a receiver with a dynamic source (a temporary queue), sends a
# request to queue://interop.requests with reply-to set to that queue's
# address and a correlation id; a stomp.py responder (STOMP 1.2)
# subscribed to /queue/interop.requests answers twice, copying
# correlation-id: once to the request's reply-to header as it is (what a
# STOMP responder does), once to /queue/<that address>; the requester
# must get both replies on its temporary queue, body and correlation id
# intact.
import os
import queue
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

REQ = "interop.requests"
seen = {}
errors = []


# The STOMP responder, on its own thread.
sconn, slst = lib.stomp_connect()
lib.stomp_subscribe(sconn, slst, f"/queue/{REQ}", "req", ack="client-individual")
ready = threading.Event()


def respond():
    try:
        f = slst.messages.get(timeout=15)
    except queue.Empty:
        errors.append("responder: no request arrived on /queue/" + REQ)
        return
    seen["request_headers"] = dict(f.headers)
    seen["request_body"] = f.body
    rt = f.headers.get("reply-to")
    if not rt:
        errors.append(f"responder: request has no reply-to header: {f.headers}")
        sconn.ack(f.headers["ack"])
        return
    seen["reply_dest"] = dests = [rt, rt if rt.startswith("/") else "/queue/" + rt]
    h = {"persistent": "true"}
    if "correlation-id" in f.headers:
        h["correlation-id"] = f.headers["correlation-id"]
    for dest in dests:
        try:
            lib.stomp_send(sconn, slst, dest, f"re: {f.body} via {dest}", headers=h)
        except Exception as e:  # noqa: BLE001
            errors.append(f"responder: SEND to {dest} failed: {e} (stomp ERRORs: {slst.errors})")
    sconn.ack(f.headers["ack"])


t = threading.Thread(target=respond, daemon=True)
t.start()

# The AMQP requester.
conn = lib.proton_connect()
replies = conn.create_receiver(None, dynamic=True, credit=10)
reply_addr = replies.remote_source.address
if not reply_addr:
    lib.fail("the dynamic receiver got no address in the broker's attach")
print(f"AMQP temporary reply queue: {reply_addr!r}")
snd = conn.create_sender(f"queue://{REQ}")
body = "Anfrage \u00fcber \u65e5\u672c \U0001F680"
corr = "corr-\u00e9-42"
snd.send(lib.proton_message(body, {"kind": "ping"}, reply_to=reply_addr, correlation_id=corr))

got = []
try:
    from proton import Timeout
    try:
        for _ in range(2):
            m = replies.receive(timeout=15)
            got.append((lib.text_of(m.body), m.correlation_id))
            replies.accept()
    except Timeout:
        pass
finally:
    t.join(timeout=5)
    conn.close()
    del replies, snd, conn
    lib.stomp_disconnect(sconn)

rh = seen.get("request_headers", {})
print(f"request as STOMP saw it: reply-to={rh.get('reply-to')!r} correlation-id={rh.get('correlation-id')!r} "
      f"body={seen.get('request_body')!r}; reply sent to {seen.get('reply_dest')!r}")
problems = list(errors)
if seen.get("request_body") is not None and seen["request_body"] != body:
    problems.append(f"request body at STOMP {seen['request_body']!r}, want {body!r}")
if rh and rh.get("correlation-id") != corr:
    problems.append(f"request correlation-id at STOMP {rh.get('correlation-id')!r}, want {corr!r}")
for dest in seen.get("reply_dest", []):
    want = f"re: {body} via {dest}"
    mine = [g for g in got if g[0] == want]
    if not mine:
        problems.append(f"requester: the reply the responder sent to STOMP destination {dest!r} did not reach "
                        f"the temporary queue {reply_addr!r} within 15s (got {got})")
    elif mine[0][1] != corr:
        problems.append(f"reply via {dest!r}: correlation_id {mine[0][1]!r}, want {corr!r}")
    else:
        print(f"reply via STOMP {dest!r} at AMQP: body={mine[0][0]!r} correlation_id={mine[0][1]!r}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("request/reply AMQP -> STOMP -> AMQP temporary queue: ok")
