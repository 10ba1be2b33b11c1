#!/usr/bin/env python3
"""Compare observed backends with `nilb lookup` predictions (Python 3 stdlib only).

    lookup.py --nilb PATH --config CFG --result FILE [--client-ip 10.77.0.2]
              [--vip 10.77.0.100] [--port 80] [--nodes 10.77.0.11=node1,...] [--show N]

FILE is the --out JSON of `client.py burst` (uses "requests"), or the --state or
--out JSON of `client.py hold` (uses each connection's first backend).  For each flow it
runs `nilb lookup --config CFG CLIENT:SPORT VIP:PORT tcp` and extracts the first
hop from the output, tolerating formats: the first IPv4 address (or known node
name) after the word "first".  Prints a few examples and one last line

    LOOKUP same=N differ=N unparsed=N total=N

With the config that was live when the flows were placed, "differ" should be 0
(Rust and BPF hash agree).  With a changed config, "differ" counts flows whose
bucket moved to another first hop, i.e. flows that need second chance.
Always exits 0 unless the input cannot be read (this is evidence, not a verdict).
"""

import argparse
import json
import re
import subprocess
import sys

IP_RE = r"(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})"


def first_hop(text, names):
    """Return the first-hop address or node name found in lookup output, or None."""
    for m in re.finditer(r"first", text, re.IGNORECASE):
        tail = text[m.end():m.end() + 80]
        ip = re.search(IP_RE, tail)
        name = None
        for n in names:
            pos = tail.find(n)
            if pos >= 0 and (name is None or pos < name[0]):
                name = (pos, n)
        if ip and (name is None or ip.start() <= name[0]):
            return ip.group(1)
        if name:
            return name[1]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nilb", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--client-ip", default="10.77.0.2")
    ap.add_argument("--vip", default="10.77.0.100")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--nodes", default="10.77.0.11=node1,10.77.0.12=node2,10.77.0.13=node3")
    ap.add_argument("--show", type=int, default=3, help="print this many example lookups / differences")
    ap.add_argument("--timeout", type=float, default=5.0, help="per lookup call, seconds")
    a = ap.parse_args()

    ip2name = dict(kv.split("=", 1) for kv in a.nodes.split(",") if "=" in kv)
    names = sorted(set(ip2name.values()), key=len, reverse=True)
    try:
        res = json.load(open(a.result))
    except (OSError, ValueError) as exc:
        print("LOOKUP error: cannot read %s: %s" % (a.result, exc))
        return 2
    flows = []
    if "requests" in res:
        flows = [(r[0], r[1]) for r in res["requests"] if r[1]]
    else:
        conns = res.get("per_connection") or res.get("connections") or []
        flows = [(c["sport"], c["first"]) for c in conns if c.get("first")]

    same = differ = unparsed = 0
    examples = []
    diffs = []
    for sport, observed in flows:
        cmd = [a.nilb, "lookup", "--config", a.config,
               "%s:%d" % (a.client_ip, sport), "%s:%d" % (a.vip, a.port), "tcp"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            text = out.stdout + "\n" + out.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            text = "error: %s" % exc
        hop = first_hop(text, names)
        predicted = ip2name.get(hop, hop) if hop else None
        if len(examples) < a.show:
            examples.append("sport %d observed %s: %s" % (sport, observed, " ".join(text.split())[:160]))
        if predicted is None:
            unparsed += 1
        elif predicted == observed:
            same += 1
        else:
            differ += 1
            if len(diffs) < a.show:
                diffs.append("sport %d: observed %s, lookup first hop %s" % (sport, observed, predicted))
    for e in examples:
        print("  lookup example: " + e)
    for d in diffs:
        print("  lookup differs: " + d)
    print("LOOKUP same=%d differ=%d unparsed=%d total=%d" % (same, differ, unparsed, len(flows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
