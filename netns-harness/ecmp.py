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
                                                         it; a table no balancer showed since its own last one
                                                         is a new version, and a balancer is behind from the
                                                         round that first showed a newer version to the round
                                                         that shows it caught up; writes {"rounds",
                                                         "round_ms_max", "disagreements", "max_disagree_s",
                                                         "open_at_end", "changes", "intervals", "versions",
                                                         "behind", "max_behind_s", "behind_open_at_end",
                                                         "worst": {"node", "s", "from_unix", "to_unix"}, "lags"}
                                                         and FILE.timeline ([start, end, version per balancer]
                                                         per round)
    ecmp.py check                                        the version rules of watch-agree on a made-up history
    ecmp.py window-logs FROM TO LOG...                   the lines of nilb and etcd logs stamped between FROM - 1 s
                                                         and TO + 0.5 s (Unix seconds), each with its file's name
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


class Versions:
    """The tables' versions in the order the balancers showed them: a
    balancer whose table changes to one that no balancer has shown since its
    own last one (a new table, or an old one made again) makes a new
    version; one that changes to a version newer than its own catches up."""

    def __init__(self):
        self.sigs = []     # signature of version i
        self.start = []    # monotonic time version i was first seen (the round's start)

    def latest(self, sig):
        for i in range(len(self.sigs) - 1, -1, -1):
            if self.sigs[i] == sig:
                return i
        return -1

    def move(self, own, sig, t):
        """The version index of a balancer that showed version `own` (-1:
        none yet) and now shows `sig`, first seen at `t`."""
        i = self.latest(sig)
        if i > own or (i >= 0 and own < 0):
            return i
        self.sigs.append(sig)
        self.start.append(t)
        return len(self.sigs) - 1


def check_versions():
    """The version rules on a made-up history (`ecmp.py check`): 0 when they
    hold, else 1 with what broke."""
    v = Versions()
    steps = [  # (balancer's version, table shown, version expected after)
        (-1, "A", 0), (-1, "A", 0),   # two balancers start on A
        (0, "B", 1),                  # the leader makes B
        (0, "B", 1),                  # a follower catches up
        (1, "A", 2),                  # the leader makes A again: a new version
        (1, "A", 2),                  # the follower catches up to it
        (2, "C", 3), (2, "D", 4),     # the leader makes C then D
        (2, "D", 4),                  # a follower skips C
    ]
    for own, sig, want in steps:
        got = v.move(own, sig, 0.0)
        if got != want:
            print(f"version check: from {own} showing {sig}: version {got}, expected {want}")
            return 1
    return 0


def watch_agree(args):
    t0 = time.monotonic()
    rounds = 0
    round_max = 0.0
    opened = None
    intervals = []
    changes = 0
    last = None
    errors = 0
    versions = Versions()
    at = [-1] * len(args.pin_dirs)     # each balancer's version
    behind = [None] * len(args.pin_dirs)  # since when each has been behind
    lags = []                          # closed: how long a balancer was behind
    worst = None                       # the longest: node, lag, wall-clock window
    wall = time.time() - time.monotonic()
    timeline = []
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
        # per balancer: behind from the start of the round that first showed
        # the version after its own, until the round that shows it caught up
        for n, sig in enumerate(sigs):
            if at[n] < 0 or versions.sigs[at[n]] != sig:
                at[n] = versions.move(at[n], sig, r0)
        newest = max(at)
        for n in range(len(at)):
            if at[n] < newest and behind[n] is None:
                behind[n] = versions.start[at[n] + 1]
            elif at[n] == newest and behind[n] is not None:
                lags.append(round(r1 - behind[n], 3))
                if worst is None or lags[-1] > worst["s"]:
                    worst = {"node": n, "s": lags[-1], "from_unix": round(wall + behind[n], 3),
                             "to_unix": round(wall + r1, 3)}
                behind[n] = None
        timeline.append([round(r0 - t0, 3), round(r1 - t0, 3)] + at)
        time.sleep(args.interval)
    now = time.monotonic()
    open_lag = [round(now - b, 3) for b in behind if b is not None]
    res = {"rounds": rounds, "errors": errors, "round_ms_max": round(round_max * 1000, 1),
           "disagreements": len(intervals), "max_disagree_s": max(intervals, default=0.0),
           "open_at_end": None if opened is None else round(time.monotonic() - opened, 3),
           "changes": changes, "intervals": intervals[-200:],
           "versions": len(versions.sigs), "behind": len(lags),
           "max_behind_s": max(lags + open_lag, default=0.0),
           "behind_open_at_end": max(open_lag) if open_lag else None, "worst": worst,
           "lags": lags[-200:]}
    with open(args.out, "w") as f:
        json.dump(res, f)
    with open(args.out + ".timeline", "w") as f:
        json.dump(timeline, f)
    return 0


def window_logs(args):
    """Lines of nilb logs (RFC 3339 UTC stamps) and etcd's log (UTC stamps)
    between FROM - 1 s and TO + 0.5 s (Unix seconds), each prefixed with its
    file's name."""
    import datetime
    lo, hi = args.from_unix - 1.0, args.to_unix + 0.5
    for path in args.logs:
        name = os.path.basename(path)
        try:
            lines = open(path, errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines:
            stamp = None
            if line[:4].isdigit() and line[10:11] in ("T", " "):
                stamp = " ".join(line.split()[:2]) if line[10] == " " else line.split()[0]
            if not stamp:
                continue
            try:
                t = datetime.datetime.fromisoformat(stamp.rstrip("Z")[:26]).replace(
                    tzinfo=datetime.timezone.utc).timestamp()
            except ValueError:
                continue
            if lo <= t <= hi:
                print(f"{name}: {line[:400]}")
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
    sub.add_parser("check")
    a = sub.add_parser("window-logs")
    a.add_argument("from_unix", type=float)
    a.add_argument("to_unix", type=float)
    a.add_argument("logs", nargs="+")
    args = ap.parse_args()
    if args.cmd == "watch-agree":
        return watch_agree(args)
    if args.cmd == "check":
        return check_versions()
    if args.cmd == "window-logs":
        return window_logs(args)

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
