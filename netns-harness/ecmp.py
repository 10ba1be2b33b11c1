#!/usr/bin/env python3
"""Helpers of the ecmp scenarios (Python 3 stdlib only).

    ecmp.py nexthops NETNS PREFIX                        the gateways of PREFIX in NETNS's main table, one line
    ecmp.py wait-nexthops NETNS PREFIX N --timeout S     poll (20 ms) until PREFIX has exactly N next hops;
                                                         prints {"ok", "elapsed_s", "at", "nexthops"}; exit 0/1
    ecmp.py agree DUMP...                                 `nilb tables --json` dumps (tables.py dump) of several
                                                         balancers: every service's buckets, first and second
                                                         hop, the same on all; one SUMMARY line; exit 0/1
    ecmp.py balancer-shares STATS_BEFORE,STATS_AFTER ... packets each balancer's XDP program balanced between
                                                         two `nilb stats --json` (xdp_encap_*), as shares
    ecmp.py watch-agree --nilb BIN --stop-file F --out FILE PIN_DIR...
                                                         read every balancer's live table (`nilb tables --json`,
                                                         all at once) in rounds until F exists; a round where
                                                         any two differ (first or second hop of a bucket) opens
                                                         a disagreement, the next round where all agree closes
                                                         it; writes {"rounds", "round_ms_max", "disagreements",
                                                         "max_disagree_s", "open_at_end", "changes", "intervals"}
"""

import argparse
import json
import os
import subprocess
import sys
import time

ENCAP = ("xdp_encap_tx", "xdp_encap_redirect", "xdp_encap_local", "xdp_encap_slow_path")


def nexthops(netns, prefix):
    p = subprocess.run(["ip", "-n", netns, "-j", "route", "show", prefix],
                       capture_output=True, text=True, timeout=5)
    if p.returncode != 0 or not p.stdout.strip():
        return []
    out = []
    for r in json.loads(p.stdout):
        if "nexthops" in r:
            out += [h.get("gateway", "?") for h in r["nexthops"]]
        elif "gateway" in r:
            out.append(r["gateway"])
    return sorted(out)


def counters(path):
    with open(path) as f:
        d = json.load(f)
    c = d.get("counters", d)
    if isinstance(c, list):
        return {x["name"]: x.get("total", x.get("value", 0)) for x in c}
    return {k: (v.get("total", 0) if isinstance(v, dict) else v) for k, v in c.items()}


def signature(doc):
    """Every service's (first hop, second hop) per bucket."""
    return tuple(sorted(
        (s["key"], tuple((b.get("first_hop"), b.get("second_hop")) for b in s.get("buckets") or []))
        for s in doc.get("services") or []))


def watch_agree(args):
    t0 = time.monotonic()
    rounds = 0
    round_max = 0.0
    opened = None
    intervals = []
    changes = 0
    last = None
    errors = 0
    while not os.path.exists(args.stop_file) and time.monotonic() - t0 < args.max_seconds:
        r0 = time.monotonic()
        procs = [subprocess.Popen([args.nilb, "tables", "--json", "--pin-dir", d],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for d in args.pin_dirs]
        sigs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=5)
                sigs.append(signature(json.loads(out)) if p.returncode == 0 else None)
            except (subprocess.TimeoutExpired, ValueError):
                p.kill()
                sigs.append(None)
        r1 = time.monotonic()
        if any(x is None for x in sigs):
            errors += 1
            continue
        rounds += 1
        round_max = max(round_max, r1 - r0)
        if sigs[0] != last:
            changes += last is not None
            last = sigs[0]
        agree = all(x == sigs[0] for x in sigs[1:])
        # a disagreement starts when the first read of the round began and
        # ends when the round that agrees again was read
        if not agree and opened is None:
            opened = r0
        elif agree and opened is not None:
            intervals.append(round(r1 - opened, 3))
            opened = None
        time.sleep(args.interval)
    res = {"rounds": rounds, "errors": errors, "round_ms_max": round(round_max * 1000, 1),
           "disagreements": len(intervals), "max_disagree_s": max(intervals, default=0.0),
           "open_at_end": None if opened is None else round(time.monotonic() - opened, 3),
           "changes": changes, "intervals": intervals[-200:]}
    with open(args.out, "w") as f:
        json.dump(res, f)
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("nexthops")
    a.add_argument("netns")
    a.add_argument("prefix")
    a = sub.add_parser("wait-nexthops")
    a.add_argument("netns")
    a.add_argument("prefix")
    a.add_argument("n", type=int)
    a.add_argument("--timeout", type=float, default=10)
    a = sub.add_parser("agree")
    a.add_argument("dumps", nargs="+")
    a = sub.add_parser("balancer-shares")
    a.add_argument("pairs", nargs="+")
    a = sub.add_parser("watch-agree")
    a.add_argument("--nilb", required=True)
    a.add_argument("--stop-file", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--interval", type=float, default=0.02)
    a.add_argument("--max-seconds", type=float, default=180)
    a.add_argument("pin_dirs", nargs="+")
    args = ap.parse_args()
    if args.cmd == "watch-agree":
        return watch_agree(args)

    if args.cmd == "nexthops":
        print(" ".join(nexthops(args.netns, args.prefix)) or "none")
        return 0
    if args.cmd == "wait-nexthops":
        t0 = time.monotonic()
        hops = []
        while True:
            hops = nexthops(args.netns, args.prefix)
            if len(hops) == args.n:
                ok = True
                break
            if time.monotonic() - t0 > args.timeout:
                ok = False
                break
            time.sleep(0.02)
        print(json.dumps({"ok": ok, "elapsed_s": round(time.monotonic() - t0, 3),
                          "at": time.time(), "nexthops": hops}))
        return 0 if ok else 1
    if args.cmd == "agree":
        docs = []
        for p in args.dumps:
            with open(p) as f:
                docs.append(json.load(f))
        ref = {s["key"]: s for s in docs[0]["services"]}
        diff = buckets = 0
        shown = 0
        for i, d in enumerate(docs[1:], 1):
            svcs = {s["key"]: s for s in d["services"]}
            if set(svcs) != set(ref):
                print("  %s: services %s differ from %s" % (args.dumps[i], sorted(svcs), sorted(ref)))
                diff += 1
                continue
            for k, s in svcs.items():
                for j, (x, y) in enumerate(zip(ref[k]["buckets"], s["buckets"])):
                    buckets += 1
                    if (x["first_hop"], x["second_hop"]) != (y["first_hop"], y["second_hop"]):
                        diff += 1
                        if shown < 5:
                            shown += 1
                            print("  %s bucket %d: %s/%s vs %s/%s" % (
                                k, j, x["first_hop"], x["second_hop"], y["first_hop"], y["second_hop"]))
        print("SUMMARY %s balancers=%d buckets_compared=%d differing=%d" % (
            "PASS" if diff == 0 else "FAIL", len(docs), buckets, diff))
        return 0 if diff == 0 else 1
    if args.cmd == "balancer-shares":
        per = []
        for pair in args.pairs:
            b, a = pair.split(",")
            cb, ca = counters(b), counters(a)
            per.append(sum(ca.get(k, 0) - cb.get(k, 0) for k in ENCAP))
        total = sum(per) or 1
        print(" ".join("%d(%.0f%%)" % (n, 100.0 * n / total) for n in per))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
