#!/usr/bin/python3
# The Python clients of the interop suite behind one command line (the
# Node ones are in client.mjs, with the same interface):
#
#   client.py send CLIENT KIND NAME BODY PROPS_JSON
#       sends one text message (durable / QoS 1) with string properties
#       and returns once the broker has confirmed it
#   client.py recv CLIENT KIND NAME [OPTS_JSON]
#       subscribes, prints READY once the broker confirmed the
#       subscription, then one JSON line {"body": ..., "props": {...}} per
#       message, until stdin is closed
#
# CLIENT is proton (Qpid Proton, AMQP 1.0), stomppy (stomp.py, STOMP 1.2),
# paho (paho-mqtt, MQTT 5) or mosquitto (mosquitto_pub/mosquitto_sub,
# MQTT 5; both MQTT 3.1.1 with INTEROP_MQTT_VERSION=3.1.1); KIND is topic or queue; NAME is a dotted address.
import json
import os
import queue
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

STOMP_STD_HEADERS = {"destination", "message-id", "subscription", "ack", "content-length",
                     "content-type", "persistent", "priority", "expires", "timestamp", "redelivered"}


def emit(body, props):
    sys.stdout.write(json.dumps({"body": body, "props": props}, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def stdin_closed():
    """An event set when stdin reaches EOF (the driver's stop signal)."""
    ev = threading.Event()

    def watch():
        sys.stdin.read()
        ev.set()
    threading.Thread(target=watch, daemon=True).start()
    return ev


# ---- send ------------------------------------------------------------------

def send(client, kind, name, body, props):
    if client == "proton":
        conn = lib.proton_connect()
        try:
            snd = conn.create_sender(lib.amqp_addr(kind, name))
            snd.send(lib.proton_message(body, props))  # waits for the disposition
        finally:
            conn.close()
    elif client == "stomppy":
        conn, lst = lib.stomp_connect()
        h = dict(props)
        h["persistent"] = "true"
        lib.stomp_send(conn, lst, lib.stomp_dest(kind, name), body, headers=h)
        lib.stomp_disconnect(conn)
    elif client == "paho":
        p = lib.Paho(f"interop-send-{os.getpid()}")
        p.connect()
        p.publish(lib.mqtt_topic(name), body, props, qos=1)
        p.disconnect()
    elif client == "mosquitto":
        h, port = lib.mqtt_addr()
        argv = ["mosquitto_pub", "-h", h, "-p", str(port), "-V", "mqttv5" if lib.MQTT_V5 else "mqttv311", "-q", "1",
                "-t", lib.mqtt_topic(name), "-m", body]
        for k, v in (props.items() if lib.MQTT_V5 else ()):
            argv += ["-D", "publish", "user-property", k, v]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=15)
        if r.returncode != 0:
            raise SystemExit(f"mosquitto_pub exited {r.returncode}: {r.stdout}{r.stderr}")
    else:
        raise SystemExit(f"unknown client {client}")


# ---- recv ------------------------------------------------------------------

def recv(client, kind, name, opts):
    stop = stdin_closed()
    if client == "proton":
        from proton import Timeout
        conn = lib.proton_connect()
        rcv = conn.create_receiver(lib.amqp_addr(kind, name), credit=opts.get("credit", 100))
        print("READY", flush=True)
        while not stop.is_set():
            try:
                m = rcv.receive(timeout=0.2)
            except Timeout:
                continue
            emit(lib.text_of(m.body), {str(k): v for k, v in (m.properties or {}).items()})
            rcv.accept()
        conn.close()
    elif client == "stomppy":
        conn, lst = lib.stomp_connect()
        h = {}
        if "credit" in opts:
            h["activemq.prefetchSize"] = str(opts["credit"])
        lib.stomp_subscribe(conn, lst, lib.stomp_dest(kind, name), "1", ack="client-individual", headers=h)
        print("READY", flush=True)
        while not stop.is_set():
            try:
                f = lst.messages.get(timeout=0.2)
            except queue.Empty:
                continue
            emit(f.body, {k: v for k, v in f.headers.items() if k not in STOMP_STD_HEADERS})
            conn.ack(f.headers["ack"])
        lib.stomp_disconnect(conn)
    elif client == "paho":
        p = lib.Paho(f"interop-recv-{os.getpid()}")
        p.connect()
        p.subscribe(lib.mqtt_topic(name), qos=1)
        print("READY", flush=True)
        while not stop.is_set():
            try:
                m = p.messages.get(timeout=0.2)
            except queue.Empty:
                continue
            emit(lib.text_of(m.payload), lib.paho_props(m))
        p.disconnect()
    elif client == "mosquitto":
        h, port = lib.mqtt_addr()
        sub = subprocess.Popen(["stdbuf", "-oL", "mosquitto_sub", "-d", "-h", h, "-p", str(port),
                                "-V", "mqttv5" if lib.MQTT_V5 else "mqttv311", "-q", "1", "-t", lib.mqtt_topic(name), "-F", "%j"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                               errors="replace")
        threading.Thread(target=lambda: (stop.wait(), sub.terminate()), daemon=True).start()
        for line in sub.stdout:
            line = line.rstrip("\n")
            if line.startswith("{"):
                j = json.loads(line)
                emit(j.get("payload"), (j.get("properties") or {}).get("user-properties") or {})
            elif "received SUBACK" in line:
                print("READY", flush=True)
            else:
                lib.log("mosquitto_sub:", line)
        sub.wait()
    else:
        raise SystemExit(f"unknown client {client}")


def main():
    if len(sys.argv) >= 7 and sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], json.loads(sys.argv[6]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "recv":
        recv(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})
    else:
        raise SystemExit(__doc__ or "usage: client.py send|recv CLIENT KIND NAME ...")


if __name__ == "__main__":
    main()
