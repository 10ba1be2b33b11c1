#!/usr/bin/env python3
"""Check the GUE frames a node sent against the wire format (stdlib only):
docs/design.md, "GUE wire format".

    gue_check.py --src 10.77.0.11 --vip 10.77.0.100 [--vip ADDR ...] [--port 19523]
                 [--dst ADDR ...] [--client ADDR ...] FILE.pcap...

Reads pcap files (Ethernet, as tcpdump -w writes them) and checks every IPv4/UDP
frame from --src to --port: outer IPv4 (IHL 5, TOS 0, ID 0, DF, TTL 64, valid
header checksum, destination one of --dst if given), UDP (source port with bit
15 set, length matching), GUE (version 0, C 0, hlen = 1 + N, inner protocol 4
with an IPv4 inner packet or 41 with an IPv6 one, flags 0, type 0, next hop
index <= N <= 8; an index > 0 is a second-chance forward by the sender, counted
as "forwards"), inner packet whose length matches what is left and whose
destination is one of the VIPs (--vip, IPv4 or IPv6; a NAT service's VIP is a
node's own address). Frames whose inner source is not a --client are the
balancer's own encapsulated health checks ("probes": GUE SYNs to the VIP): the
same checks except the outer ID, which the kernel fills in for a raw socket's
header when it is 0 (counted as probe_nonzero_id, not an error). Prints one
JSON line {"frames": n, "ok": n, "bad": n, "forwards": n, "probes": n, "probe_nonzero_id": n,
"inner4": n, "inner6": n, "tcp_to_vip": n, "by_dst": {...}, "hops": {N: n},
"errors": [...]} and exits 0 when there was at least one frame and none was
bad, 1 otherwise.
"""

import argparse
import ipaddress
import json
import os
import struct
import sys

sys.dont_write_bytecode = True  # (no __pycache__ in the repository)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gue_sources import packets  # noqa: E402  (the harness's pcap reader)


def csum16(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def check(frame, a, res):
    if len(frame) < 14:
        return None
    etype = struct.unpack("!H", frame[12:14])[0]
    off = 14
    if etype == 0x8100:
        etype = struct.unpack("!H", frame[16:18])[0]
        off = 18
    if etype != 0x0800:
        return None
    ip = frame[off:]
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 17:
        return None
    ihl = (ip[0] & 15) * 4
    src = str(ipaddress.IPv4Address(ip[12:16]))
    dst = str(ipaddress.IPv4Address(ip[16:20]))
    if src != a.src or len(ip) < ihl + 8:
        return None
    sport, dport, ulen = struct.unpack("!HHH", ip[ihl:ihl + 6])
    if dport != a.port:
        return None
    errs = []
    tot, ident, frag = struct.unpack("!H H H", ip[2:8])
    if ihl != 20:
        errs.append("IHL %d" % ihl)
    if ip[1] != 0:
        errs.append("TOS %d" % ip[1])
    inner_src = None
    g0 = ip[ihl + 8:tot]
    if len(g0) >= 8:
        inner0 = g0[4 + 4 * (g0[0] & 31):]
        if g0[1] == 4 and len(inner0) >= 20:
            inner_src = str(ipaddress.IPv4Address(inner0[12:16]))
        elif g0[1] == 41 and len(inner0) >= 40:
            inner_src = str(ipaddress.IPv6Address(inner0[8:24]))
    probe = bool(a.client) and inner_src not in a.client
    if probe:
        res["probes"] += 1
        if ident != 0:
            res["probe_nonzero_id"] += 1
    elif ident != 0:
        errs.append("ID %d" % ident)
    if frag != 0x4000:
        errs.append("frag field 0x%04x (want DF only)" % frag)
    if ip[8] != 64:
        errs.append("TTL %d" % ip[8])
    if csum16(bytes(ip[:ihl])) != 0xFFFF:
        errs.append("outer IPv4 checksum")
    if a.dst and dst not in a.dst:
        errs.append("outer dst %s not a backend" % dst)
    if not sport & 0x8000:
        errs.append("UDP source port %d without bit 15" % sport)
    if ulen != tot - ihl:
        errs.append("UDP length %d != %d" % (ulen, tot - ihl))
    g = ip[ihl + 8:tot]
    if len(g) < 8:
        errs.append("GUE header truncated")
        return errs
    version, cbit, hlen = g[0] >> 6, (g[0] >> 5) & 1, g[0] & 31
    proto, flags, ptype, nhi, n = g[1], struct.unpack("!H", g[2:4])[0], struct.unpack("!H", g[4:6])[0], g[6], g[7]
    if version != 0 or cbit != 0:
        errs.append("GUE version %d C %d" % (version, cbit))
    if hlen != 1 + n:
        errs.append("GUE hlen %d with %d hops" % (hlen, n))
    if flags or ptype:
        errs.append("GUE flags 0x%x type %d" % (flags, ptype))
    if nhi > n or n > 8:
        errs.append("GUE next hop index %d, hops %d" % (nhi, n))
    elif nhi > 0:
        res["forwards"] += 1
    res["hops"][str(n)] = res["hops"].get(str(n), 0) + 1
    inner = g[4 + 4 * hlen:]
    if proto == 4:
        res["inner4"] += 1
        if len(inner) < 20 or inner[0] >> 4 != 4:
            errs.append("inner not IPv4")
        else:
            if struct.unpack("!H", inner[2:4])[0] != len(inner):
                errs.append("inner length %d != %d left" % (struct.unpack("!H", inner[2:4])[0], len(inner)))
            idst = str(ipaddress.IPv4Address(inner[16:20]))
            if idst not in a.vip:
                errs.append("inner dst %s is not a VIP" % idst)
            elif inner[9] == 6:
                res["tcp_to_vip"] += 1
    elif proto == 41:
        res["inner6"] += 1
        if len(inner) < 40 or inner[0] >> 4 != 6:
            errs.append("inner not IPv6")
        else:
            if struct.unpack("!H", inner[4:6])[0] + 40 != len(inner):
                errs.append("inner IPv6 length mismatch")
            idst = str(ipaddress.IPv6Address(inner[24:40]))
            if idst not in a.vip:
                errs.append("inner dst %s is not a VIP" % idst)
            elif inner[6] == 6:
                res["tcp_to_vip"] += 1
    else:
        errs.append("GUE inner protocol %d" % proto)
    res["by_dst"][dst] = res["by_dst"].get(dst, 0) + 1
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--vip", action="append", required=True)
    ap.add_argument("--client", action="append", default=[])
    ap.add_argument("--port", type=int, default=19523)
    ap.add_argument("--dst", action="append", default=[])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    a.vip = {str(ipaddress.ip_address(v)) for v in a.vip}
    a.client = {str(ipaddress.ip_address(v)) for v in a.client}
    res = {"frames": 0, "ok": 0, "bad": 0, "forwards": 0, "probes": 0, "probe_nonzero_id": 0, "inner4": 0, "inner6": 0, "tcp_to_vip": 0,
           "by_dst": {}, "hops": {}, "errors": []}
    for path in a.files:
        try:
            for frame in packets(path):
                errs = check(frame, a, res)
                if errs is None:
                    continue
                res["frames"] += 1
                if errs:
                    res["bad"] += 1
                    if len(res["errors"]) < 5:
                        res["errors"].append("; ".join(errs))
                else:
                    res["ok"] += 1
        except OSError as e:
            res["errors"].append("%s: %s" % (path, e))
            res["bad"] += 1
    print(json.dumps(res, sort_keys=True))
    return 0 if res["frames"] > 0 and res["bad"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
