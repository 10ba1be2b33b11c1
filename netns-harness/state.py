#!/usr/bin/env python3
"""Read a nilb daemon's state for the harness through `nilb status --json` (Python 3 stdlib only).

    state.py json    FILE                       the state as JSON on stdout
    state.py summary FILE [--service NAME]      one line: per backend state/health/weight/buckets
    state.py get     FILE EXPR [--service NAME] print the value of a Python expression
    state.py wait    FILE EXPR --timeout S [--interval 0.1] [--service NAME]
                     poll until EXPR is true; prints one JSON line
                     {"ok": bool, "elapsed_s": s, "at": epoch, "polls": n, "summary": "..."}
                     and exits 0 when it became true, 1 on timeout

FILE is the daemon's --state-file. It is read with
`nilb status --json --state-file FILE` (the nilb binary from --nilb, else
$NH_NILB, else `nilb` on PATH); this module only parses JSON.  The document
is the state file's content plus "schema": 1 (docs/operations.md,
"Machine-readable output").

Names available in EXPR:
    d          the whole document (dict)
    svc        the service (--service NAME, default: the first one)
    b          svc's backends by hostname (falling back to the address)
    reload     d["last_reload"] or {} (keys at, ok, error, succeeded, failed)
    weights()  "w1:w2:..." of svc's backends in file order
    buckets()  {name: first-hop buckets}
    quotas()   {name: buckets nilb should give it}: largest-remainder apportionment of
               table_size by weight over the first-hop candidates (state active and
               health not down; when there is none, fail-open: every backend not
               offline), ties to the lower address; 0 for the others
    fits(tol=1)  every backend's buckets within tol of quotas()
    settled(tol=1)  pending_moves == 0 and fits(tol)

A missing state file (daemon not started yet, or stopped) or one that
`nilb status` cannot read counts as "not yet" for wait and as an error
(exit 2) for the other commands.
"""

import argparse
import ipaddress
import json
import os
import subprocess
import sys
import time

SCHEMA = 1


class StateError(Exception):
    """The state could not be read (no file yet, nilb failed, unexpected JSON)."""


def nilb_path(explicit=None):
    return explicit or os.environ.get("NH_NILB") or "nilb"


def load(path, nilb=None, timeout=10):
    """The state of the daemon writing `path`, as `nilb status --json` prints it."""
    cmd = [nilb_path(nilb), "status", "--json", "--state-file", path]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StateError("%s: %s" % (" ".join(cmd[:3]), e)) from e
    if p.returncode != 0:
        raise StateError((p.stderr.strip().splitlines() or ["nilb status exited %d" % p.returncode])[-1])
    try:
        d = json.loads(p.stdout)
    except ValueError as e:
        raise StateError("nilb status --json printed no JSON: %s" % e) from e
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise StateError("nilb status --json: schema %r, expected %d" % (
            d.get("schema") if isinstance(d, dict) else None, SCHEMA))
    return d


def largest_remainder(size, items):
    """items: [(addr, weight)] -> {addr: quota} (nilb's table::quotas)."""
    total = sum(w for _, w in items)
    if total == 0:
        return {a: 0 for a, _ in items}
    q = {a: size * w // total for a, w in items}
    left = size - sum(q.values())
    order = sorted(items, key=lambda x: (-(size * x[1] % total), ipaddress.ip_address(x[0])))
    for a, _ in order[:left]:
        q[a] += 1
    return q


class View:
    def __init__(self, d, service=None):
        self.d = d
        svcs = d.get("services") or []
        if service:
            svcs = [s for s in svcs if s.get("name") == service]
        if not svcs:
            raise KeyError("no service%s in the state" % (" " + service if service else ""))
        self.svc = svcs[0]
        self.backends = self.svc.get("backends") or []
        self.b = {(x.get("hostname") or str(x["dip"])): x for x in self.backends}
        self.name_of = {str(x["dip"]): (x.get("hostname") or str(x["dip"])) for x in self.backends}

    def weights(self):
        return ":".join(str(x["weight"]) for x in self.backends)

    def buckets(self):
        return {n: x["buckets"] for n, x in self.b.items()}

    def quotas(self):
        cand = [x for x in self.backends if x["state"] == "active" and x["health"] != "down"]
        if not cand:
            cand = [x for x in self.backends if x["state"] not in ("offline", "removing")]
        q = largest_remainder(int(self.svc["table_size"]), [(str(x["dip"]), int(x["weight"])) for x in cand])
        return {self.name_of[str(x["dip"])]: q.get(str(x["dip"]), 0) for x in self.backends}

    def fits(self, tol=1):
        q = self.quotas()
        return all(abs(self.b[n]["buckets"] - q[n]) <= tol for n in q)

    def settled(self, tol=1):
        return int(self.svc.get("pending_moves", 0)) == 0 and self.fits(tol)

    def summary(self):
        parts = []
        for n, x in self.b.items():
            parts.append("%s %s/%s w=%s buckets=%s 2nd=%s" % (
                n, x["state"], x["health"], x["weight"], x["buckets"], x["second_hop_buckets"]))
        r = self.d.get("last_reload") or {}
        rl = "none"
        if r:
            rl = "%s (%s applied, %s rejected)" % ("ok" if r.get("ok") else "FAILED", r.get("succeeded"), r.get("failed"))
        return "%s; pending_moves=%s fail_open=%s last_reload=%s" % (
            "; ".join(parts), self.svc.get("pending_moves"), str(self.svc.get("fail_open")).lower(), rl)

    def env(self):
        return {
            "d": self.d, "svc": self.svc, "b": self.b,
            "reload": self.d.get("last_reload") or {},
            "weights": self.weights, "buckets": self.buckets, "quotas": self.quotas,
            "fits": self.fits, "settled": self.settled, "json": json,
        }


def evaluate(path, expr, service, nilb=None):
    d = load(path, nilb)
    try:
        v = View(d, service)
        env = v.env()
    except KeyError:
        # no service (e.g. a stand-in daemon): only d is available
        v, env = None, {"d": d, "reload": d.get("last_reload") or {}, "json": json}
    return eval(expr, {"__builtins__": __builtins__}, env), v  # noqa: S307 - harness-internal


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nilb", help="nilb binary (default: $NH_NILB, else nilb on PATH)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("json")
    p.add_argument("file")
    for name in ("summary", "get", "wait"):
        p = sub.add_parser(name)
        p.add_argument("file")
        if name != "summary":
            p.add_argument("expr")
        p.add_argument("--service")
        if name == "wait":
            p.add_argument("--timeout", type=float, required=True)
            p.add_argument("--interval", type=float, default=0.1)
    a = ap.parse_args()
    errors = (StateError, KeyError, TypeError, ValueError, IndexError)

    if a.cmd == "wait":
        t0 = time.monotonic()
        end = t0 + a.timeout
        polls = 0
        last = "state not read yet"
        ok = False
        while True:
            polls += 1
            try:
                val, v = evaluate(a.file, a.expr, a.service, a.nilb)
                last = v.summary() if v is not None else "no service in the state"
                if val:
                    ok = True
                    break
            except errors as e:
                last = "%s: %s" % (type(e).__name__, e)
            if time.monotonic() >= end:
                break
            time.sleep(a.interval)
        print(json.dumps({"ok": ok, "elapsed_s": round(time.monotonic() - t0, 3), "at": round(time.time(), 6),
                          "polls": polls, "summary": last}, sort_keys=True))
        return 0 if ok else 1

    try:
        if a.cmd == "json":
            print(json.dumps(load(a.file, a.nilb), sort_keys=True))
        elif a.cmd == "summary":
            print(View(load(a.file, a.nilb), a.service).summary())
        else:
            val, _ = evaluate(a.file, a.expr, a.service, a.nilb)
            print(val if not isinstance(val, (dict, list)) else json.dumps(val, sort_keys=True))
    except errors as e:
        print("state.py: %s: %s" % (a.file, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
