#!/usr/bin/python3
# Failover of one client between the two brokers of a shared-store pair
# (docs/ha.md, "Clients"): starts its own pair (INTEROP_JUNCTION, with
# --ha shared-store on a temporary data directory), runs the client's
# snippet with both brokers listed, the backup first (it opens no
# listener, so the client moves on to the live one), kills the live broker
# with SIGKILL once the client has received "one" without acknowledging
# it, and expects the client to fail over: "one" again, flagged
# redelivered (not checked here for MQTT, whose clients acknowledge by
# themselves; TestHAMQTTRedeliveryFlaggedDup and
# TestHAMQTT5RedeliveryFlaggedDup in cmd/junction check DUP with the
# PUBACK withheld), then "two" sent and received through the new live
# broker.
#
# usage: failover.py stomppy|paho|proton|rhea|mqttjs|stompjs
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402

client = sys.argv[1]
PROTO = {"stomppy": "stomp", "paho": "mqtt", "proton": "amqp", "rhea": "amqp", "mqttjs": "mqtt", "stompjs": "ws"}[client]
binary = os.environ.get("INTEROP_JUNCTION")
if not binary:
    lib.fail("INTEROP_JUNCTION is not set (run the scenario through ./run)")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def readyz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def ha_status(port):
    """The ha section's status of /api/v1/broker: whom a backup waits for
    (its /readyz says only its role)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/broker", timeout=2) as r:
            return json.loads(r.read().decode()).get("ha", {}).get("status", "")
    except (OSError, ValueError):
        return ""


def wait_for(what, cond, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    lib.fail(f"{what} within {timeout}s")


tmp = tempfile.mkdtemp(prefix="junction-failover-")
ports = [dict(zip(("stomp", "mqtt", "amqp", "ws", "console"), free_ports(5))) for _ in range(2)]
brokers = []


def start(i):
    p = ports[i]
    log = open(os.path.join(tmp, f"broker{i}.log"), "ab")
    return subprocess.Popen([binary, "--ha", "shared-store", "--ha-lock-poll", "100ms", "--data-dir", os.path.join(tmp, "data"),
                             "--stomp", f"127.0.0.1:{p['stomp']}", "--mqtt", f"127.0.0.1:{p['mqtt']}",
                             "--amqp", f"127.0.0.1:{p['amqp']}", "--ws", f"127.0.0.1:{p['ws']}", "--all", "",
                             "--console", f"127.0.0.1:{p['console']}", "--log-level", "info", "--log-format", "json"],
                            stdout=log, stderr=subprocess.STDOUT)


def logs():
    out = []
    for i in range(2):
        path = os.path.join(tmp, f"broker{i}.log")
        if os.path.exists(path):
            out.append(f"broker {i}:\n" + "".join(open(path, errors="replace").readlines()[-15:]))
    return "\n".join(out)


proc = None
try:
    brokers.append(start(0))
    wait_for("broker 0 live", lambda: readyz(ports[0]["console"])[0] == 200)
    brokers.append(start(1))
    wait_for("broker 1 a backup", lambda: readyz(ports[1]["console"]) == (503, "not ready: backup\n")
             and ha_status(ports[1]["console"]).startswith("backup, waiting for the store lock"))
    # The backup first: the client must skip it.
    addrs = ",".join(f"127.0.0.1:{ports[i][PROTO]}" for i in (1, 0))
    dest = f"failover.{client}.{os.getpid()}"
    if client in ("stomppy", "paho", "proton"):
        argv = ["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                os.path.join(lib.HERE, "failover_clients.py"), client, dest, addrs]
    else:
        argv = ["node", os.path.join(lib.HERE, "failover_clients.mjs"), client, dest, addrs]
    # The clients log reconnection attempts on stderr.
    client_err = open(os.path.join(tmp, "client.err"), "w+")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=client_err, text=True, cwd=lib.HERE)

    def client_log():
        client_err.seek(0)
        return "client stderr:\n" + "".join(client_err.readlines()[-20:])

    line = proc.stdout.readline().strip()
    if line != "READY":
        lib.fail(f"{client}: expected READY, got {line!r}\n{proc.stdout.read()}\n{client_log()}\n{logs()}")
    brokers[0].send_signal(signal.SIGKILL)
    brokers[0].wait()
    killed = time.time()
    out = proc.stdout.read()
    rc = proc.wait(timeout=90)
    done = [l for l in out.splitlines() if l.startswith("DONE ")]
    if rc != 0 or not done:
        lib.fail(f"{client}: exit {rc}\n{out}\n{client_log()}\n{logs()}")
    result = json.loads(done[0][5:])
    if PROTO != "mqtt" and result["redelivered"] is not True:
        lib.fail(f"{client}: the unacknowledged message came back without the redelivered flag: {result}\n{client_log()}")
    status, body = readyz(ports[1]["console"])
    if status != 200:
        lib.fail(f"broker 1 did not take over: {status} {body}\n{logs()}")
    print(f"{client}: failed over to the backup and went on ({time.time() - killed:.1f}s after the kill); {result}")
finally:
    if proc and proc.poll() is None:
        proc.kill()
    for b in brokers:
        if b.poll() is None:
            b.send_signal(signal.SIGTERM)
            try:
                b.wait(timeout=15)
            except subprocess.TimeoutExpired:
                b.kill()
    shutil.rmtree(tmp, ignore_errors=True)
