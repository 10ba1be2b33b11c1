#!/usr/bin/env python3
"""HTTP client for the nilb netns harness (Python 3 stdlib only).

Subcommands
-----------
burst   One request per NEW TCP connection, each bound to a distinct source port
        (sport-base + i, SO_REUSEADDR): connect, GET /, read the reply, close.
        Prints one JSON line:
          {"ok": n, "failed": n, "errors": {...}, "by_backend": {"node1": n, ...}, ...}
        --out FILE also writes the JSON plus the per-request list
        ("requests": [[sport, backend-or-null, error-or-null], ...]).
        Exit status 0 when every request succeeded, 1 otherwise.

hold    Open --count keep-alive HTTP/1.1 connections (distinct source ports), send
        one request on each and record the backend, write --state FILE (JSON),
        wait (bounded by --go-timeout) until the --go FILE exists, then send another
        request on every connection (--rounds K times, --interval S apart).
        Prints/writes (--out) a JSON result with per-connection first/later
        backends, resets (ConnectionResetError, BrokenPipeError, EOF), failures
        (timeouts, other errors) and whether each connection stayed on its backend.
        Exit status 0 only if every connection answered every round from the same
        backend with no reset and no failure.
        --want-backend NAME --want-count N: open up to --count connections but keep
        only the first N that landed on NAME (the others are closed after their
        first request); the rest of the run uses those N.
        --until FILE: after go, keep doing rounds (--interval apart) until FILE
        exists, then do one final round (bounded by --rounds and --max-seconds).

stream  New connections at a steady --rate for --duration seconds (one request
        each, distinct source ports like burst), each stamped with its wall-clock
        start time (time.time()), so a harness can line them up with events such as
        a backend stopping.  Writes --started FILE just before the first request;
        --stop-file ends the stream early.  JSON like burst; --out adds
        "requests": [[t_start, sport, backend-or-null, error-or-null, ms], ...].
        Exit status 0 when every request succeeded.

Every socket operation has an explicit timeout; every loop is bounded by count
and by time.
"""

import argparse
import errno
import json
import os
import socket
import sys
import time

RESET_KINDS = ("reset", "broken_pipe", "eof")


class HttpError(Exception):
    """Reply that is not a valid HTTP response."""


def classify(exc):
    """Map an exception to a short error kind (stable names used in JSON output)."""
    if isinstance(exc, ConnectionResetError):
        return "reset"
    if isinstance(exc, BrokenPipeError):
        return "broken_pipe"
    if isinstance(exc, EOFError):
        return "eof"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, HttpError):
        return "bad_reply"
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, "errno%d" % exc.errno)
    return type(exc).__name__


class Conn:
    """One TCP connection speaking minimal HTTP/1.1 with per-call deadlines."""

    def __init__(self, host, port, sport, timeout, bind_addr=""):
        self.host = host
        self.port = port
        self.sport = sport
        self.timeout = timeout
        self.buf = b""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if sport:
                self.sock.bind((bind_addr, sport))
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
        except BaseException:
            self.sock.close()
            raise

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv_more(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline exceeded")
        self.sock.settimeout(remaining)
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed by peer")
        self.buf += data

    def request(self, path="/", keepalive=True):
        """Send GET, read one full response. Returns (status, headers, body)."""
        deadline = time.monotonic() + self.timeout
        conn_hdr = "keep-alive" if keepalive else "close"
        req = (
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"User-Agent: nilb-harness\r\nConnection: {conn_hdr}\r\n\r\n"
        ).encode()
        self.sock.settimeout(self.timeout)
        self.sock.sendall(req)
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise HttpError("header too long")
            self._recv_more(deadline)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HttpError("bad status line %r" % lines[0][:80])
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._recv_more(deadline)
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body


def backend_of(headers, body):
    name = headers.get("x-backend")
    if not name:
        name = body.decode("utf-8", "replace").strip() or "unknown"
    return name


def write_json(path, obj):
    """Write JSON atomically (tmp file + rename) so readers never see half a file."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def cmd_burst(a):
    t0 = time.monotonic()
    budget_end = t0 + a.max_seconds
    ok = 0
    errors = {}
    by_backend = {}
    requests = []
    consecutive = 0
    aborted = None
    for i in range(a.count):
        sport = a.sport_base + i if a.sport_base else 0
        if time.monotonic() > budget_end:
            aborted = "time budget of %.0f s exceeded" % a.max_seconds
        elif a.max_consecutive_failures and consecutive >= a.max_consecutive_failures:
            aborted = "%d consecutive failures" % consecutive
        if aborted:
            errors["not_attempted"] = errors.get("not_attempted", 0) + 1
            requests.append([sport, None, "not_attempted"])
            continue
        conn = None
        try:
            conn = Conn(a.host, a.port, sport, a.timeout)
            status, headers, body = conn.request(a.path, keepalive=False)
            if status != 200:
                raise HttpError("status %d" % status)
            name = backend_of(headers, body)
            by_backend[name] = by_backend.get(name, 0) + 1
            ok += 1
            consecutive = 0
            requests.append([sport, name, None])
        except Exception as exc:  # noqa: BLE001 - every failure is counted, never fatal
            kind = classify(exc)
            errors[kind] = errors.get(kind, 0) + 1
            consecutive += 1
            requests.append([sport, None, kind])
        finally:
            if conn:
                conn.close()
    result = {
        "ok": ok,
        "failed": a.count - ok,
        "errors": errors,
        "by_backend": dict(sorted(by_backend.items())),
        "count": a.count,
        "target": "%s:%d" % (a.host, a.port),
        "sport_base": a.sport_base,
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    if aborted:
        result["aborted"] = aborted
    print(json.dumps(result, sort_keys=True), flush=True)
    if a.out:
        write_json(a.out, dict(result, requests=requests))
    return 0 if ok == a.count else 1


def cmd_hold(a):
    t0 = time.monotonic()
    conns = []  # list of dicts with live socket under "_conn"
    discarded = {}  # --want-backend: first backend of connections closed again
    setup_end = t0 + a.max_seconds
    for i in range(a.count):
        if a.want_backend and len(conns) >= a.want_count:
            break
        sport = a.sport_base + i if a.sport_base else 0
        rec = {"sport": sport, "first": None, "later": [], "status": "ok", "error": None}
        if time.monotonic() > setup_end:
            rec["status"] = "setup_failed"
            rec["error"] = "not_attempted (time budget)"
            conns.append(rec)
            continue
        try:
            c = Conn(a.host, a.port, sport, a.timeout)
            rec["_conn"] = c
            status, headers, body = c.request(a.path, keepalive=True)
            if status != 200:
                raise HttpError("status %d" % status)
            rec["first"] = backend_of(headers, body)
            if headers.get("connection", "").lower() == "close":
                raise HttpError("server refused keep-alive")
        except Exception as exc:  # noqa: BLE001
            rec["status"] = "setup_failed"
            rec["error"] = classify(exc)
        if a.want_backend and rec["first"] != a.want_backend:
            key = rec["first"] or "error:%s" % rec["error"]
            discarded[key] = discarded.get(key, 0) + 1
            c = rec.pop("_conn", None)
            if c:
                c.close()
            continue
        conns.append(rec)
    wanted = a.want_count if a.want_backend else a.count
    while len(conns) < wanted:  # --want-backend and too few landed there
        conns.append({"sport": 0, "first": None, "later": [], "status": "setup_failed",
                      "error": "not_opened (%d tried, too few on %s)" % (a.count, a.want_backend)})

    def public(rec):
        return {k: v for k, v in rec.items() if not k.startswith("_")}

    first_dist = {}
    for rec in conns:
        if rec["first"]:
            first_dist[rec["first"]] = first_dist.get(rec["first"], 0) + 1
    write_json(a.state, {
        "phase": "holding",
        "target": "%s:%d" % (a.host, a.port),
        "count": wanted,
        "established": sum(1 for r in conns if r["status"] == "ok"),
        "by_backend": dict(sorted(first_dist.items())),
        "discarded": dict(sorted(discarded.items())),
        "connections": [public(r) for r in conns],
    })

    go_deadline = time.monotonic() + a.go_timeout
    got_go = False
    while time.monotonic() < go_deadline:
        if os.path.exists(a.go):
            got_go = True
            break
        time.sleep(0.05)

    rounds_done = 0
    until_seen = None
    if got_go:
        phase2_end = time.monotonic() + a.max_seconds
        for rnd in range(a.rounds):
            if rnd:
                time.sleep(a.interval)
            if a.until and until_seen is None and os.path.exists(a.until):
                until_seen = rnd  # this round is the final one
            rounds_done += 1
            for rec in conns:
                if rec["status"] != "ok":
                    continue
                c = rec["_conn"]
                if time.monotonic() > phase2_end:
                    rec["status"] = "failed"
                    rec["error"] = "not_attempted in round %d (time budget)" % (rnd + 1)
                    c.close()
                    continue
                try:
                    status, headers, body = c.request(a.path, keepalive=True)
                    if status != 200:
                        raise HttpError("status %d" % status)
                    rec["later"].append(backend_of(headers, body))
                except Exception as exc:  # noqa: BLE001
                    kind = classify(exc)
                    rec["status"] = "reset" if kind in RESET_KINDS else "failed"
                    rec["error"] = "%s in round %d" % (kind, rnd + 1)
                    c.close()
            if until_seen is not None:
                break
    for rec in conns:
        c = rec.pop("_conn", None)
        if c:
            c.close()
        if rec["status"] == "ok":
            rec["same_backend"] = all(b == rec["first"] for b in rec["later"])
        else:
            rec["same_backend"] = None

    resets = sum(1 for r in conns if r["status"] == "reset")
    failures = sum(1 for r in conns if r["status"] in ("failed", "setup_failed"))
    changed = sum(1 for r in conns if r["same_backend"] is False)
    ok = sum(1 for r in conns if r["status"] == "ok" and r["same_backend"])
    if not got_go:
        ok = 0
    result = {
        "connections": wanted,
        "ok": ok,
        "resets": resets,
        "failures": failures,
        "setup_failed": sum(1 for r in conns if r["status"] == "setup_failed"),
        "changed_backend": changed,
        "go": got_go,
        "rounds": a.rounds,
        "rounds_done": rounds_done,
        "by_backend_first": dict(sorted(first_dist.items())),
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    if a.want_backend:
        result["want_backend"] = a.want_backend
        result["discarded"] = dict(sorted(discarded.items()))
    if a.until:
        result["until_seen"] = until_seen is not None
    if not got_go:
        result["error"] = "go file %s did not appear within %.0f s" % (a.go, a.go_timeout)
    print(json.dumps(result, sort_keys=True), flush=True)
    if a.out:
        write_json(a.out, dict(result, per_connection=conns))
    return 0 if (got_go and ok == wanted) else 1


def cmd_stream(a):
    count = a.count or int(round(a.rate * a.duration))
    if a.sport_base and a.sport_base + count - 1 > 65535:
        raise SystemExit("stream: sport-base + count exceeds 65535")
    period = 1.0 / a.rate
    errors = {}
    by_backend = {}
    requests = []
    ok = 0
    stopped = None
    if a.started:
        write_json(a.started, {"t": round(time.time(), 6)})
    wall0 = time.time()
    t0 = time.monotonic()
    end = t0 + a.duration + a.timeout + 1.0  # hard bound even if requests hang
    for i in range(count):
        due = t0 + i * period
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        if time.monotonic() > end:
            stopped = "time budget exceeded"
            break
        if a.stop_file and os.path.exists(a.stop_file):
            stopped = "stop file"
            break
        sport = a.sport_base + i if a.sport_base else 0
        start = time.time()
        m0 = time.monotonic()
        conn = None
        name = kind = None
        try:
            conn = Conn(a.host, a.port, sport, a.timeout)
            status, headers, body = conn.request(a.path, keepalive=False)
            if status != 200:
                raise HttpError("status %d" % status)
            name = backend_of(headers, body)
            by_backend[name] = by_backend.get(name, 0) + 1
            ok += 1
        except Exception as exc:  # noqa: BLE001 - every failure is counted, never fatal
            kind = classify(exc)
            errors[kind] = errors.get(kind, 0) + 1
        finally:
            if conn:
                conn.close()
        requests.append([round(start, 6), sport, name, kind, round((time.monotonic() - m0) * 1000, 2)])
    result = {
        "ok": ok,
        "failed": len(requests) - ok,
        "sent": len(requests),
        "planned": count,
        "errors": errors,
        "by_backend": dict(sorted(by_backend.items())),
        "rate": a.rate,
        "target": "%s:%d" % (a.host, a.port),
        "sport_base": a.sport_base,
        "t_first": round(wall0, 6),
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    if stopped:
        result["stopped"] = stopped
    print(json.dumps(result, sort_keys=True), flush=True)
    if a.out:
        write_json(a.out, dict(result, requests=requests))
    return 0 if ok == len(requests) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--host", required=True)
        p.add_argument("--port", type=int, default=80)
        p.add_argument("--count", type=int, required=True)
        p.add_argument("--sport-base", type=int, default=20000,
                       help="first source port (sport-base + i per connection); 0 = kernel's choice")
        p.add_argument("--timeout", type=float, default=2.0, help="per request/connect timeout, seconds")
        p.add_argument("--path", default="/")
        p.add_argument("--out", help="also write the JSON result (with per-connection details) here")

    b = sub.add_parser("burst", help="one request per new connection")
    common(b)
    b.add_argument("--max-seconds", type=float, default=60.0, help="overall time budget")
    b.add_argument("--max-consecutive-failures", type=int, default=0,
                   help="stop after this many failures in a row (0 = never)")

    h = sub.add_parser("hold", help="long-lived keep-alive connections across a change")
    common(h)
    h.add_argument("--state", required=True, help="JSON written once all connections are up")
    h.add_argument("--go", required=True, help="file whose appearance starts the second phase")
    h.add_argument("--go-timeout", type=float, default=120.0)
    h.add_argument("--rounds", type=int, default=1)
    h.add_argument("--interval", type=float, default=0.5)
    h.add_argument("--max-seconds", type=float, default=30.0,
                   help="time budget for opening the connections, and again for the rounds after go")
    h.add_argument("--want-backend", help="keep only connections that landed on this backend")
    h.add_argument("--want-count", type=int, default=0, help="how many to keep (with --want-backend)")
    h.add_argument("--until", help="after go: rounds until this file exists, then one final round")

    st = sub.add_parser("stream", help="new connections at a steady rate, time-stamped")
    st.add_argument("--host", required=True)
    st.add_argument("--port", type=int, default=80)
    st.add_argument("--rate", type=float, required=True, help="new connections per second")
    st.add_argument("--duration", type=float, required=True, help="seconds")
    st.add_argument("--count", type=int, default=0, help="requests (default rate x duration)")
    st.add_argument("--sport-base", type=int, default=20000,
                    help="first source port (sport-base + i per request); 0 = kernel's choice")
    st.add_argument("--timeout", type=float, default=1.0, help="per request/connect timeout, seconds")
    st.add_argument("--path", default="/")
    st.add_argument("--started", help="JSON file written just before the first request")
    st.add_argument("--stop-file", help="stop early once this file exists")
    st.add_argument("--out", help="also write the JSON result with per-request details here")

    a = ap.parse_args()
    if a.cmd == "stream":
        if a.rate <= 0 or a.duration <= 0:
            ap.error("--rate and --duration must be positive")
        return cmd_stream(a)
    if a.sport_base and a.sport_base + a.count - 1 > 65535:
        ap.error("sport-base + count exceeds 65535")
    if a.cmd == "hold" and a.want_backend and a.want_count <= 0:
        ap.error("--want-backend needs --want-count N > 0")
    if a.cmd == "burst":
        return cmd_burst(a)
    return cmd_hold(a)


if __name__ == "__main__":
    sys.exit(main())
