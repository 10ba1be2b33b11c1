#!/usr/bin/env python3
"""Stalled connections of the chain scenario, from nginx access logs (Python 3 stdlib only).

    chain.py stalled --client IP --since T0 --end T1 [--quiet 3] LOG...

Each LOG is one node's access log in the format
`$msec $remote_addr $remote_port $connection_requests` (chain.sh writes it).
A connection is a (log, client port) pair whose requests came from IP at or
after T0 (epoch seconds). It is stalled when its last request is older than
T1 - quiet: wrk keeps a connection whose packets are dropped open, and it
sends nothing more. Prints one JSON line: connections, stalled, by node
(log file name), reconnects (connections beyond the first per port).
"""

import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["stalled"])
    ap.add_argument("--client", required=True)
    ap.add_argument("--since", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--quiet", type=float, default=3.0)
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    last = {}
    requests = {}
    for path in a.logs:
        node = os.path.basename(os.path.dirname(path)) or path
        try:
            lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 4 or f[1] != a.client:
                continue
            try:
                t = float(f[0])
            except ValueError:
                continue
            if t < a.since:
                continue
            k = (node, f[2])
            last[k] = max(last.get(k, 0.0), t)
            requests[k] = requests.get(k, 0) + 1
    cut = a.end - a.quiet
    stalled = sorted(k for k, t in last.items() if t < cut)
    by_node = {}
    for (node, _), _t in last.items():
        by_node[node] = by_node.get(node, 0) + 1
    ports = {}
    for (_, port) in last:
        ports[port] = ports.get(port, 0) + 1
    print(json.dumps({
        "connections": len(last),
        "stalled": len(stalled),
        "by_node": by_node,
        "stalled_by_node": {n: sum(1 for k in stalled if k[0] == n) for n in by_node},
        "requests": sum(requests.values()),
        "ports_on_two_nodes": sum(1 for c in ports.values() if c > 1),
    }))


if __name__ == "__main__":
    main()
