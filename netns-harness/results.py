#!/usr/bin/env python3
"""Small queries over the harness's JSON files (Python 3 stdlib only).

    results.py get        FILE EXPR        print the value of a Python expression over d
    results.py counter    FILE NAME        a counter of a saved `nilb stats --json` (0 if absent)
    results.py delta      BEFORE AFTER NAME   how much a counter moved between two saved
                                           `nilb stats --json` (absent counts as 0)
    results.py counters   FILE REGEX [--all]  "name=value ..." of its counters whose names
                                           match REGEX (non-zero ones only, unless --all)
    results.py hold-bad   FILE [--show N]  held connections that failed, were reset or
                                           changed backend (client.py hold --out), N at most
    results.py bad-sports FILE             their source ports, space-separated
    results.py window     FILE FROM TO     "ok/started" of a client.py stream result's requests
                                           started in [FROM, TO) (epoch seconds), plus the
                                           errors by kind if any

FILE "-" reads standard input.  For get, d is the document and the json
module is available (e.g. `json.dumps(d["by_backend"])`); dicts and lists
print as they would in Python.  get and counter print nothing and exit 2 when
the file cannot be read or the expression fails; the others print "?/?"
(window) or nothing.
"""

import argparse
import json
import re
import sys


def load(path):
    if path == "-":
        return json.load(sys.stdin)
    with open(path) as f:
        return json.load(f)


def bad_connections(d):
    return [c for c in d["per_connection"] if c["status"] != "ok" or not c.get("same_backend")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("get")
    p.add_argument("file")
    p.add_argument("expr")
    p = sub.add_parser("counter")
    p.add_argument("file")
    p.add_argument("name")
    p = sub.add_parser("delta")
    p.add_argument("file")
    p.add_argument("after")
    p.add_argument("name")
    p = sub.add_parser("counters")
    p.add_argument("file")
    p.add_argument("regex")
    p.add_argument("--all", action="store_true")
    p = sub.add_parser("hold-bad")
    p.add_argument("file")
    p.add_argument("--show", type=int, default=10)
    p = sub.add_parser("bad-sports")
    p.add_argument("file")
    p = sub.add_parser("window")
    p.add_argument("file")
    p.add_argument("t_from", type=float)
    p.add_argument("t_to", type=float)
    a = ap.parse_args()
    try:
        d = load(a.file)
    except (OSError, ValueError):
        if a.cmd == "window":
            print("?/?")
        return 2
    try:
        if a.cmd == "get":
            print(eval(a.expr, {"__builtins__": __builtins__, "json": json}, {"d": d}))  # noqa: S307
        elif a.cmd == "counter":
            print(int(d["counters"].get(a.name, 0)))
        elif a.cmd == "delta":
            print(int(load(a.after)["counters"].get(a.name, 0)) - int(d["counters"].get(a.name, 0)))
        elif a.cmd == "counters":
            print(" ".join("%s=%s" % (k, v) for k, v in sorted(d["counters"].items())
                           if re.search(a.regex, k) and (a.all or v)))
        elif a.cmd == "hold-bad":
            bad = bad_connections(d)
            for c in bad[:a.show]:
                print("    sport %d: first %s, later %s, status %s (%s)" % (
                    c["sport"], c["first"], c["later"][-3:], c["status"], c["error"]))
            if len(bad) > a.show:
                print("    ... %d more" % (len(bad) - a.show))
        elif a.cmd == "bad-sports":
            print(" ".join(str(c["sport"]) for c in bad_connections(d)))
        else:
            r = [x for x in d["requests"] if a.t_from <= x[0] < a.t_to]
            bad = {}
            for x in r:
                if x[3]:
                    bad[x[3]] = bad.get(x[3], 0) + 1
            print("%d/%d%s" % (sum(1 for x in r if x[2]), len(r),
                               (" errors " + json.dumps(bad, sort_keys=True)) if bad else ""))
    except Exception:  # noqa: BLE001 - an expression over test output may fail in any way
        if a.cmd == "window":
            print("?/?")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
