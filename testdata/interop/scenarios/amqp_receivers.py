#!/usr/bin/python3
# Several receivers on one queue over one AMQP connection (competing
# consumers in one process), including receivers that share a link name
# (docs/protocol-mapping.md, "AMQP link names"):
#
#   proton   one BlockingConnection with two receivers named apart and two
#            more named "same-name", each on a session of its own
#   rhea     one connection with three receivers (rhea names them) and two
#            more named "same-name", each on a session of its own
#
# The queue gets 60 messages; each must arrive once, and every receiver of
# both clients must get some.
#
# (Two receivers of the same name on one session cannot be tested with
# either: Qpid Proton closes its own connection when the broker answers the
# second attach of a name ("link name already attached", proton-c's
# pn_do_attach: Proton looks links up by name), which is what its
# BlockingConnection does by default for two receivers on one address, and
# rhea keeps links by name and loses the first. The raw-frame Go test
# TestSameLinkNameAttachesEachLink covers what Junction does with it.)
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

NAME = "interop.receivers"
ADDR = f"queue://{NAME}"
N = 60
CREDIT = 3
problems = []


def proton_receivers(conn):
    """Four receivers on ADDR over conn: two on its session with names of
    their own, two on new sessions both named "same-name"."""
    from proton._utils import BlockingReceiver, Fetcher  # not re-exported by proton.utils
    rs = [conn.create_receiver(ADDR, name=f"worker-{i}", credit=CREDIT) for i in range(2)]
    for _ in range(2):
        ssn = conn.conn.session()
        ssn.open()
        fetcher = Fetcher(conn, CREDIT)
        link = conn.container.create_receiver(ssn, ADDR, name="same-name", handler=fetcher)
        rs.append(BlockingReceiver(conn, link, fetcher, credit=CREDIT))
    return rs


rhea = lib.Receiver("rhea", "queue", NAME, f'{{"credit": {CREDIT}, "receivers": 3, "same_name_sessions": 2}}')
conn = lib.proton_connect()
try:
    rhea.wait_ready()
    prs = proton_receivers(conn)
    snd = conn.create_sender(ADDR)
    for i in range(N):
        snd.send(lib.proton_message(f"job {i}"))
    # One thread drives the BlockingConnection: take what each proton
    # receiver has, in turn, until everything is in.
    from proton import Timeout
    got_proton = [[] for _ in prs]
    deadline = time.time() + 30
    while len(rhea.poll()) + sum(map(len, got_proton)) < N and time.time() < deadline:
        for i, r in enumerate(prs):
            try:
                m = r.receive(timeout=0.05)
            except Timeout:
                continue
            got_proton[i].append(lib.text_of(m.body))
            r.accept()
    rhea.drain(1.0)
finally:
    rhea.stop()
    conn.close()

bodies = [b for got in got_proton for b in got] + [m["body"] for m in rhea.messages]
per_rhea = [sum(1 for m in rhea.messages if m.get("receiver") == i) for i in range(5)]
per_proton = [len(g) for g in got_proton]
print(f"proton receivers got {per_proton}, rhea receivers {per_rhea}")
want = {f"job {i}" for i in range(N)}
if sorted(bodies) != sorted(want):
    missing = want - set(bodies)
    dups = {b for b in bodies if bodies.count(b) > 1}
    problems.append(f"{len(bodies)} delivered for {N} sent: missing {sorted(missing)[:5]}, duplicated {sorted(dups)[:5]}")
for who, counts in (("proton", per_proton), ("rhea", per_rhea)):
    for i, n in enumerate(counts):
        if n == 0:
            problems.append(f"{who} receiver {i} got nothing")
if problems:
    print("\n".join(problems))
    print(f"rhea stderr: {rhea.diag()}")
    sys.exit(1)
