#!/usr/bin/env python3
"""Dump and compare nilb's live tables from its pinned maps (Python 3 stdlib only).

    tables.py dump    PIN_DIR --out FILE         every service's buckets as JSON
    tables.py compare BEFORE.json AFTER.json     bucket by bucket; one SUMMARY line

`nilb lookup --live` answers for one flow; this reads the whole table, so a
restart can be checked for "no bucket moved" over every bucket.  The maps are
read with the bpf(2) syscall through ctypes (no bpftool, no libbpf):
PIN_DIR/services is nilb's HASH_OF_MAPS (key struct nilb_service_key: VIP and
port in network order, protocol, pad); looking a key up from user space gives
the id of the inner ARRAY, whose entry 0 is the table header (table_mask,
service_index) and entries 1..table_size the buckets (struct nilb_bucket:
first_hop, second_hop in network order, first_slot, moved_at_s), see
bpf/nilb.h.

dump writes {"services": {"VIP:PORT/PROTO": {"table_size": N, "service_index": i,
"buckets": [[first, second, moved_at_s], ...]}}} (addresses dotted, "" for none).

compare prints differences (at most 10) and, last,
    SUMMARY <PASS|FAIL> services=N buckets=N moved=N second_changed=N age_changed=N
moved: first hop differs; second_changed: second hop differs; age_changed:
moved_at_s differs (the move history that paces later moves).  PASS when all
three are 0 and both dumps hold the same services.  Exit 0 on PASS, 1 on FAIL,
2 on unreadable input.
"""

import argparse
import ctypes
import json
import os
import platform
import socket
import struct
import sys

BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "riscv64": 280}
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_GET = 7
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_F_RDONLY = 1 << 3
PROTO = {6: "tcp", 17: "udp"}

_libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    nr = BPF_SYSCALL.get(platform.machine())
    if nr is None:
        raise OSError("unknown bpf syscall number for %s" % platform.machine())
    ret = _libc.syscall(nr, cmd, attr, len(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def obj_get(path):
    p = ctypes.create_string_buffer(path.encode())
    attr = ctypes.create_string_buffer(struct.pack("<QII", ctypes.addressof(p), 0, BPF_F_RDONLY), 64)
    return bpf(BPF_OBJ_GET, attr)


def map_info(fd):
    info = ctypes.create_string_buffer(80)
    attr = ctypes.create_string_buffer(struct.pack("<IIQ", fd, len(info), ctypes.addressof(info)), 64)
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    mtype, mid, key_size, value_size, max_entries = struct.unpack_from("<IIIII", info, 0)
    return {"type": mtype, "id": mid, "key_size": key_size, "value_size": value_size, "max_entries": max_entries}


def lookup(fd, key, value_size):
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value_size)
    attr = ctypes.create_string_buffer(
        struct.pack("<IxxxxQQQ", fd, ctypes.addressof(k), ctypes.addressof(v), 0), 64)
    bpf(BPF_MAP_LOOKUP_ELEM, attr)
    return v.raw


def keys(fd, key_size):
    out = []
    cur = None
    for _ in range(100000):
        nxt = ctypes.create_string_buffer(key_size)
        k = ctypes.create_string_buffer(cur, key_size) if cur is not None else None
        attr = ctypes.create_string_buffer(
            struct.pack("<IxxxxQQQ", fd, ctypes.addressof(k) if k is not None else 0, ctypes.addressof(nxt), 0), 64)
        try:
            bpf(BPF_MAP_GET_NEXT_KEY, attr)
        except OSError as e:
            if e.errno == 2:  # ENOENT: last key
                break
            raise
        cur = nxt.raw
        out.append(cur)
    return out


def addr(raw):
    return "" if raw == b"\0\0\0\0" else socket.inet_ntoa(raw)


def dump(pin_dir):
    outer = obj_get(os.path.join(pin_dir, "services"))
    try:
        oinfo = map_info(outer)
        services = {}
        for key in keys(outer, oinfo["key_size"]):
            vip = socket.inet_ntoa(key[0:4])
            port = struct.unpack("!H", key[4:6])[0]
            name = "%s:%d/%s" % (vip, port, PROTO.get(key[6], str(key[6])))
            inner_id = struct.unpack("<I", lookup(outer, key, 4))[0]
            attr = ctypes.create_string_buffer(struct.pack("<III", inner_id, 0, 0), 64)
            inner = bpf(BPF_MAP_GET_FD_BY_ID, attr)
            try:
                iinfo = map_info(inner)
                vs = iinfo["value_size"]
                head = lookup(inner, struct.pack("<I", 0), vs)
                mask, index = struct.unpack_from("<II", head, 0)
                size = mask + 1
                if size + 1 > iinfo["max_entries"]:
                    raise OSError("table of %s: size %d beyond its map (%d entries)" % (name, size, iinfo["max_entries"]))
                buckets = []
                for i in range(1, size + 1):
                    v = lookup(inner, struct.pack("<I", i), vs)
                    moved = struct.unpack_from("<I", v, 12)[0]
                    buckets.append([addr(v[0:4]), addr(v[4:8]), moved])
                services[name] = {"table_size": size, "service_index": index,
                                  "inner_map_id": inner_id, "buckets": buckets}
            finally:
                os.close(inner)
        return {"pin_dir": pin_dir, "services": services}
    finally:
        os.close(outer)


def compare(a, b):
    sa, sb = a["services"], b["services"]
    lines = []
    moved = second = age = total = 0
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
            if x[0] != y[0]:
                moved += 1
            if x[1] != y[1]:
                second += 1
            if x[2] != y[2]:
                age += 1
            if x != y and len(lines) < 10:
                lines.append("%s bucket %d: first %s second %s moved_at %s -> first %s second %s moved_at %s" % (
                    name, i, x[0] or "-", x[1] or "-", x[2], y[0] or "-", y[1] or "-", y[2]))
    ok = ok and moved == 0 and second == 0 and age == 0
    return ok, lines, "SUMMARY %s services=%d buckets=%d moved=%d second_changed=%d age_changed=%d" % (
        "PASS" if ok else "FAIL", len(set(sa) & set(sb)), total, moved, second, age)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump")
    p.add_argument("pin_dir")
    p.add_argument("--out", required=True)
    p = sub.add_parser("compare")
    p.add_argument("before")
    p.add_argument("after")
    a = ap.parse_args()
    if a.cmd == "dump":
        try:
            d = dump(a.pin_dir)
        except OSError as e:
            print("tables.py: cannot read the tables under %s: %s" % (a.pin_dir, e), file=sys.stderr)
            return 2
        with open(a.out, "w") as f:
            json.dump(d, f)
        print("; ".join("%s: %d buckets" % (n, s["table_size"]) for n, s in sorted(d["services"].items())) or "no services")
        return 0
    try:
        with open(a.before) as f:
            before = json.load(f)
        with open(a.after) as f:
            after = json.load(f)
    except (OSError, ValueError) as e:
        print("SUMMARY FAIL cannot read the dumps: %s" % e)
        return 2
    ok, lines, summary = compare(before, after)
    for line in lines:
        print(line)
    print(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
