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
    ecmp.py watch-agree --nilb BIN --stop-file F --out FILE --leader I PIN_DIR...
                                                         read every balancer's live table (`nilb tables --json`,
                                                         all at once) in rounds until F exists; a round where
                                                         any two differ (first or second hop of a bucket) opens
                                                         a disagreement, the next round where all agree closes
                                                         it; a follower is behind while its table differs from
                                                         the leader's (PIN_DIR number I, from 0), from the start
                                                         of the first round that shows it different to the end
                                                         of the round that shows it equal; writes {"rounds",
                                                         "round_ms_max", "disagreements", "max_disagree_s",
                                                         "open_at_end", "intervals", "leader", "leader_tables",
                                                         "behind", "max_behind_s", "behind_open_at_end",
                                                         "worst": {"node", "s", "from_unix", "to_unix"}, "lags",
                                                         "dumps"} and FILE.timeline ([start, end, leader's
                                                         tables so far, 1 per follower behind] per round); a
                                                         follower behind for 0.5 s has every table of that round
                                                         written to FILE.dump-K.json (at most 5), "dumps" says
                                                         which buckets differ
    ecmp.py check                                        the rules of watch-agree's lags on made-up histories
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


class Lags:
    """How long each follower is behind the leader. The leader's table is
    the newest by definition (only the leader makes tables); a follower is
    behind while its table differs from the leader's, from the start of the
    first round that shows it different (the leader's new table, or one of
    the follower's own) to the end of the round that shows it equal again.
    (An order of versions made from what the balancers show cannot tell two
    tables first seen in one round apart: a follower that passed through the
    leader's short-lived table and then reached its current one looked
    newer than the leader, which stop 27's CI counted as the leader and the
    other follower being behind for 1.56 s while all three agreed.)"""

    def __init__(self, n, leader):
        self.leader = leader
        self.behind = [None] * n     # since when each follower differs
        self.leader_sig = None
        self.leader_tables = 0       # tables the leader showed
        self.lags = []               # closed: how long a follower differed
        self.worst = None            # the longest: node, lag, start and end

    def round(self, r0, r1, sigs):
        """One round read in [r0, r1] (monotonic s): `sigs` per balancer."""
        lead = sigs[self.leader]
        if lead != self.leader_sig:
            self.leader_sig = lead
            self.leader_tables += 1
        for n, sig in enumerate(sigs):
            if n == self.leader:
                continue
            if sig != lead:
                if self.behind[n] is None:
                    self.behind[n] = r0
            elif self.behind[n] is not None:
                lag = round(r1 - self.behind[n], 3)
                self.lags.append(lag)
                if self.worst is None or lag > self.worst["s"]:
                    self.worst = {"node": n, "s": lag, "from": self.behind[n], "to": r1}
                self.behind[n] = None

    def open_lags(self, now):
        """How long each follower still behind at `now` has been."""
        return [round(now - b, 3) for b in self.behind if b is not None]


def check_lags():
    """The rules of Lags on made-up histories (`ecmp.py check`): 0 when they
    hold, else 1 with what broke."""
    def run(history):
        g = Lags(3, 0)
        for k, sigs in enumerate(history):
            g.round(float(k), k + 0.5, sigs)
        return g
    cases = [
        # name, rounds (leader first), lags expected, still behind
        ("all agree", ["AAA", "AAA"], [], 0),
        ("one follower one round late", ["AAA", "BAB", "BBB"], [1.5], 0),
        # stop 27's CI: the leader went A -> B -> C within a millisecond; one
        # follower showed B in the round the leader showed C, then C
        ("a follower through the leader's short-lived table", ["AAA", "CAB", "CCB", "CCC", "CCC"],
         [1.5, 2.5], 0),
        ("a follower off on its own", ["AAA", "AAX", "AAX", "AAA"], [2.5], 0),
        ("a follower that never catches up", ["AAA", "BBA", "BBA"], [], 1),
        ("the leader back to an older table", ["AAA", "BBB", "ABB", "AAA"], [1.5, 1.5], 0),
    ]
    bad = 0
    for name, history, want, still in cases:
        g = run([tuple(h) for h in history])
        got = sorted(g.lags)
        open_n = sum(b is not None for b in g.behind)
        if got != sorted(want) or open_n != still:
            print(f"lag check '{name}': lags {got}, {open_n} still behind; expected {sorted(want)}, {still}")
            bad = 1
    return bad


DUMP_AFTER_S = 0.5   # a follower behind this long: every table is dumped
DUMPS_MAX = 5


def dump_tables(out, k, t, docs, leader):
    """Write the balancers' table documents of one round to OUT.dump-K.json
    and return a summary: per balancer, the buckets whose first hop, or
    only whose second hop, differs from the leader's (with examples:
    [bucket, its hops, the leader's])."""
    path = f"{out}.dump-{k}.json"
    with open(path, "w") as f:
        json.dump({"t": round(t, 3), "leader": leader, "tables": docs}, f)

    def hops(doc):
        return [(s["key"], i, b.get("first_hop"), b.get("second_hop"))
                for s in doc.get("services") or [] for i, b in enumerate(s.get("buckets") or [])]
    ref = hops(docs[leader])
    diff = {}
    for n, doc in enumerate(docs):
        h = hops(doc)
        first = sum(1 for a, b in zip(h, ref) if a[2] != b[2])
        second = sum(1 for a, b in zip(h, ref) if a[2] == b[2] and a[3] != b[3])
        diff[f"node{n + 1}"] = {"first_hop_differs": first, "only_second_hop_differs": second,
                                "examples": [[a[1], a[2:], b[2:]] for a, b in zip(h, ref) if a[2:] != b[2:]][:5]}
    return {"t": round(t, 3), "file": path, "leader": f"node{leader + 1}", "vs_leader": diff}


def watch_agree(args):
    t0 = time.monotonic()
    rounds = 0
    round_max = 0.0
    opened = None
    intervals = []
    errors = 0
    n_nodes = len(args.pin_dirs)
    lags = Lags(n_nodes, args.leader)
    wall = time.time() - time.monotonic()
    timeline = []
    dumped = set()                     # followers behind whose tables were dumped
    dumps = []
    while not os.path.exists(args.stop_file) and time.monotonic() - t0 < args.max_seconds:
        r0 = time.monotonic()
        procs = [subprocess.Popen([args.nilb, "tables", "--json", "--pin-dir", d],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for d in args.pin_dirs]
        sigs = []
        docs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=5)
                doc = json.loads(out) if p.returncode == 0 else None
                docs.append(doc)
                sigs.append(signature(doc) if doc is not None else None)
            except (subprocess.TimeoutExpired, ValueError):
                p.kill()
                sigs.append(None)
        r1 = time.monotonic()
        if any(x is None for x in sigs):
            errors += 1
            continue
        rounds += 1
        round_max = max(round_max, r1 - r0)
        agree = all(x == sigs[0] for x in sigs[1:])
        # a disagreement starts when the first read of the round began and
        # ends when the round that agrees again was read
        if not agree and opened is None:
            opened = r0
        elif agree and opened is not None:
            intervals.append(round(r1 - opened, 3))
            opened = None
        lags.round(r0, r1, sigs)
        for n, since in enumerate(lags.behind):
            if since is None:
                dumped.discard(n)
            elif r1 - since > DUMP_AFTER_S and n not in dumped and len(dumps) < DUMPS_MAX:
                # what every balancer holds while this follower is behind
                dumped.add(n)
                dumps.append(dump_tables(args.out, len(dumps), r0 - t0, docs, args.leader))
        timeline.append([round(r0 - t0, 3), round(r1 - t0, 3), lags.leader_tables]
                        + [int(b is not None) for b in lags.behind])
        time.sleep(args.interval)
    open_lag = lags.open_lags(time.monotonic())
    worst = lags.worst
    if worst is not None:
        worst = {"node": worst["node"], "s": worst["s"], "from_unix": round(wall + worst["from"], 3),
                 "to_unix": round(wall + worst["to"], 3)}
    res = {"rounds": rounds, "errors": errors, "round_ms_max": round(round_max * 1000, 1),
           "disagreements": len(intervals), "max_disagree_s": max(intervals, default=0.0),
           "open_at_end": None if opened is None else round(time.monotonic() - opened, 3),
           "intervals": intervals[-200:], "leader": args.leader,
           "leader_tables": lags.leader_tables, "behind": len(lags.lags),
           "max_behind_s": max(lags.lags + open_lag, default=0.0),
           "behind_open_at_end": max(open_lag) if open_lag else None, "worst": worst,
           "lags": lags.lags[-200:], "dumps": dumps}
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
    a.add_argument("--leader", type=int, required=True, help="index of the leader's PIN_DIR (0: the first)")
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
        return check_lags()
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
