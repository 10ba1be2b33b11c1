#!/usr/bin/env python3
"""Ask `nilb lookup --json` where flows go (Python 3 stdlib only).

    lookup.py --nilb PATH --config CFG --result FILE [--live PIN_DIR]
              [--client-ip 10.77.0.2] [--vip 10.77.0.100] [--port 80]
              [--nodes 10.77.0.11=node1,...] [--show N] [--hops [--bad-only]]

FILE is the --out JSON of `client.py burst` (uses "requests"), or the --state or
--out JSON of `client.py hold` (uses each connection's first backend).  For each flow it
runs `nilb lookup --json --config CFG CLIENT:SPORT VIP:PORT tcp` (with --live:
`--live --pin-dir PIN_DIR`, the running daemon's table) and reads first_hop
and second_hop from the JSON (docs/operations.md, "Machine-readable output").

Default: compare the first hop with the observed backend; prints a few
examples and one last line

    LOOKUP same=N differ=N unparsed=N total=N

With the config that was live when the flows were placed, "differ" should be 0
(Rust and BPF hash agree).  With a changed config, "differ" counts flows whose
bucket moved to another first hop, i.e. flows that need second chance.
("unparsed": nilb failed or printed no usable JSON.)

--hops: print one line per flow instead, `SPORT BUCKET FIRST SECOND` (addresses,
"-" for none, "?" if the lookup failed); with --bad-only only the connections
of a `client.py hold --out` result that failed, were reset or changed backend.

Always exits 0 unless the input cannot be read (this is evidence, not a verdict).
"""

import argparse
import json
import subprocess
import sys


def hostport(ip, port):
    """ADDR:PORT as nilb lookup reads it ([ADDR]:PORT for IPv6)."""
    return ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)


def lookup(a, sport):
    """nilb lookup --json for one flow: the parsed document, or None and the reason."""
    cmd = [a.nilb, "lookup", "--json", "--config", a.config]
    if a.live:
        cmd += ["--live", "--pin-dir", a.live]
    cmd += [hostport(a.client_ip, sport), hostport(a.vip, a.port), "tcp"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "error: %s" % exc
    try:
        d = json.loads(out.stdout)
        if not isinstance(d, dict) or "first_hop" not in d:
            raise ValueError("no first_hop")
        return d, ""
    except ValueError:
        return None, " ".join((out.stdout + " " + out.stderr).split())[:160]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nilb", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--live", metavar="PIN_DIR", help="look up in the running daemon's table under PIN_DIR")
    ap.add_argument("--client-ip", default="10.77.0.2")
    ap.add_argument("--vip", default="10.77.0.100")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--nodes", default="10.77.0.11=node1,10.77.0.12=node2,10.77.0.13=node3")
    ap.add_argument("--show", type=int, default=3, help="print this many example lookups / differences")
    ap.add_argument("--timeout", type=float, default=5.0, help="per lookup call, seconds")
    ap.add_argument("--hops", action="store_true", help="print SPORT BUCKET FIRST SECOND per flow")
    ap.add_argument("--bad-only", action="store_true", help="with --hops: only held connections that went wrong")
    a = ap.parse_args()

    ip2name = dict(kv.split("=", 1) for kv in a.nodes.split(",") if "=" in kv)
    try:
        with open(a.result) as f:
            res = json.load(f)
    except (OSError, ValueError) as exc:
        print("LOOKUP error: cannot read %s: %s" % (a.result, exc))
        return 2
    flows = []
    if "requests" in res:
        flows = [(r[0], r[1]) for r in res["requests"] if r[1]]
    else:
        conns = res.get("per_connection") or res.get("connections") or []
        if a.bad_only:
            conns = [c for c in conns if c.get("status") != "ok" or not c.get("same_backend")]
        flows = [(c["sport"], c["first"]) for c in conns if c.get("first") or a.bad_only]

    if a.hops:
        for sport, _ in flows:
            d, _why = lookup(a, sport)
            if d is None:
                print("%d ? ? ?" % sport)
            else:
                print("%d %d %s %s" % (sport, d["bucket"], d["first_hop"] or "-", d["second_hop"] or "-"))
        return 0

    same = differ = unparsed = 0
    examples = []
    diffs = []
    for sport, observed in flows:
        d, why = lookup(a, sport)
        predicted = None
        if d is not None and d["first_hop"]:
            predicted = ip2name.get(d["first_hop"], d["first_hop"])
        if len(examples) < a.show:
            text = why if d is None else "bucket %d of %d, first hop %s, second hop %s" % (
                d["bucket"], d["table_size"], d["first_hop"] or "none", d["second_hop"] or "none")
            examples.append("sport %d observed %s: %s" % (sport, observed, text))
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
