#!/usr/bin/env python3
"""Send hand-built GUE packets carrying TCP SYNs (Python 3 stdlib only).

    gue_send.py --outer-src A --outer-dst B --inner-src C --vip V [--port 80]
                --sport-base S --count N [--gue-port 19523] [--hop H]... [--interval 0.01]

Builds, per packet, exactly what a nilb balancer sends (README "GUE wire format"):
outer IPv4 (version 4, IHL 5, TOS 0, ID 0, DF, TTL 64, protocol UDP, valid
checksum, source A - which may be any address: this is how the test forges it -,
destination B), UDP (source port 0x8000 | (i & 0x7fff), destination --gue-port,
checksum 0), the 8-byte GUE header [0x01+N, 4, 0, 0, 0, 0, 0, N] followed by the
N --hop addresses, then the inner IPv4 packet: C:S+i -> V:port, TCP SYN with a
valid checksum, MSS option, ID = i.  Sent through a raw IPPROTO_RAW socket (the
kernel routes by B and does not touch the header).  Run it in the namespace that
should send.  Prints one JSON line {"sent": n, ...}; exit 0 when all were sent.
"""

import argparse
import json
import socket
import struct
import sys
import time


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload, ident=0, df=True):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0x4000 if df else 0,
                      64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst))
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + payload


def tcp_syn(src, dst, sport, dport, seq):
    opts = struct.pack("!BBH", 2, 4, 1460)  # MSS
    off = (20 + len(opts)) // 4
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, off << 4, 0x02, 64240, 0, 0) + opts
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(hdr))
    c = csum(pseudo + hdr)
    return hdr[:16] + struct.pack("!H", c) + hdr[18:]


def gue_packet(a, i):
    sport = a.sport_base + i
    inner = ipv4(a.inner_src, a.vip, 6, tcp_syn(a.inner_src, a.vip, sport, a.port, 0x1000 + i), ident=i & 0xFFFF)
    hops = b"".join(socket.inet_aton(h) for h in a.hop)
    n = len(a.hop)
    gue = struct.pack("!BBHHBB", 0x01 + n, 4, 0, 0, 0, n) + hops
    udp_payload = gue + inner
    udp = struct.pack("!HHHH", 0x8000 | (i & 0x7FFF), a.gue_port, 8 + len(udp_payload), 0) + udp_payload
    return ipv4(a.outer_src, a.outer_dst, 17, udp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outer-src", required=True)
    ap.add_argument("--outer-dst", required=True)
    ap.add_argument("--inner-src", required=True)
    ap.add_argument("--vip", required=True)
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--sport-base", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--gue-port", type=int, default=19523)
    ap.add_argument("--hop", action="append", default=[], help="second-hop address in the GUE header (repeatable)")
    ap.add_argument("--interval", type=float, default=0.01, help="seconds between packets")
    a = ap.parse_args()
    if not 0 < a.count <= 10000 or a.sport_base + a.count - 1 > 65535:
        ap.error("bad --count/--sport-base")
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sent = 0
    errors = {}
    size = 0
    try:
        for i in range(a.count):
            pkt = gue_packet(a, i)
            size = len(pkt)
            try:
                s.sendto(pkt, (a.outer_dst, 0))
                sent += 1
            except OSError as e:
                errors[e.strerror] = errors.get(e.strerror, 0) + 1
            time.sleep(a.interval)
    finally:
        s.close()
    print(json.dumps({"sent": sent, "count": a.count, "errors": errors, "bytes_each": size,
                      "outer": "%s -> %s:%d" % (a.outer_src, a.outer_dst, a.gue_port),
                      "inner": "%s:%d-%d -> %s:%d SYN" % (a.inner_src, a.sport_base, a.sport_base + a.count - 1,
                                                          a.vip, a.port)}, sort_keys=True))
    return 0 if sent == a.count else 1


if __name__ == "__main__":
    sys.exit(main())
