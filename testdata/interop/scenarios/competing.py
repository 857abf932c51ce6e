#!/usr/bin/python3
# Competing consumers across protocols: Qpid Proton (AMQP 1.0), stomp.py
# (STOMP 1.2) and rhea (AMQP 1.0, Node) consume one queue; 300 messages
# sent to it (by stomp.py and proton, 150 each) must each be
# delivered exactly once in total, and every consumer must get some.
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

NAME = "interop.compete"
N = 300
consumers = ["proton", "stomppy", "rhea"]
# A small window, so that no consumer takes the whole queue in one go.
rs = [lib.Receiver(c, "queue", NAME, '{"credit": 10}') for c in consumers]
problems = []
try:
    for r in rs:
        r.wait_ready()
    # Two producers in parallel, stomp.py (0..149) and proton (150..299).
    def produce_stomp(lo, hi):
        conn, lst = lib.stomp_connect()
        for i in range(lo, hi):
            conn.send(f"/queue/{NAME}", f"msg {i} \u00e9", headers={"persistent": "true", "seq": str(i)})
        lib.stomp_disconnect(conn)  # with a receipt: everything before it is in

    def produce_proton(lo, hi):
        conn = lib.proton_connect()
        snd = conn.create_sender(f"queue://{NAME}")
        for i in range(lo, hi):
            snd.send(lib.proton_message(f"msg {i} \u00e9", {"seq": str(i)}))
        conn.close()

    t0 = time.time()
    ts = [threading.Thread(target=produce_stomp, args=(0, 150)),
          threading.Thread(target=produce_proton, args=(150, 300))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    print(f"sent {N} in {time.time() - t0:.1f}s")
    # Gather until all 300 arrived in total, then a quiet second for duplicates.
    deadline = time.time() + 30
    while sum(len(r.messages) for r in rs) < N and time.time() < deadline:
        for r in rs:
            r.poll()
        time.sleep(0.05)
    for r in rs:
        r.drain(1.0)
finally:
    for r in rs:
        r.stop()

seen = {}
for c, r in zip(consumers, rs):
    for m in r.messages:
        seen.setdefault(m["body"], []).append(c)
counts = {c: len(r.messages) for c, r in zip(consumers, rs)}
print(f"per consumer: {counts}, total {sum(counts.values())}")
want = {f"msg {i} \u00e9" for i in range(N)}
missing = sorted(want - set(seen), key=lambda b: int(b.split()[1]))
dups = {b: cs for b, cs in seen.items() if len(cs) > 1}
extra = set(seen) - want
if missing:
    problems.append(f"{len(missing)} messages never delivered, e.g. {missing[:5]}")
if dups:
    problems.append(f"{len(dups)} messages delivered more than once, e.g. {list(dups.items())[:5]}")
if extra:
    problems.append(f"unexpected bodies: {list(extra)[:5]}")
for c, n in counts.items():
    if n == 0:
        problems.append(f"{c} got nothing")
if problems:
    print("\n".join(problems))
    for c, r in zip(consumers, rs):
        print(f"{c} stderr: {r.diag()}")
    sys.exit(1)
print(f"{N} messages, each delivered exactly once across AMQP (proton), STOMP (stomp.py) and AMQP (rhea)")
