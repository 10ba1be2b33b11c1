#!/usr/bin/env python3
"""Count captured packets by client source prefix (stdlib only).

    gue_sources.py --prefix P [--prefix ...] [--syn-only] FILE.pcap...

Reads pcap files (Ethernet link type, as tcpdump -w writes them) and counts,
per --prefix, the packets whose client source lies in it: for GUE (IPv4/UDP to
port 19523) the inner IPv4 source, for anything else the IPv4 source. With
--syn-only only TCP SYNs without ACK count (inner TCP for GUE). Prints one
JSON line: {"files": n, "packets": n, "gue": n, "by_prefix": {P: {"gue": n,
"plain": n}}}.
"""

import argparse
import ipaddress
import json
import struct
import sys

GUE_PORT = 19523


def packets(path):
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        magic = struct.unpack("<I", head[:4])[0]
        endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            _, _, incl, _ = struct.unpack(endian + "IIII", rec)
            data = f.read(incl)
            if len(data) < incl:
                return
            yield data


def ipv4_of(frame):
    """(IPv4 header offset, header length) of an Ethernet frame, or None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 15) * 4
    return 14, ihl


def tcp_syn(ip, ihl):
    if len(ip) < ihl + 14 or ip[9] != 6:
        return False
    flags = ip[ihl + 13]
    return bool(flags & 0x02) and not flags & 0x10


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", action="append", required=True)
    ap.add_argument("--syn-only", action="store_true")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    nets = [ipaddress.ip_network(p) for p in a.prefix]
    out = {str(n): {"gue": 0, "plain": 0} for n in nets}
    total = gue = 0
    for path in a.files:
        try:
            for frame in packets(path):
                total += 1
                v = ipv4_of(frame)
                if not v:
                    continue
                off, ihl = v
                ip = frame[off:]
                kind = "plain"
                if ip[9] == 17 and len(ip) >= ihl + 8 and struct.unpack("!H", ip[ihl + 2:ihl + 4])[0] == GUE_PORT:
                    g = ip[ihl + 8:]
                    if len(g) < 4:
                        continue
                    glen = 4 + 4 * (g[0] & 0x1F)
                    ip = g[glen:]
                    if len(ip) < 20 or ip[0] >> 4 != 4:
                        continue
                    ihl = (ip[0] & 15) * 4
                    kind = "gue"
                    gue += 1
                if a.syn_only and not tcp_syn(ip, ihl):
                    continue
                src = ipaddress.ip_address(bytes(ip[12:16]))
                for n in nets:
                    if src in n:
                        out[str(n)][kind] += 1
        except OSError as e:
            print(f"gue_sources.py: {path}: {e}", file=sys.stderr)
    print(json.dumps({"files": len(a.files), "packets": total, "gue": gue, "by_prefix": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
