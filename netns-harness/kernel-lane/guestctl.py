#!/usr/bin/env python3
"""Host side of the kernel lane's control channel (Python 3 stdlib only).

The guest's /init (netns-harness/kernel-lane/init) reads lines from its second
serial port, which QEMU connects to a unix socket on the host
(-chardev socket,server=on,wait=off). A line "KLCMD <nonce> <base64 script>"
runs the script with sh in the guest's /work; the guest answers
"KLBEGIN <nonce>", the script's output (stdout and stderr), then
"KLEND <nonce> <exit status>". Every call connects anew; output of an earlier
call that timed out is skipped (its nonce differs). Calls on one guest are
serialized with flock(SOCK.lock).

    guestctl.py ready SOCK TIMEOUT          wait until the guest answers (ping every 0.5 s)
    guestctl.py run SOCK TIMEOUT CMD        run CMD (a shell command line); print its
                                            output, exit with its status
    guestctl.py run SOCK TIMEOUT -f FILE    run the script FILE ("-": stdin)
    guestctl.py send SOCK CMD               send CMD and do not wait (e.g. poweroff -f)

Exit status of run: the command's; 124 if no answer within TIMEOUT seconds,
125 if the channel could not be used (no socket, refused).
"""

import base64
import fcntl
import os
import re
import socket
import sys
import time


def connect(path, deadline):
    last = None
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError as e:
            last = e
            s.close()
            time.sleep(0.1)
    raise OSError("cannot connect to %s: %s" % (path, last))


def lock(path, deadline):
    """One caller at a time per guest (the serial line carries one command at a time)."""
    f = open(path + ".lock", "a")
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if time.monotonic() >= deadline:
                f.close()
                raise OSError("channel %s busy" % path)
            time.sleep(0.02)


def call(path, script, timeout):
    """Run script in the guest. Returns (rc, output) or (None, partial output) on timeout."""
    deadline = time.monotonic() + timeout
    lk = lock(path, deadline)
    try:
        return call_locked(path, script, deadline)
    finally:
        lk.close()


def call_locked(path, script, deadline):
    nonce = "%d%04d" % (int(time.time() * 1000) % 10**9, os.getpid() % 10000)
    s = connect(path, deadline)
    try:
        line = "KLCMD %s %s\n" % (nonce, base64.b64encode(script.encode()).decode())
        s.settimeout(max(0.1, deadline - time.monotonic()))
        s.sendall(line.encode())
        buf = b""
        begin = ("KLBEGIN %s\n" % nonce).encode()
        end_re = re.compile(("KLEND %s (\\d+)\n" % nonce).encode())
        bad = ("KLBAD %s" % nonce).encode()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            s.settimeout(remaining)
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            buf += data
            if bad in buf:
                return 125, "guest could not decode the command (channel garbled)\n"
            i = buf.find(begin)
            if i >= 0:
                m = end_re.search(buf, i + len(begin))
                if m:
                    out = buf[i + len(begin):m.start()]
                    return int(m.group(1)), out.decode("utf-8", "replace")
        i = buf.find(begin)
        partial = buf[i + len(begin):] if i >= 0 else b""
        return None, partial.decode("utf-8", "replace")
    finally:
        s.close()


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    cmd, path = argv[1], argv[2]
    try:
        if cmd == "ready":
            timeout = float(argv[3])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    rc, out = call(path, "echo ok", min(0.5, max(0.2, deadline - time.monotonic())))
                except OSError:
                    time.sleep(0.2)
                    continue
                if rc == 0 and out.strip() == "ok":
                    return 0
            return 124
        if cmd == "send":
            lk = lock(path, time.monotonic() + 5)
            s = connect(path, time.monotonic() + 2)
            try:
                script = argv[3]
                s.sendall(("KLCMD 0 %s\n" % base64.b64encode(script.encode()).decode()).encode())
                time.sleep(0.2)
            finally:
                s.close()
                lk.close()
            return 0
        if cmd == "run":
            timeout = float(argv[3])
            if argv[4] == "-f":
                script = sys.stdin.read() if argv[5] == "-" else open(argv[5]).read()
            else:
                script = " ".join(argv[4:])
            rc, out = call(path, script, timeout)
            sys.stdout.write(out)
            sys.stdout.flush()
            if rc is None:
                sys.stderr.write("guestctl: no answer from the guest within %ss\n" % timeout)
                return 124
            return rc
    except OSError as e:
        sys.stderr.write("guestctl: %s\n" % e)
        return 125
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
