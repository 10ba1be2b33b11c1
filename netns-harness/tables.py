#!/usr/bin/env python3
"""Dump and compare nilb's live tables (Python 3 stdlib only).

    tables.py dump    PIN_DIR --out FILE [--nilb PATH]   every service's buckets as JSON
    tables.py compare BEFORE.json AFTER.json           bucket by bucket; one SUMMARY line

`nilb lookup --live` answers for one flow; `nilb tables --json --pin-dir
PIN_DIR` prints the whole live table (the nilb binary from --nilb, else
$NH_NILB, else `nilb` on PATH), so a restart can be checked for "no bucket
moved" over every bucket.  dump saves that document as it is (schema 1,
docs/operations.md "Machine-readable output": services[] with key,
table_size, service_index, table_base, backends[] and buckets[] of first_hop,
second_hop, previous_hops, counter_slot, moved_at_s) and prints one line per
service.

compare prints differences (at most 10) and, last,
    SUMMARY <PASS|FAIL> services=N buckets=N moved=N second_changed=N age_changed=N chain_changed=N chain_entries=N
moved: first hop differs; second_changed: second hop differs; age_changed:
moved_at_s differs (the move history that paces later moves); chain_changed:
the previous owners (previous_hops, the whole chain) differ; chain_entries:
the previous owners listed over all buckets of the first dump (how much chain
the check covered).  PASS when moved, second_changed, age_changed and
chain_changed are 0 and both dumps hold the same services.  Exit 0 on PASS, 1 on FAIL,
2 on unreadable input.
"""

import argparse
import json
import os
import subprocess
import sys

SCHEMA = 1


def dump(pin_dir, nilb=None):
    cmd = [nilb or os.environ.get("NH_NILB") or "nilb", "tables", "--json", "--pin-dir", pin_dir]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise OSError("%s: %s" % (" ".join(cmd[:3]), e)) from e
    if p.returncode != 0:
        raise OSError((p.stderr.strip().splitlines() or ["nilb tables exited %d" % p.returncode])[-1])
    d = json.loads(p.stdout)
    if d.get("schema") != SCHEMA:
        raise OSError("nilb tables --json: schema %r, expected %d" % (d.get("schema"), SCHEMA))
    return d


def by_key(doc):
    return {s["key"]: s for s in doc["services"]}


def previous(bucket):
    """A bucket's previous owners, newest first (a dump without
    previous_hops: its second hop alone)."""
    if "previous_hops" in bucket:
        return list(bucket["previous_hops"])
    return [bucket["second_hop"]] if bucket.get("second_hop") else []


def compare(a, b):
    sa, sb = by_key(a), by_key(b)
    lines = []
    moved = second = age = total = chain = entries = 0
    ok = set(sa) == set(sb)
    if not ok:
        lines.append("services differ: before %s, after %s" % (sorted(sa), sorted(sb)))
    for name in sorted(set(sa) & set(sb)):
        ba, bb = sa[name]["buckets"], sb[name]["buckets"]
        if len(ba) != len(bb):
            lines.append("%s: table size %d -> %d" % (name, len(ba), len(bb)))
            ok = False
            continue
        for i, (x, y) in enumerate(zip(ba, bb)):
            total += 1
            if x["first_hop"] != y["first_hop"]:
                moved += 1
            if x["second_hop"] != y["second_hop"]:
                second += 1
            if x["moved_at_s"] != y["moved_at_s"]:
                age += 1
            px, py = previous(x), previous(y)
            entries += len(px)
            if px != py:
                chain += 1
            if x != y and len(lines) < 10:
                lines.append("%s bucket %d: first %s previous %s moved_at %s -> first %s previous %s moved_at %s" % (
                    name, i, x["first_hop"] or "-", ",".join(px) or "-", x["moved_at_s"],
                    y["first_hop"] or "-", ",".join(py) or "-", y["moved_at_s"]))
    ok = ok and moved == 0 and second == 0 and age == 0 and chain == 0
    return ok, lines, ("SUMMARY %s services=%d buckets=%d moved=%d second_changed=%d age_changed=%d"
                       " chain_changed=%d chain_entries=%d") % (
        "PASS" if ok else "FAIL", len(set(sa) & set(sb)), total, moved, second, age, chain, entries)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump")
    p.add_argument("pin_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--nilb")
    p = sub.add_parser("compare")
    p.add_argument("before")
    p.add_argument("after")
    a = ap.parse_args()
    if a.cmd == "dump":
        try:
            d = dump(a.pin_dir, a.nilb)
        except (OSError, ValueError, AttributeError) as e:
            print("tables.py: cannot read the tables under %s: %s" % (a.pin_dir, e), file=sys.stderr)
            return 2
        with open(a.out, "w") as f:
            json.dump(d, f)
        print("; ".join("%s: %d buckets (%s)" % (s["key"], s["table_size"], ", ".join(
            "%s %d" % (b["dip"], b["buckets"]) for b in s["backends"] if b["buckets"]))
            for s in d["services"]) or "no services")
        return 0
    try:
        with open(a.before) as f:
            before = json.load(f)
        with open(a.after) as f:
            after = json.load(f)
        ok, lines, summary = compare(before, after)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("SUMMARY FAIL cannot read the dumps: %s" % e)
        return 2
    for line in lines:
        print(line)
    print(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
