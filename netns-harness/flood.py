#!/usr/bin/env python3
"""A bounded flood of TCP SYNs from chosen source addresses (stdlib only).

    flood.py --dst V --port 80 --src A[/N] [--src ...] --count C --rate R
             [--max-seconds S] [--sport-base P] [--started FILE]

Sends C SYNs (valid IPv4 and TCP checksums, MSS option) to V:port through a raw
IPPROTO_RAW socket, the source of packet i taken round-robin from the --src
addresses (a prefix A/N gives each of its 2^(32-N) addresses in turn), source
port P + i (wrapping within 1024-65535), paced at R packets per second; it
stops at C packets or after S seconds, whichever comes first (both bound the
flood). Run it in the namespace that should send: the kernel routes by V and
does not touch the header, so any source can be forged. Writes FILE once the
first packet is due. Prints one JSON line: {"sent": n, "seconds": t, "errors":
{...}, "by_source": {...}} (by_source only for at most 16 distinct sources).
"""

import argparse
import ipaddress
import json
import socket
import struct
import time


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def syn(src, dst, sport, dport, ident):
    opts = struct.pack("!BBH", 2, 4, 1460)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 0x1000 + ident, 0, 6 << 4, 0x02, 64240, 0, 0) + opts
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), ident & 0xFFFF, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + tcp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--src", action="append", required=True, help="source address or prefix (repeatable)")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True, help="packets per second")
    ap.add_argument("--max-seconds", type=float, default=30.0)
    ap.add_argument("--sport-base", type=int, default=20000)
    ap.add_argument("--started")
    a = ap.parse_args()
    if not 0 < a.count <= 1_000_000 or not 0 < a.rate <= 100_000 or not 0 < a.max_seconds <= 120:
        ap.error("bounds: 0 < count <= 1000000, 0 < rate <= 100000, 0 < max-seconds <= 120")
    sources = []
    for s in a.src:
        net = ipaddress.ip_network(s, strict=True)
        if net.num_addresses > 65536:
            ap.error(f"{s}: at most 65536 addresses per --src")
        sources.extend(a.packed for a in (net if net.num_addresses == 1 else net))
    dst = socket.inet_aton(a.dst)
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sent, errors = 0, {}
    by_source = {}
    start = time.monotonic()
    if a.started:
        open(a.started, "w").close()
    while sent < a.count:
        now = time.monotonic() - start
        if now > a.max_seconds:
            break
        due = sent / a.rate
        if due > now:
            time.sleep(min(due - now, 0.01))
            continue
        src = sources[sent % len(sources)]
        sport = 1024 + (a.sport_base - 1024 + sent) % (65536 - 1024)
        try:
            sock.sendto(syn(src, dst, sport, a.port, sent), (a.dst, 0))
            if len(sources) <= 16:
                k = socket.inet_ntoa(src)
                by_source[k] = by_source.get(k, 0) + 1
        except OSError as e:
            errors[e.strerror] = errors.get(e.strerror, 0) + 1
        sent += 1
    out = {"sent": sent - sum(errors.values()), "seconds": round(time.monotonic() - start, 3), "errors": errors}
    if by_source:
        out["by_source"] = by_source
    print(json.dumps(out))
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
