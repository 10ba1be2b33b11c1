#!/usr/bin/env python3
"""Long-lived downloads from one backend, read slowly (Python 3 stdlib only).

    slowget.py --host VIP --port 80 --path /big --want node1 --want-count 4
               --count 40 --sport-base 28000 --state FILE --until FILE
               [--rate-kib 32] [--max-seconds 120] [--out FILE]

Opens up to --count connections (distinct source ports, a small receive
buffer), each sending "GET PATH HTTP/1.0"; the body's first line names the
backend (the kernel lane's busybox httpd serves a file starting "node1\\n").
Connections that landed elsewhere are closed; the first --want-count that
landed on --want are kept and --state FILE is written. Each kept connection
is then read at about --rate-kib KiB/s until the --until FILE exists, after
that at full speed to the end of the body (Content-Length). So the
connections live, with data and ACKs flowing, across whatever happens before
--until appears (a weight change moving their buckets away from the backend).

Prints one JSON line {"connections": n, "ok": n, "resets": n, "failed": n,
"bytes": [...], "errors": {...}} and exits 0 only if every kept connection
received its whole body with no reset.
"""

import argparse
import errno
import json
import os
import socket
import sys
import time


def classify(exc):
    if isinstance(exc, ConnectionResetError):
        return "reset"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, EOFError):
        return "eof"
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, "errno%d" % exc.errno)
    return type(exc).__name__


def open_one(a, sport, deadline):
    s = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.bind(("", sport))
    s.settimeout(a.timeout)
    s.connect((a.host, a.port))
    s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (a.path, a.host)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf or b"\n" not in buf.split(b"\r\n\r\n", 1)[1]:
        if time.monotonic() > deadline:
            raise socket.timeout("deadline")
        d = s.recv(2048)
        if not d:
            # a short reply (another backend's body) ends here
            break
        buf += d
        if len(buf) > 65536:
            break
    head, _, body = buf.partition(b"\r\n\r\n")
    length = None
    for line in head.decode("latin-1").split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
        if k.strip().lower() == "x-backend":
            return s, v.strip(), length, len(body)
    name = body.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return s, name, length, len(body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--path", default="/big")
    ap.add_argument("--want", required=True)
    ap.add_argument("--want-count", type=int, default=4)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--sport-base", type=int, default=28000)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--state", required=True)
    ap.add_argument("--until", required=True)
    ap.add_argument("--rate-kib", type=float, default=32.0)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.monotonic()
    deadline = t0 + a.max_seconds
    kept, others, errors = [], {}, {}
    for i in range(a.count):
        if len(kept) >= a.want_count or time.monotonic() > deadline:
            break
        try:
            s, name, length, got = open_one(a, a.sport_base + i, deadline)
        except OSError as e:
            errors["open_" + classify(e)] = errors.get("open_" + classify(e), 0) + 1
            continue
        if name == a.want and length:
            kept.append({"sock": s, "sport": a.sport_base + i, "length": length, "got": got, "status": "reading"})
        else:
            others[name] = others.get(name, 0) + 1
            s.close()
    tmp = a.state + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"kept": len(kept), "others": others, "errors": errors}, f)
    os.replace(tmp, a.state)
    # slowly until the --until file exists, then at full speed
    chunk = 1024
    while any(c["status"] == "reading" for c in kept) and time.monotonic() < deadline:
        fast = os.path.exists(a.until)
        for c in kept:
            if c["status"] != "reading":
                continue
            try:
                c["sock"].settimeout(a.timeout)
                d = c["sock"].recv(65536 if fast else chunk)
                if not d:
                    c["status"] = "ok" if c["got"] >= c["length"] else "eof"
                    continue
                c["got"] += len(d)
                if c["got"] >= c["length"]:
                    c["status"] = "ok"
            except OSError as e:
                c["status"] = classify(e)
        if not fast and kept:
            time.sleep(chunk / 1024.0 / a.rate_kib)
    for c in kept:
        if c["status"] == "reading":
            c["status"] = "timeout"
        c["sock"].close()
        del c["sock"]
    res = {
        "connections": len(kept),
        "ok": sum(1 for c in kept if c["status"] == "ok"),
        "resets": sum(1 for c in kept if c["status"] == "reset"),
        "failed": sum(1 for c in kept if c["status"] not in ("ok", "reset")),
        "bytes": [c["got"] for c in kept],
        "others": others,
        "errors": errors,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(res, sort_keys=True), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(res, per_connection=kept), f, indent=1)
    return 0 if kept and len(kept) == a.want_count and res["ok"] == len(kept) else 1


if __name__ == "__main__":
    sys.exit(main())
