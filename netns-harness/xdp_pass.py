#!/usr/bin/env python3
"""Attach a 2-instruction XDP_PASS program (native mode) to veth devices.

    xdp_pass.py DEV [DEV...]          (run inside the namespace that holds DEV)

Why: on this kernel a frame that an XDP program sends back out of a veth with
XDP_TX (nilb's balancer path) goes into the *peer's* queue, and the peer's NAPI
is only kicked when the peer has an XDP program of its own.  With GRO alone on
the peer the frames are not dropped but sit in the queue until unrelated
traffic from the same side wakes the peer up (seen: SYNs delayed for seconds,
connections time out); with neither, they are dropped (xdp_tx_errors).  The
harness therefore puts this pass-through program on every bridge-side veth end
(and turns GRO on as well).

Python 3 stdlib only: the program is loaded with the bpf(2) syscall through
ctypes and attached with an RTM_SETLINK netlink message (IFLA_XDP), so no clang
or libbpf is needed.  The attachment outlives this process and goes away with
the device.  Exit status 0 when every device got the program.
"""

import ctypes
import os
import platform
import socket
import struct
import sys

BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "riscv64": 280}
BPF_PROG_LOAD = 5
BPF_PROG_TYPE_XDP = 6
XDP_PASS = 2
XDP_FLAGS_DRV_MODE = 1 << 2

RTM_SETLINK = 19
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_ERROR = 0x2
IFLA_XDP = 43
IFLA_XDP_FD = 1
IFLA_XDP_FLAGS = 3
NLA_F_NESTED = 0x8000


def load_xdp_pass():
    libc = ctypes.CDLL(None, use_errno=True)
    nr = BPF_SYSCALL.get(platform.machine())
    if nr is None:
        raise OSError("unknown bpf syscall number for %s" % platform.machine())
    # r0 = XDP_PASS; exit
    insns = struct.pack("<BBhi", 0xB7, 0x00, 0, XDP_PASS) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    insn_buf = ctypes.create_string_buffer(insns, len(insns))
    license_buf = ctypes.create_string_buffer(b"GPL")
    log_buf = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQQIIQ", attr, 0,
                     BPF_PROG_TYPE_XDP, len(insns) // 8,
                     ctypes.addressof(insn_buf), ctypes.addressof(license_buf),
                     1, len(log_buf), ctypes.addressof(log_buf))
    name = b"harness_pass"
    attr[48:48 + len(name)] = name
    fd = libc.syscall(nr, BPF_PROG_LOAD, attr, len(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, "BPF_PROG_LOAD: %s %s" % (os.strerror(err), log_buf.value.decode(errors="replace")))
    return fd


def nla(atype, payload):
    length = 4 + len(payload)
    return struct.pack("<HH", length, atype) + payload + b"\0" * ((4 - length % 4) % 4)


def attach(ifindex, prog_fd):
    inner = nla(IFLA_XDP_FD, struct.pack("<i", prog_fd)) + nla(IFLA_XDP_FLAGS, struct.pack("<I", XDP_FLAGS_DRV_MODE))
    body = struct.pack("<BxHiII", socket.AF_UNSPEC, 0, ifindex, 0, 0) + nla(IFLA_XDP | NLA_F_NESTED, inner)
    seq = 1
    msg = struct.pack("<IHHII", 16 + len(body), RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    try:
        s.settimeout(5)
        s.bind((0, 0))
        s.send(msg)
        data = s.recv(65536)
    finally:
        s.close()
    _length, mtype, _flags, _seq, _pid = struct.unpack_from("<IHHII", data, 0)
    if mtype != NLMSG_ERROR:
        raise OSError("unexpected netlink reply type %d" % mtype)
    (err,) = struct.unpack_from("<i", data, 16)
    if err != 0:
        raise OSError(-err, "RTM_SETLINK IFLA_XDP: %s" % os.strerror(-err))


def main():
    devs = sys.argv[1:]
    if not devs or devs[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if devs else 2
    try:
        fd = load_xdp_pass()
    except OSError as exc:
        print("xdp_pass: cannot load program: %s" % exc, file=sys.stderr)
        return 1
    rc = 0
    for dev in devs:
        try:
            attach(socket.if_nametoindex(dev), fd)
            print("xdp_pass: attached to %s" % dev)
        except OSError as exc:
            print("xdp_pass: %s: %s" % (dev, exc), file=sys.stderr)
            rc = 1
    os.close(fd)
    return rc


if __name__ == "__main__":
    sys.exit(main())
