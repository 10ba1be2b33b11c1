#!/usr/bin/env python3
"""Tiny HTTP/1.1 backend for the nilb netns harness (Python 3 stdlib only).

Every response names the server that produced it, so the client can tell which
backend a connection landed on:

    body:   "<name>\n"
    header: "X-Backend: <name>"

Usage (inside a node namespace):

    backend.py --name node2 --port 80 [--port 8080] [--bind 0.0.0.0]

Binds 0.0.0.0 by default, so both the VIP (held on lo) and the node address
answer.  Keep-alive is supported (HTTP/1.1, Content-Length on every reply);
idle connections are closed after --idle-timeout seconds.  GET and HEAD on any
path work; /healthz answers "ok" for future health checks.  POST reads its
Content-Length body (uploads, harness scenario mtu) and answers like GET, with
"X-Received: <bytes>".  Request logging is
off; one line per listener is printed at start ("listening on ...") so a
harness can wait for it.  SIGTERM (and SIGINT unless it was ignored at start)
stops the server and exits 0.

Both the "listening on" lines and the closing "stopped" line end with
"at=<epoch seconds>" (time.time(), microseconds): when the listening socket
began to accept, and when the listening sockets were closed (from then on the
kernel refuses new connections).  The harness measures health-check reaction
times from these.
"""

import argparse
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class Server6(Server):
    """The same on IPv6 only (beside an IPv4 server on the same port)."""

    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


def make_handler(name, idle_timeout, sick_file=None):
    body = (name + "\n").encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "nilb-harness-backend"
        sys_version = ""
        timeout = idle_timeout  # idle keep-alive connections are closed after this

        def _reply(self, send_body, received=None):
            code = 200
            if self.path.split("?", 1)[0] == "/healthz":
                payload = b"ok\n"
                if sick_file and os.path.exists(sick_file):
                    code, payload = 503, b"sick\n"
            else:
                payload = body
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("X-Backend", name)
            if received is not None:
                self.send_header("X-Received", str(received))
            self.end_headers()
            if send_body:
                self.wfile.write(payload)

        def do_GET(self):  # noqa: N802 (stdlib naming)
            self._reply(True)

        def do_HEAD(self):  # noqa: N802
            self._reply(False)

        def do_POST(self):  # noqa: N802
            left = int(self.headers.get("Content-Length") or 0)
            received = 0
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    self.close_connection = True
                    return
                received += len(chunk)
                left -= len(chunk)
            self._reply(True, received)

        def log_message(self, fmt, *args):  # quiet
            pass

        def handle_one_request(self):
            try:
                super().handle_one_request()
            except (ConnectionError, socket.timeout, TimeoutError):
                self.close_connection = True

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="backend name reported in body and X-Backend header")
    ap.add_argument("--port", type=int, action="append", help="TCP port to listen on (repeatable, default 80)")
    ap.add_argument("--bind", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    ap.add_argument("--bind6", default="::", help="IPv6 address to bind as well (default ::; '' for none)")
    ap.add_argument("--idle-timeout", type=float, default=300.0, help="close idle keep-alive connections after S seconds")
    ap.add_argument("--sick-file", help="while this file exists /healthz answers 503 (other paths and "
                    "open connections are served as usual): a health event without a reset")
    args = ap.parse_args()
    ports = args.port or [80]

    handler = make_handler(args.name, args.idle_timeout, args.sick_file)
    servers = []
    for port in ports:
        srv = Server((args.bind, port), handler)
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        print(f"backend {args.name} listening on {args.bind}:{port} at={time.time():.6f}", flush=True)
        if args.bind6:
            srv6 = Server6((args.bind6, port), handler)
            servers.append(srv6)
            threading.Thread(target=srv6.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    # a harness starts us in the background with SIGINT ignored: keep it that way so a
    # Ctrl-C on the harness's terminal leaves stopping us to the harness's cleanup
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while not stop.wait(1.0):
        pass
    # Stop listening at once: shutdown(2) on a listening TCP socket makes Linux
    # close the listener (queued and new connections are refused) while the fd
    # stays valid for the accept loops, which then end within their poll interval.
    for srv in servers:
        try:
            srv.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    closed = time.time()
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    time.sleep(0.2)  # requests already accepted finish (handler threads are daemons)
    print(f"backend {args.name} stopped at={closed:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
