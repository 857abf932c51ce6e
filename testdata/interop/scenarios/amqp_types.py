#!/usr/bin/python3
# AMQP values keep their types (docs/protocol-mapping.md, "AMQP values"),
# with Qpid Proton:
#
#   amqp_types.py send QUEUE
#       sends one durable message per message-id type (ulong, uuid,
#       binary, string; correlation-ids of the next type) with a value of
#       every AMQP type in the application properties, the message
#       annotations and the delivery annotations
#   amqp_types.py check QUEUE [recovered]
#       receives them: every value of the same Proton type and value, the
#       ids of their types, no delivery annotations (they are for one
#       hop); with "recovered" (after a broker restart) each must also be
#       flagged as a possible redelivery: delivery-count >= 1 and
#       first-acquirer false
#   amqp_types.py mapping
#       sends the values to a topic that stomp.py and paho (MQTT 5)
#       subscribe to: STOMP gets every value core carries as text, MQTT
#       the ones that are strings in core, neither the rest
#
# The runner runs send and check in one scenario, with a broker restart
# between them in another. (Proton has no footer; go-amqp and the raw
# client test that in Go.)
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lib  # noqa: E402


def every_type():
    from proton import (UNDESCRIBED, Array, Data, Described, byte, char, decimal32, decimal64, decimal128,
                        float32, int32, short, symbol, timestamp, ubyte, uint, ulong, ushort)
    return {
        "boolean": True, "ubyte": ubyte(200), "ushort": ushort(60000), "uint": uint(4000000000),
        "ulong": ulong(7), "ulong-big": ulong(2**63 + 5), "byte": byte(-7), "short": short(-300),
        "int": int32(-7), "long": -9000000000000, "float": float32(1.5), "double": -2.25,
        "decimal32": decimal32(0x22500001), "decimal64": decimal64(0x223800000000002A),
        "decimal128": decimal128(b"\x22\x08" + b"\x00" * 13 + b"\x7b"),
        "char": char("\u00e9"), "time": timestamp(1700000000123),
        "uuid": uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6"), "binary": b"\x00\x01\x02\xff",
        "string": "gr\u00fc\u00dfe \u65e5\u672c", "symbol": symbol("a-symbol"), "null": None,
        "list": [int32(1), "two", None], "map": {"k": short(3), symbol("s"): False},
        "array": Array(UNDESCRIBED, Data.INT, 1, -2, 3),
        "described": Described(symbol("com.example:point"), [1.0, 2.0]),
    }


def ids():
    from proton import ulong
    return [ulong(2**63 + 1), uuid.UUID("01020300-0000-0000-0000-000000000000"), b"\x09\x08\x07", "id-string"]


def same(got, want):
    """Equal, and of the same (Proton) type, all the way down."""
    if type(got) is not type(want):
        return False
    if isinstance(want, dict):
        return len(got) == len(want) and all(
            any(type(gk) is type(k) and gk == k and same(gv, v) for gk, gv in got.items()) for k, v in want.items())
    if isinstance(want, list):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    return got == want


def describe(v):
    return f"{type(v).__name__} {v!r}"


def typed_message(i):
    from proton import symbol
    vals = every_type()
    all_ids = ids()
    m = lib.proton_message(f"typed {i}", vals, id=all_ids[i], correlation_id=all_ids[(i + 1) % len(all_ids)])
    m.annotations = {symbol("x-opt-ma-" + k): v for k, v in vals.items()}
    m.instructions = {symbol("x-opt-da-" + k): v for k, v in vals.items()}
    return m


def as_read(m):
    """m encoded and decoded by Proton alone: what a receiver gets of it
    with no broker in between (Proton reads a ulong message-id as int)."""
    from proton import Message
    out = Message()
    out.decode(m.encode())
    return out


def send(queue):
    conn = lib.proton_connect()
    try:
        snd = conn.create_sender(f"queue://{queue}")
        for i in range(len(ids())):
            snd.send(typed_message(i))  # waits for the accepted disposition
    finally:
        conn.close()
    print(f"sent {len(ids())} typed messages to {queue}")


def check(queue, recovered):
    from proton import Timeout, symbol
    vals = every_type()
    problems = []
    conn = lib.proton_connect()
    try:
        rcv = conn.create_receiver(f"queue://{queue}", credit=10)
        for i in range(len(ids())):
            want = as_read(typed_message(i))
            try:
                m = rcv.receive(timeout=10)
            except Timeout:
                problems.append(f"message {i} never arrived")
                break
            rcv.accept()
            what = f"message {i}"
            if lib.text_of(m.body) != f"typed {i}":
                problems.append(f"{what}: body {m.body!r}")
            props = m.properties or {}
            if not same(want.properties, vals):
                problems.append(f"{what}: Proton itself does not read back what it sent: {want.properties}")
            for k, v in vals.items():
                if k not in props or not same(props[k], v):
                    problems.append(f"{what}: application property {k}: {describe(props.get(k))}, want {describe(v)}")
            if set(props) != set(vals):
                problems.append(f"{what}: application properties {sorted(props)}")
            ann = m.annotations or {}
            for k, v in vals.items():
                key = symbol("x-opt-ma-" + k)
                if key not in ann or not same(ann[key], v):
                    problems.append(f"{what}: message annotation {key}: {describe(ann.get(key))}, want {describe(v)}")
            if m.instructions:
                problems.append(f"{what}: delivery annotations passed on: {sorted(m.instructions)}")
            if not same(m.id, want.id) or not same(m.correlation_id, want.correlation_id):
                problems.append(f"{what}: ids {describe(m.id)}, {describe(m.correlation_id)}; "
                                f"want {describe(want.id)}, {describe(want.correlation_id)}")
            if recovered and (m.delivery_count < 1 or m.first_acquirer):
                problems.append(f"{what}: recovered after a restart but delivery-count {m.delivery_count}, "
                                f"first-acquirer {m.first_acquirer}")
    finally:
        conn.close()
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"{len(ids())} messages with every type intact" + (" after the restart" if recovered else ""))


def mapping():
    import queue as q
    name = "interop.types.mapping"
    text = {
        "boolean": "true", "ubyte": "200", "ushort": "60000", "uint": "4000000000", "ulong": "7",
        "ulong-big": "9223372036854775813", "byte": "-7", "short": "-300", "int": "-7", "long": "-9000000000000",
        "float": "1.5", "double": "-2.25", "char": "\u00e9", "time": "1700000000123",
        "uuid": "f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "binary": "AAEC/w==", "string": "gr\u00fc\u00dfe \u65e5\u672c",
        "symbol": "a-symbol", "null": "",
    }
    amqp_only = ["decimal32", "decimal64", "decimal128", "list", "map", "array", "described"]
    mqtt_strings = {k: text[k] for k in ("char", "uuid", "string", "symbol", "ulong-big")}
    problems = []
    sconn, lst = lib.stomp_connect()
    lib.stomp_subscribe(sconn, lst, f"/topic/{name}", "1")
    paho = lib.Paho(f"interop-types-{os.getpid()}")
    paho.connect()
    paho.subscribe(lib.mqtt_topic(name), qos=1)
    try:
        conn = lib.proton_connect()
        conn.create_sender(f"topic://{name}").send(lib.proton_message("mapped", every_type()))
        conn.close()
        try:
            f = lst.messages.get(timeout=10)
            for k, v in text.items():
                if f.headers.get(k) != v:
                    problems.append(f"STOMP header {k}: {f.headers.get(k)!r}, want {v!r}")
            for k in amqp_only:
                if k in f.headers:
                    problems.append(f"STOMP header {k}: {f.headers[k]!r}, want none")
        except q.Empty:
            problems.append("stomp.py got nothing")
        try:
            m = paho.messages.get(timeout=10)
            got = lib.paho_props(m)
            if got != mqtt_strings:
                problems.append(f"MQTT 5 user properties {got}, want {mqtt_strings}")
        except q.Empty:
            problems.append("paho got nothing")
    finally:
        lib.stomp_disconnect(sconn)
        paho.disconnect()
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print("STOMP headers and MQTT 5 user properties as documented")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "send" and len(sys.argv) == 3:
        send(sys.argv[2])
    elif cmd == "check" and len(sys.argv) in (3, 4):
        check(sys.argv[2], len(sys.argv) == 4 and sys.argv[3] == "recovered")
    elif cmd == "mapping":
        mapping()
    else:
        raise SystemExit("usage: amqp_types.py send QUEUE | check QUEUE [recovered] | mapping")
