#!/usr/bin/env python3
"""Uploads that need path MTU discovery, for the harness's (mtu) scenario
(Python 3 stdlib only).

    mtu.py pick   --nilb PATH --config CFG --client-ip IP --vip VIP [--port 80]
                  --not-first HOP --sport-base N --count N [--live PIN_DIR]
    mtu.py upload --host VIP [--port 80] --bind IP --sports P1,P2,... --bytes N
                  [--timeout S] [--out FILE]

pick: client source ports from --sport-base upwards whose flow CLIENT:PORT ->
VIP:PORT the config's table does not send to --not-first (the balancer, so that
the first hop is remote and the packet crosses the wire in GUE), asked with
`nilb lookup --json` (with --live: `--live --pin-dir PIN_DIR`, the running
daemon's table); prints one JSON line {"sports": [...], "first_hops": {HOP: N},
"skipped": N, "most_previous": N}, most_previous the most previous owners a
picked flow's bucket lists (its packets carry 36 + 4N bytes of GUE, so the
client learns a path MTU of 1500 - 36 - 4 x most_previous).

upload: one connection per source port, all at once, each sends an HTTP POST
with a body of --bytes bytes (full-sized segments: DF set, as Linux sends TCP)
and waits for the reply of backend.py (X-Backend names the server). A
connection that has not finished within --timeout seconds (from the start of
the run) is "hung": its segments vanish somewhere and no ICMP "fragmentation
needed" tells the client to send smaller ones. Prints one JSON line:
{"count", "ok", "hung", "failed", "by_backend", "seconds", "errors"}; --out
also writes it with per-connection details.
"""

import argparse
import json
import socket
import subprocess
import sys
import threading
import time


def cmd_pick(a):
    sports, hops, skipped, most = [], {}, 0, 0
    port = a.sport_base
    live = ["--live", "--pin-dir", a.live] if a.live else []
    while len(sports) < a.count and port < a.sport_base + 20 * a.count + 100:
        cmd = [a.nilb, "lookup", "--json", "--config", a.config] + live + [
            "%s:%d" % (a.client_ip, port), "%s:%d" % (a.vip, a.port), "tcp"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            d = json.loads(out.stdout)
            first = d.get("first_hop")
            previous = d.get("previous_hops") or []
        except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError):
            first, previous = None, []
        if first and first != a.not_first:
            sports.append(port)
            hops[first] = hops.get(first, 0) + 1
            most = max(most, len(previous))
        else:
            skipped += 1
        port += 1
    print(json.dumps({"sports": sports, "first_hops": hops, "skipped": skipped, "most_previous": most}))
    return 0 if len(sports) == a.count else 1


def upload_one(a, sport, deadline, rec):
    body = b"x" * a.bytes
    head = ("POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (a.host, a.bytes)).encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((a.bind, sport))
        s.settimeout(max(0.1, deadline - time.monotonic()))
        s.connect((a.host, a.port))
        rec["connected"] = True
        s.settimeout(max(0.1, deadline - time.monotonic()))
        s.sendall(head + body)
        rec["sent"] = True
        reply = b""
        while b"\r\n\r\n" not in reply:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
        status = reply.split(b"\r\n", 1)[0].decode(errors="replace")
        backend = None
        for line in reply.split(b"\r\n"):
            if line.lower().startswith(b"x-backend:"):
                backend = line.split(b":", 1)[1].strip().decode()
        if " 200 " in status + " " and backend:
            rec["result"] = "ok"
            rec["backend"] = backend
        else:
            rec["result"] = "failed"
            rec["error"] = "reply: %r" % status
    except (socket.timeout, TimeoutError):
        rec["result"] = "hung"
    except OSError as e:
        rec["result"] = "failed"
        rec["error"] = "%s (%s)" % (type(e).__name__, e.strerror or e)
    finally:
        rec["seconds"] = round(time.monotonic() - rec["start"], 3)
        s.close()


def cmd_upload(a):
    sports = [int(p) for p in a.sports.split(",") if p]
    start = time.monotonic()
    deadline = start + a.timeout
    recs = [{"sport": p, "start": start, "connected": False, "sent": False} for p in sports]
    threads = [threading.Thread(target=upload_one, args=(a, p, deadline, r), daemon=True)
               for p, r in zip(sports, recs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline + 2 - time.monotonic()))
    by_backend, errors = {}, {}
    for r in recs:
        r.setdefault("result", "hung")
        if r["result"] == "ok":
            by_backend[r["backend"]] = by_backend.get(r["backend"], 0) + 1
        elif r["result"] == "failed":
            errors[r.get("error", "?")] = errors.get(r.get("error", "?"), 0) + 1
        del r["start"]
    res = {
        "count": len(recs),
        "ok": sum(r["result"] == "ok" for r in recs),
        "hung": sum(r["result"] == "hung" for r in recs),
        "failed": sum(r["result"] == "failed" for r in recs),
        "by_backend": by_backend,
        "seconds": round(time.monotonic() - start, 3),
        "errors": errors,
    }
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(res, connections=recs), f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick", help="source ports whose first hop is not --not-first")
    p.add_argument("--nilb", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--client-ip", required=True)
    p.add_argument("--vip", required=True)
    p.add_argument("--port", type=int, default=80)
    p.add_argument("--not-first", required=True, help="address the first hop must not be")
    p.add_argument("--sport-base", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--live", metavar="PIN_DIR", help="look up in the running daemon's table under PIN_DIR")
    u = sub.add_parser("upload", help="concurrent HTTP POST uploads, one per source port")
    u.add_argument("--host", required=True)
    u.add_argument("--port", type=int, default=80)
    u.add_argument("--bind", required=True, help="client address to send from")
    u.add_argument("--sports", required=True, help="comma-separated source ports")
    u.add_argument("--bytes", type=int, default=100 * 1024)
    u.add_argument("--timeout", type=float, default=15.0, help="seconds for the whole run")
    u.add_argument("--out")
    a = ap.parse_args()
    return cmd_pick(a) if a.cmd == "pick" else cmd_upload(a)


if __name__ == "__main__":
    sys.exit(main())
