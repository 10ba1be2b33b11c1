#!/usr/bin/env python3
"""UDP and TCP flows from chosen source ports for the nilb netns harness
(Python 3 stdlib only; TCP requests use client.py's HTTP connection).

Subcommands
-----------
udp-serve  --name N --vip VIP --port P [--health-port H]
           A DNS-style UDP server: one UNCONNECTED socket bound to VIP:P answers
           every datagram with "<name>" (source: the VIP). A datagram "connect"
           makes it open a second socket bound to VIP:P (SO_REUSEADDR) and
           connected to that client, as QUIC-style servers do; from then on the
           kernel hands that client's datagrams to it, and it answers
           "<name> connected". --health-port: a TCP listener on 0.0.0.0:H that
           accepts and closes (for a `tcp` health check: it dies with the
           server). Prints "udp server N listening on VIP:P at=EPOCH"; SIGTERM
           stops it ("stopped at=EPOCH").

udp-burst  --host VIP --port P --count N --sport-base B [--timeout S] [--out FILE]
           One query from each of N source ports (B .. B+N-1), about 1 ms apart
           (answers are collected while sending: round trips are exact to
           about 1 ms), then answers collected until every one came or S
           seconds passed. Prints one JSON line {"ok", "lost", "by_backend",
           "rtt_ms": {"median", "p90", "max"}}; --out adds "queries":
           [[sport, backend-or-null, ms-or-null], ...]. Exit 0 if none was lost.

udp-query  --host VIP --port P --sport S [--payload TEXT] [--timeout S]
           One datagram from source port S; prints {"answer": text-or-null, "ms": ...}.

lookup     --nilb PATH --config CFG --pin-dir DIR --result FILE --proto udp|tcp
           [--client-ip IP] [--vip VIP] [--port P] [--nodes ip=name,...]
           For each query of a udp-burst --out FILE: `nilb lookup --live --json`
           (the running balancer's table) and compare its first hop with the
           node that answered. Prints one JSON line {"first_hop": n (answered by
           the bucket's first hop), "other": n, "lost": n, "failed": n (lookup
           failed), "examples": [...], "with_second_hop": n (buckets with a
           second hop), "rtt_ms_second_hop" and "rtt_ms_no_second_hop" (median
           round trip of the answered queries of each kind)}.

tcp-close  --host VIP --port P --sports LIST [--timeout S]
           One HTTP request per source port with "Connection: close": the
           server closes first, so ITS end of the connection goes to TIME_WAIT.
           Prints {"by_sport": {sport: backend-or-error}}.

tcp-hold   --host VIP --port P (--sports LIST | --sport-base B --count N
           [--want-backend NAME --want-count K]) --state FILE --go FILE --out FILE
           [--timeout S] [--go-timeout S]
           Keep-alive HTTP connections from the given source ports; one request
           each (its backend recorded; with --want-backend only the first K that
           landed there are kept, the others closed), --state FILE written, then
           (after --go FILE appears) one more request on every connection, all at
           once, each bounded by --timeout. --out: {"ok", "reset", "timeout",
           "other", "per_connection": [{"sport", "first", "then", "kind", "ms"}]}
           where kind is ok, reset (RST: ConnectionResetError, also EOF and
           broken pipe) or timeout. Exit 0 if every connection answered.

rst-probe  --host VIP --port P --sports LIST [--count N] [--timeout S] [--out FILE]
           Per source port, N times: one bare TCP ACK (no connection: a raw
           socket, random sequence number) to VIP:P, and the time until a RST
           from VIP:P to that port arrives (`unknown_flow: rst`: the last hop
           of the bucket's chain answers), at most S seconds each; probes are
           ~2 ms apart. Prints {"sent", "answered", "rtt_us": {sport: [us...]}}.
           Exit 0 if every probe was answered.

Every socket operation has a timeout; every loop is bounded by count and time.
"""

import argparse
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import Conn, backend_of, classify, write_json  # noqa: E402

RESETS = ("reset", "broken_pipe", "eof")


def emit(obj, out=None, extra=None):
    line = dict(obj)
    if out:
        full = dict(obj)
        full.update(extra or {})
        write_json(out, full)
    print(json.dumps(line, sort_keys=True), flush=True)


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


# ------------------------------------------------------------------ UDP server


def cmd_udp_serve(a):
    main_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    main_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    main_sock.bind((a.vip, a.port))
    socks = [main_sock]
    connected = {}
    health = None
    if a.health_port:
        health = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        health.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        health.bind(("0.0.0.0", a.health_port))
        health.listen(64)
        socks.append(health)
    stop = threading.Event()

    def on_signal(_s, _f):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, on_signal)
    print("udp server %s listening on %s:%d at=%.6f" % (a.name, a.vip, a.port, time.time()), flush=True)
    name = a.name.encode()
    while not stop.is_set():
        try:
            ready, _, _ = select.select(socks, [], [], 0.2)
        except InterruptedError:
            continue
        for s in ready:
            if s is health:
                try:
                    c, _ = health.accept()
                    c.close()
                except OSError:
                    pass
                continue
            try:
                data, peer = s.recvfrom(2048)
            except OSError:
                continue
            if s is main_sock and data.startswith(b"connect") and peer not in connected:
                c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                c.bind((a.vip, a.port))
                c.connect(peer)
                connected[peer] = c
                socks.append(c)
                c.send(name + b" connected")
                continue
            if s is main_sock:
                s.sendto(name, peer)
            else:
                s.send(name + b" connected")
    closed = time.time()
    for s in socks:
        s.close()
    print("udp server %s stopped at=%.6f" % (a.name, closed), flush=True)
    return 0


# ------------------------------------------------------------------ UDP clients


def udp_socket(sport):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", sport))
    return s


def cmd_udp_burst(a):
    socks = {}
    sent = {}
    got = {}

    def collect(wait):
        ready, _, _ = select.select(list(socks), [], [], wait)
        now = time.monotonic()
        for s in ready:
            try:
                data, _ = s.recvfrom(2048)
            except OSError:
                continue
            sport = socks[s]
            if sport not in got:
                got[sport] = (data.decode("utf-8", "replace").split()[0], (now - sent[sport]) * 1000)

    try:
        for i in range(a.count):
            sport = a.sport_base + i
            s = udp_socket(sport)
            s.setblocking(False)
            socks[s] = sport
            s.sendto(b"query %d" % sport, (a.host, a.port))
            sent[sport] = time.monotonic()
            collect(0.001)
        deadline = time.monotonic() + a.timeout
        while len(got) < a.count and time.monotonic() < deadline:
            collect(max(0.0, deadline - time.monotonic()))
    finally:
        for s in socks:
            s.close()
    by = {}
    for name, _ in got.values():
        by[name] = by.get(name, 0) + 1
    rtts = [ms for _, ms in got.values()]
    res = {"ok": len(got), "lost": a.count - len(got), "by_backend": by,
           "rtt_ms": {"median": percentile(rtts, 0.5), "p90": percentile(rtts, 0.9),
                      "max": round(max(rtts), 3) if rtts else None}}
    queries = [[sp, got[sp][0] if sp in got else None, round(got[sp][1], 3) if sp in got else None]
               for sp in sorted(sent)]
    emit(res, a.out, {"queries": queries})
    return 0 if res["lost"] == 0 else 1


def cmd_udp_query(a):
    s = udp_socket(a.sport)
    s.settimeout(a.timeout)
    t = time.monotonic()
    answer = None
    try:
        s.sendto(a.payload.encode(), (a.host, a.port))
        data, _ = s.recvfrom(2048)
        answer = data.decode("utf-8", "replace")
    except OSError:
        pass
    finally:
        s.close()
    print(json.dumps({"answer": answer, "ms": round((time.monotonic() - t) * 1000, 3)}), flush=True)
    return 0 if answer is not None else 1


def cmd_lookup(a):
    with open(a.result) as f:
        queries = json.load(f)["queries"]
    names = dict(x.split("=", 1) for x in a.nodes.split(",") if "=" in x)

    def one(q):
        sport, backend = q[0], q[1]
        cmd = [a.nilb, "lookup", "--json", "--config", a.config, "--live", "--pin-dir", a.pin_dir,
               "%s:%d" % (a.client_ip, sport), "%s:%d" % (a.vip, a.port), a.proto]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            d = json.loads(p.stdout)
            first, second = d["first_hop"], d.get("second_hop")
        except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return sport, backend, None, None
        return sport, backend, names.get(str(first), str(first)), second

    with ThreadPoolExecutor(max_workers=8) as ex:
        rows = list(ex.map(one, queries))
    rtt = {q[0]: q[2] for q in queries}
    res = {"first_hop": 0, "other": 0, "lost": 0, "failed": 0, "examples": [], "with_second_hop": 0}
    rtts = {True: [], False: []}
    for sport, backend, first, second in rows:
        if first is not None:
            res["with_second_hop"] += bool(second)
            if rtt.get(sport) is not None:
                rtts[bool(second)].append(rtt[sport])
        if first is None:
            res["failed"] += 1
        elif backend is None:
            res["lost"] += 1
        elif backend == first:
            res["first_hop"] += 1
        else:
            res["other"] += 1
            if len(res["examples"]) < 5:
                res["examples"].append("sport %d answered by %s, first hop %s" % (sport, backend, first))
    res["rtt_ms_second_hop"] = percentile(rtts[True], 0.5)
    res["rtt_ms_no_second_hop"] = percentile(rtts[False], 0.5)
    print(json.dumps(res, sort_keys=True), flush=True)
    return 0


# ------------------------------------------------------------------ TCP


def sports_of(a):
    if a.sports:
        return [int(x) for x in a.sports.split(",") if x]
    return list(range(a.sport_base, a.sport_base + a.count))


def cmd_tcp_close(a):
    by = {}
    for sport in sports_of(a):
        try:
            c = Conn(a.host, a.port, sport, a.timeout)
        except Exception as e:  # noqa: BLE001 - recorded
            by[sport] = "error: " + classify(e)
            continue
        try:
            _, headers, body = c.request(keepalive=False)
            by[sport] = backend_of(headers, body)
            # the server closes first; read its FIN, then close our end
            deadline = time.monotonic() + a.timeout
            while time.monotonic() < deadline:
                c.sock.settimeout(max(0.01, deadline - time.monotonic()))
                if not c.sock.recv(4096):
                    break
        except Exception as e:  # noqa: BLE001 - recorded
            by[sport] = "error: " + classify(e)
        finally:
            c.close()
    print(json.dumps({"by_sport": by}, sort_keys=True), flush=True)
    return 0 if all(not v.startswith("error") for v in by.values()) else 1


def cmd_tcp_hold(a):
    conns = []
    discarded = {}
    t_end = time.monotonic() + a.max_seconds
    for sport in sports_of(a):
        if a.want_backend and len(conns) >= a.want_count:
            break
        if time.monotonic() > t_end:
            break
        try:
            c = Conn(a.host, a.port, sport, a.timeout)
            _, headers, body = c.request()
            name = backend_of(headers, body)
        except Exception as e:  # noqa: BLE001 - recorded
            discarded[sport] = classify(e)
            continue
        if a.want_backend and name != a.want_backend:
            discarded[sport] = name
            c.close()
            continue
        conns.append({"conn": c, "sport": sport, "first": name})
    write_json(a.state, {"established": len(conns), "sports": [x["sport"] for x in conns],
                         "first": {str(x["sport"]): x["first"] for x in conns}, "discarded": discarded})
    deadline = time.monotonic() + a.go_timeout
    while not os.path.exists(a.go) and time.monotonic() < deadline:
        time.sleep(0.05)

    def again(x):
        t = time.monotonic()
        try:
            _, headers, body = x["conn"].request()
            x["then"], x["kind"] = backend_of(headers, body), "ok"
        except Exception as e:  # noqa: BLE001 - recorded
            k = classify(e)
            x["then"], x["kind"] = None, "reset" if k in RESETS else k
        x["ms"] = round((time.monotonic() - t) * 1000, 3)
        x["conn"].close()
        del x["conn"]
        return x

    with ThreadPoolExecutor(max_workers=max(1, len(conns))) as ex:
        per = list(ex.map(again, conns))
    kinds = {}
    for x in per:
        kinds[x["kind"]] = kinds.get(x["kind"], 0) + 1
    res = {"ok": kinds.get("ok", 0), "reset": kinds.get("reset", 0), "timeout": kinds.get("timeout", 0),
           "other": sum(v for k, v in kinds.items() if k not in ("ok", "reset", "timeout")),
           "established": len(conns)}
    emit(res, a.out, {"per_connection": per})
    return 0 if res["ok"] == len(per) else 1


def tcp_checksum(src, dst, seg):
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(seg))
    data = pseudo + seg
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def cmd_rst_probe(a):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((a.host, a.port))
    me = probe.getsockname()[0]
    probe.close()
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    raw.settimeout(a.timeout)
    vip = socket.inet_aton(a.host)
    rtt, sent, answered = {}, 0, 0
    t_end = time.monotonic() + 120
    for sport in [int(x) for x in a.sports.split(",") if x]:
        rtt[str(sport)] = []
        for _ in range(a.count):
            if time.monotonic() > t_end:
                break
            seq = random.getrandbits(32)
            hdr = struct.pack("!HHIIBBHHH", sport, a.port, seq, random.getrandbits(32), 5 << 4, 0x10, 1024, 0, 0)
            hdr = hdr[:16] + struct.pack("!H", tcp_checksum(me, a.host, hdr)) + hdr[18:]
            t0 = time.perf_counter_ns()
            raw.sendto(hdr, (a.host, 0))
            sent += 1
            deadline = time.monotonic() + a.timeout
            while time.monotonic() < deadline:
                try:
                    pkt = raw.recv(2048)
                except socket.timeout:
                    break
                t1 = time.perf_counter_ns()
                ihl = (pkt[0] & 15) * 4
                if pkt[12:16] != vip or len(pkt) < ihl + 20:
                    continue
                sp, dp = struct.unpack("!HH", pkt[ihl:ihl + 4])
                if sp == a.port and dp == sport and pkt[ihl + 13] & 0x04:
                    rtt[str(sport)].append(round((t1 - t0) / 1000, 1))
                    answered += 1
                    break
            time.sleep(0.002)
    emit({"sent": sent, "answered": answered}, a.out, {"rtt_us": rtt})
    return 0 if answered == sent else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("udp-serve")
    p.add_argument("--name", required=True)
    p.add_argument("--vip", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--health-port", type=int, default=0)
    p = sub.add_parser("udp-burst")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--sport-base", type=int, required=True)
    p.add_argument("--timeout", type=float, default=1.5)
    p.add_argument("--out")
    p = sub.add_parser("udp-query")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sport", type=int, required=True)
    p.add_argument("--payload", default="query")
    p.add_argument("--timeout", type=float, default=1.0)
    p = sub.add_parser("lookup")
    p.add_argument("--nilb", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--pin-dir", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--proto", default="udp")
    p.add_argument("--client-ip", default="10.77.0.2")
    p.add_argument("--vip", default="10.77.0.100")
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--nodes", default="")
    for name in ("tcp-close", "tcp-hold"):
        p = sub.add_parser(name)
        p.add_argument("--host", required=True)
        p.add_argument("--port", type=int, default=80)
        p.add_argument("--sports", default="")
        p.add_argument("--sport-base", type=int, default=0)
        p.add_argument("--count", type=int, default=0)
        p.add_argument("--timeout", type=float, default=2.0)
        if name == "tcp-hold":
            p.add_argument("--want-backend")
            p.add_argument("--want-count", type=int, default=0)
            p.add_argument("--state", required=True)
            p.add_argument("--go", required=True)
            p.add_argument("--go-timeout", type=float, default=60.0)
            p.add_argument("--max-seconds", type=float, default=30.0, help="budget for opening connections")
            p.add_argument("--out", required=True)
    p = sub.add_parser("rst-probe")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, default=80)
    p.add_argument("--sports", required=True)
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--timeout", type=float, default=1.0)
    p.add_argument("--out")
    a = ap.parse_args()
    return {"rst-probe": cmd_rst_probe, "udp-serve": cmd_udp_serve, "udp-burst": cmd_udp_burst, "udp-query": cmd_udp_query,
            "lookup": cmd_lookup, "tcp-close": cmd_tcp_close, "tcp-hold": cmd_tcp_hold}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
