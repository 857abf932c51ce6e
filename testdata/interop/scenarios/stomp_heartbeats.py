#!/usr/bin/python3
# STOMP heart-beats as the client asks (README, --stomp-heart-beat-min,
# default 1s), with stomp.py:
#   - a client asking heartbeats=(1000, 1000) gets heart-beat:1000,1000 in
#     CONNECTED, and one asking (500, 500) gets the 1s floor; both stay
#     connected through 3.5s of beats only (stomp.py drops the connection
#     itself if the broker's beats stop coming for 1.5s) and then still
#     send and receive;
#   - a client that promised beats every second and sends nothing gets
#     ERROR "heart-beat timeout" about 1.5s later and the connection closes.
import os
import queue
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

NAME = "/queue/interop.heartbeats"
problems = []


class Listener(lib.StompListener):
    def __init__(self):
        super().__init__()
        self.connected = queue.Queue()
        self.timeouts = []
        self.disconnects = []

    def on_connected(self, frame):
        self.connected.put(frame.headers.get("heart-beat"))

    def on_heartbeat_timeout(self):
        self.timeouts.append(time.time())

    def on_disconnected(self):
        self.disconnects.append(time.time())


def beating_client(asks, want):
    import stomp
    conn = stomp.Connection12([lib.stomp_addr()], heartbeats=asks)
    lst = Listener()
    conn.set_listener("l", lst)
    conn.connect(wait=True)
    hb = lst.connected.get(timeout=10)
    if hb != want:
        problems.append(f"stomp.py asking {asks}: CONNECTED heart-beat:{hb}, want {want}")
    return conn, lst


def silent_client():
    """A raw socket that promises a beat a second and stays silent: the
    time until the broker's ERROR, and the frame."""
    h, p = lib.stomp_addr()
    s = socket.create_connection((h, p), timeout=10)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nheart-beat:1000,0\n\n\x00")
    buf = b""
    while b"\x00" not in buf:
        buf += s.recv(4096)
    connected, _, rest = buf.partition(b"\x00")
    t0 = time.time()
    if not connected.lstrip(b"\r\n").startswith(b"CONNECTED\n"):
        problems.append(f"raw client: {connected!r}")
        return
    buf = rest
    s.settimeout(8)
    try:
        while b"\x00" not in buf.lstrip(b"\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except socket.timeout:
        problems.append("a silent client was still connected 8s after promising beats every second")
        return
    took = time.time() - t0
    frame = buf.lstrip(b"\r\n").decode("utf-8", "replace")
    if not frame.startswith("ERROR\n") or "message:heart-beat timeout" not in frame:
        problems.append(f"silent client got {frame!r}")
    if not 1.4 <= took <= 6:
        problems.append(f"silent client disconnected after {took:.2f}s, want about 1.5s")
    print(f"silent client: ERROR heart-beat timeout after {took:.2f}s")
    s.close()


c1, l1 = beating_client((1000, 1000), "1000,1000")
c2, l2 = beating_client((500, 500), "1000,1000")
silent = threading.Thread(target=silent_client)
silent.start()
time.sleep(3.5)  # beats only, on both sides, for three and a half intervals
silent.join(timeout=15)
for conn, lst, asks in ((c1, l1, (1000, 1000)), (c2, l2, (500, 500))):
    if lst.timeouts or lst.disconnects or not conn.is_connected():
        problems.append(f"stomp.py asking {asks}: lost the connection (heart-beat timeouts {len(lst.timeouts)}, "
                        f"disconnects {len(lst.disconnects)}, errors {lst.errors})")
        continue
    try:
        lib.stomp_subscribe(conn, lst, NAME, f"s-{asks[0]}")
        lib.stomp_send(conn, lst, NAME, f"after beats {asks[0]}")
        f = lst.messages.get(timeout=10)
        if f.body != f"after beats {asks[0]}":
            problems.append(f"stomp.py asking {asks}: got {f.body!r}")
    except Exception as e:  # noqa: BLE001
        problems.append(f"stomp.py asking {asks}: after 3.5s of heart-beats: {e!r}")
    lib.stomp_disconnect(conn)
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("stomp.py clients at 1s beats stayed connected; a silent one was dropped")
