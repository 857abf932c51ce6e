#!/usr/bin/python3
# Request/reply the other way: a stomp.py requester subscribed to its
# reply queue /queue/interop.replies.<pid> sends a request to
# /queue/interop.requests.rev with reply-to:/queue/interop.replies.<pid>
# and a correlation-id; a Qpid Proton responder (AMQP 1.0) answers to the
# message's reply-to property as it is (what an AMQP or JMS responder
# does: a sender on that address), copying the correlation id. The reply
# must reach the STOMP requester.
import os
import queue
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402
from proton import Timeout  # noqa: E402

REQ = "interop.requests.rev"
reply_dest = f"/queue/interop.replies.{os.getpid()}"
corr = "corr-\u00fc-7"

sconn, slst = lib.stomp_connect()
lib.stomp_subscribe(sconn, slst, reply_dest, "replies")

conn = lib.proton_connect()
requests = conn.create_receiver(f"queue://{REQ}", credit=10)
lib.stomp_send(sconn, slst, f"/queue/{REQ}", "Frage \u2753",
               headers={"reply-to": reply_dest, "correlation-id": corr, "persistent": "true"})
problems = []
try:
    req = requests.receive(timeout=10)
    requests.accept()
except Timeout:
    lib.fail(f"responder: no request on queue://{REQ}")
print(f"request at AMQP: reply_to={req.reply_to!r} correlation_id={req.correlation_id!r} "
      f"body={lib.text_of(req.body)!r}")
if req.reply_to != reply_dest:
    print(f"note: STOMP reply-to {reply_dest!r} arrived as AMQP reply-to {req.reply_to!r}")
try:
    snd = conn.create_sender(req.reply_to)
    snd.send(lib.proton_message("Antwort \u2705", correlation_id=req.correlation_id))
except Exception as e:  # noqa: BLE001
    problems.append(f"responder: send to {req.reply_to!r} failed: {e}")
try:
    f = slst.messages.get(timeout=5)
    print(f"reply at STOMP: destination={f.headers.get('destination')!r} body={f.body!r} "
          f"correlation-id={f.headers.get('correlation-id')!r}")
    if f.body != "Antwort \u2705":
        problems.append(f"reply body {f.body!r}")
    if f.headers.get("correlation-id") != corr:
        problems.append(f"reply correlation-id {f.headers.get('correlation-id')!r}, want {corr!r}")
except queue.Empty:
    problems.append(f"requester: the AMQP responder's reply, sent to the request's reply-to {req.reply_to!r}, "
                    f"never reached the STOMP subscriber of {reply_dest!r} (5s)")
conn.close()
lib.stomp_disconnect(sconn)
del requests, conn
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("request/reply STOMP -> AMQP -> STOMP reply queue: ok")
