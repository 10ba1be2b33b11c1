#!/usr/bin/env python3
"""Watch a node's live table from its pins: how many buckets backends own over time.

    tablewatch.py --pin-dir D --stop-file F [--interval 0.05] [--max-seconds 60] --out FILE

Polls `nilb tables --json --pin-dir D` (the binary from --nilb, else $NH_NILB,
else `nilb` on PATH) until F exists or --max-seconds passed (counted on the
monotonic clock, so a step of the wall clock does not end or stretch it) and
writes one JSON document to FILE:

    {"samples": n, "errors": n, "seconds": s,
     "buckets": {addr: [min, max, last]},      first-hop buckets seen per backend
     "first_nonzero": {addr: seconds},          first sample with buckets (from the start)
     "series": [[seconds, {addr: buckets}], ...]}  at most 400 samples (changes kept)

Every backend that is a first hop in any sample is listed; one never seen has
no entry (0 buckets throughout).  The tables of every service are summed.
Python 3 stdlib only; it parses only nilb's JSON.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def shares(doc):
    out = {}
    for s in doc.get("services") or []:
        for b in s.get("buckets") or []:
            f = b.get("first_hop")
            if f:
                out[f] = out.get(f, 0) + 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nilb")
    ap.add_argument("--pin-dir", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--started")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    nilb = a.nilb or os.environ.get("NH_NILB") or "nilb"
    t0 = time.monotonic()
    samples = errors = 0
    seen = {}
    first = {}
    series = []
    last = None
    while True:
        t = time.monotonic() - t0
        try:
            p = subprocess.run([nilb, "tables", "--json", "--pin-dir", a.pin_dir],
                               capture_output=True, text=True, timeout=5)
            doc = json.loads(p.stdout) if p.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            doc = None
        if doc is None:
            errors += 1
        else:
            samples += 1
            sh = shares(doc)
            for addr in set(seen) | set(sh):
                n = sh.get(addr, 0)
                lo, hi, _ = seen.get(addr, [n, n, n])
                seen[addr] = [min(lo, n), max(hi, n), n]
                if n > 0 and addr not in first:
                    first[addr] = round(t, 3)
            if sh != last:
                series.append([round(t, 3), sh])
                last = sh
        if samples == 1 and a.started:
            open(a.started, "w").close()
        if os.path.exists(a.stop_file) or time.monotonic() - t0 >= a.max_seconds:
            break
        time.sleep(a.interval)
    if len(series) > 400:
        series = series[:200] + series[-200:]
    with open(a.out, "w") as f:
        json.dump({"samples": samples, "errors": errors, "seconds": round(time.monotonic() - t0, 3),
                   "buckets": seen, "first_nonzero": first, "series": series}, f)
    return 0 if samples > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
