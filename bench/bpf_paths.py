#!/usr/bin/env python3
"""Instructions executed per packet path of nilb's BPF programs (stdlib only).

    bpf_paths.py OBJ.o [--json]

Runs nilb_xdp_balancer, nilb_xdp_backend (section xdp.frags) and
nilb_tc_second_chance from a compiled bpf/nilb.bpf.c
in a small BPF interpreter, on the same packets as the data-plane benchmark,
with map contents and helper results of a configured node (see SCENARIOS), and
counts the BPF instructions executed, the helper calls and the map lookups on
each path. Each packet is run twice on the same maps and the second run is
reported (steady state: caches the program keeps in maps are warm). There are no hardware counters on the benchmark machine, so this is
how "instructions per path" is measured.

The count is of the compiled bytecode as loaded (clang -O2). The kernel then
rewrites it ("xlated"): context field accesses become loads from the kernel's
structures (about one instruction each), and array, per-CPU array and hash-of-
maps lookups are inlined (about 4-7 instructions replacing a call); the JIT then
emits about 1-3 x86 instructions per BPF instruction. Helper calls (FIB lookup,
socket lookup, adjust_room...) run kernel code not counted here; their cost is
in BENCHMARKS.md's probes.
"""

import json
import struct
import sys

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1

# ---------------------------------------------------------------- ELF


def elf_sections(blob):
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", blob, shoff + i * shentsize)
        secs.append(dict(name_off=name, type=typ, off=off, size=size, link=link, info=info))
    strtab = secs[shstrndx]
    for s in secs:
        end = blob.index(b"\0", strtab["off"] + s["name_off"])
        s["name"] = blob[strtab["off"] + s["name_off"]:end].decode()
    return secs


def load_program(path, section):
    """Instructions of `section` followed by those of .text (subprograms),
    map relocations by instruction index, subprogram call targets, and the
    instruction index of every function symbol of `section` (a section may
    hold several programs: SEC("xdp") has the balancer and its IPv6
    program)."""
    blob = open(path, "rb").read()
    secs = elf_sections(blob)
    by_name = {s["name"]: s for s in secs}
    symtab = by_name[".symtab"]
    strtab = secs[symtab["link"]]
    syms = []
    entries = {}
    sec_index = secs.index(by_name[section]) if section in by_name else -1
    for i in range(symtab["size"] // 24):
        st_name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", blob, symtab["off"] + 24 * i)
        end = blob.index(b"\0", strtab["off"] + st_name)
        name = blob[strtab["off"] + st_name:end].decode()
        if not name and (info & 0xF) == 3:  # section symbol: the section's name
            name = secs[shndx]["name"]
        if (info & 0xF) == 2 and shndx == sec_index:  # a function of `section`
            entries[name] = value // 8
        syms.append((name, value))
    insns, relocs, calls = [], {}, {}
    bases = {}
    for sec in (section, ".text"):
        s = by_name.get(sec)
        if not s or s["size"] == 0:
            continue
        base = len(insns)
        bases[sec] = base
        insns += [struct.unpack_from("<BBhi", blob, s["off"] + 8 * i) for i in range(s["size"] // 8)]
        rel = by_name.get(".rel" + sec)
        if rel:
            for i in range(rel["size"] // 16):
                r_off, r_info = struct.unpack_from("<QQ", blob, rel["off"] + 16 * i)
                name, value = syms[r_info >> 32]
                idx = base + r_off // 8
                if (r_info & 0xFFFFFFFF) == 10:  # R_BPF_64_32: call to a subprogram
                    calls[idx] = (name, value)
                else:
                    relocs[idx] = name
    # resolve subprogram calls into absolute instruction indexes
    targets = {}
    for idx, (name, value) in calls.items():
        sec = name if name in bases else ".text"
        targets[idx] = bases.get(sec, 0) + value // 8 + insns[idx][3] + 1
    return insns, relocs, targets, entries


# ---------------------------------------------------------------- machine

HELPERS = {1: "map_lookup_elem", 5: "ktime_get_ns", 9: "skb_store_bytes", 23: "redirect", 28: "csum_diff",
           38: "skb_change_tail",
           44: "xdp_adjust_head", 50: "skb_adjust_room", 54: "xdp_adjust_meta",
           39: "skb_pull_data", 65: "xdp_adjust_tail", 69: "fib_lookup", 84: "sk_lookup_tcp", 85: "sk_lookup_udp",
           86: "sk_release", 99: "skc_lookup_tcp", 100: "tcp_check_syncookie",
           118: "jiffies64", 152: "redirect_neigh", 160: "ktime_get_coarse_ns", 163: "check_mtu"}


class Fault(Exception):
    pass


class Mem:
    def __init__(self):
        self.regions = []  # (base, bytearray, name)
        self.next = 0x40000000

    def add(self, data, name, base=None):
        if base is None:
            base = self.next
            self.next += (len(data) + 0xfff) & ~0xfff
            self.next += 0x1000
        self.regions.append((base, data, name))
        return base

    def find(self, addr, size):
        for base, data, name in self.regions:
            if base <= addr and addr + size <= base + len(data):
                return data, addr - base
        raise Fault(f"bad memory access at {addr:#x} size {size}")

    def read(self, addr, size):
        data, off = self.find(addr, size)
        return int.from_bytes(data[off:off + size], "little")

    def write(self, addr, size, value):
        data, off = self.find(addr, size)
        data[off:off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def bytes(self, addr, size):
        data, off = self.find(addr, size)
        return bytes(data[off:off + size])


def sx(v, bits=64):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Run:
    def __init__(self, insns, relocs, scenario, targets=None):
        self.insns, self.relocs, self.sc = insns, relocs, scenario
        self.targets = targets or {}
        self.mem = Mem()
        self.maps = {}
        self.values = {}
        self.count = 0
        self.helpers = {}
        self.lookups = {}
        self.counters = []
        self.pcs = {}

    def map_handle(self, name):
        if name not in self.maps:
            self.maps[name] = 0xF0000000 + 0x100 * len(self.maps)
        return self.maps[name]

    def value(self, key, init=None, size=64):
        if key not in self.values:
            buf = bytearray(size)
            if init:
                buf[:len(init)] = init
            self.values[key] = self.mem.add(buf, str(key))
        return self.values[key]

    def lookup(self, handle, keyaddr):
        name = next((n for n, h in self.maps.items() if h == handle), None)
        sc = self.sc
        self.lookups[name] = self.lookups.get(name, 0) + 1
        if name == "counters":
            k = self.mem.read(keyaddr, 4)
            self.counters.append(k)
            return self.value(("counters", k))
        if name in ("service_stats", "backend_stats"):
            return self.value((name, self.mem.read(keyaddr, 4)))
        if name == "nilb_config":
            return self.value("config", sc["config"])
        if name == "services":
            k = self.mem.bytes(keyaddr, 8)
            svc = sc.get("services", {}).get(k)
            if svc is None:
                return 0
            return self.value(("services", k), sc["tables"][svc]["service"])
        if name == "buckets":
            idx = self.mem.read(keyaddr, 4)
            for t in sc["tables"].values():
                base, mask = struct.unpack_from("<II", t["service"])
                if base <= idx <= base + mask:
                    return self.value(("buckets", idx), t["bucket"])
            return 0
        if name == "bucket_first":
            # four buckets per element: each the first hop's slot, with
            # 0x8000 when the bucket lists previous owners
            elem = self.mem.read(keyaddr, 4)
            lanes = []
            for idx in range(elem * 4, elem * 4 + 4):
                e = 0
                for t in sc["tables"].values():
                    base, mask = struct.unpack_from("<II", t["service"])
                    if base <= idx <= base + mask:
                        hops = struct.unpack("<HHHH", t["bucket"])
                        e = hops[0] | (0x8000 if hops[1] else 0)
                lanes.append(e)
            return self.value(("bucket_first", elem), struct.pack("<HHHH", *lanes))
        if name == "backends":
            slot = self.mem.read(keyaddr, 4)
            addr = sc.get("backends", {}).get(slot, 0)
            return self.value(("backends", slot), struct.pack("<IIIII", addr, 0, 0, 0, 4 if addr else 0))
        if name in ("vips", "cluster_nodes"):
            return self.value((name, 0)) if self.mem.read(keyaddr, 4) in sc.get(name, ()) else 0
        if name in ("vips6", "cluster_nodes6"):
            return self.value((name, 0)) if self.mem.bytes(keyaddr, 16) in sc.get(name, ()) else 0
        pre = sc.get("prefill", {}).get(name)
        return self.value((name, self.mem.read(keyaddr, 4)), pre)

    def helper(self, hid, r):
        name = HELPERS.get(hid, f"helper{hid}")
        self.helpers[name] = self.helpers.get(name, 0) + 1
        sc = self.sc
        if hid == 1:
            return self.lookup(r[1], r[2])
        if hid == 44:  # xdp_adjust_head(ctx, delta)
            self.mem.write(r[1] + 0, 4, self.mem.read(r[1], 4) + sx(r[2], 32))
            self.mem.write(r[1] + 8, 4, self.mem.read(r[1], 4))
            return 0
        if hid == 65:
            self.mem.write(r[1] + 4, 4, self.mem.read(r[1] + 4, 4) + sx(r[2], 32))
            return 0
        if hid == 54:
            self.mem.write(r[1] + 8, 4, self.mem.read(r[1] + 8, 4) + sx(r[2], 32))
            return 0
        if hid == 69:  # fib_lookup(ctx, params, len, flags)
            rc = sc.get("fib_rc", 0)
            if rc == 8:  # BPF_FIB_LKUP_RET_FRAG_NEEDED: mtu_result (union with tot_len)
                self.mem.write(r[2] + 6, 2, sc.get("fib_mtu", 1500))
                return rc
            self.mem.write(r[2] + 52, 6, 0x020000000001)
            self.mem.write(r[2] + 58, 6, 0x0200000000AA)
            return rc
        if hid == 163:  # check_mtu(ctx, ifindex, *mtu_len, len_diff, flags): fits
            self.mem.write(r[3], 4, sc.get("dev_mtu", 1500))
            return 0
        if hid in (84, 85, 99):
            st = sc.get("socket")
            if st is None:
                return 0
            buf = bytearray(80)
            struct.pack_into("<I", buf, 72, st)
            struct.pack_into("<H", buf, 48, sc.get("socket_dport", 0))
            return self.mem.add(buf, "sock")
        if hid == 86:
            return 0
        if hid == 100:
            return (-1) & M64
        if hid in (50, 39, 38, 9):  # skb_adjust_room, skb_pull_data, skb_change_tail, skb_store_bytes
            return 0
        if hid in (23, 152):
            return 7 if sc["kind"] == "tc" else 4
        if hid in (5, 118, 160):
            return 1
        raise Fault(f"helper {hid} not modelled")

    def run(self, ctx_addr, limit=100000, entry=0):
        r = [0] * 11
        r[1] = ctx_addr
        stack = self.mem.add(bytearray(512), "stack")
        r[10] = stack + 512
        frames = []
        pc = entry
        ins = self.insns
        while True:
            if self.count > limit:
                raise Fault("instruction limit")
            op, regs, off, imm = ins[pc]
            dst, src = regs & 0xF, regs >> 4
            cls = op & 7
            self.count += 1
            self.pcs[pc] = self.pcs.get(pc, 0) + 1
            if cls in (4, 7):  # ALU / ALU64
                code = op & 0xF0
                b = r[src] if op & 8 else (imm & M64 if cls == 7 else imm & M32)
                a = r[dst]
                if cls == 4:
                    a &= M32
                    b &= M32
                bits = 64 if cls == 7 else 32
                if code == 0x00: v = a + b
                elif code == 0x10: v = a - b
                elif code == 0x20: v = a * b
                elif code == 0x30: v = a // b if b else 0
                elif code == 0x40: v = a | b
                elif code == 0x50: v = a & b
                elif code == 0x60: v = a << (b & (bits - 1))
                elif code == 0x70: v = a >> (b & (bits - 1))
                elif code == 0x80: v = -a
                elif code == 0x90: v = a % b if b else a
                elif code == 0xA0: v = a ^ b
                elif code == 0xB0: v = b
                elif code == 0xC0: v = sx(a, bits) >> (b & (bits - 1))
                elif code == 0xD0:  # endianness
                    size = imm // 8
                    x = r[dst] & ((1 << imm) - 1)
                    if op & 8 or cls == 7:  # to big endian (host is little)
                        x = int.from_bytes(x.to_bytes(size, "little"), "big")
                    v = x
                    bits = 64
                else:
                    raise Fault(f"alu op {op:#x}")
                r[dst] = v & (M64 if bits == 64 else M32)
                pc += 1
            elif cls in (5, 6):  # JMP / JMP32
                code = op & 0xF0
                if code == 0x80:  # call
                    if src == 1:  # bpf-to-bpf call: new frame, callee-saved r6-r9
                        frames.append((pc + 1, r[6:10], r[10]))
                        r[10] = self.mem.add(bytearray(512), "stack") + 512
                        pc = self.targets.get(pc, pc + imm + 1)
                        continue
                    r[0] = self.helper(imm, r) & M64
                    for i in range(1, 6):
                        r[i] = 0xDEAD
                    pc += 1
                    continue
                if code == 0x90:
                    if frames:
                        pc, r[6:10], r[10] = frames.pop()
                        continue
                    return r[0]
                if code == 0x00:
                    pc += 1 + off
                    continue
                a = r[dst]
                b = r[src] if op & 8 else imm & M64
                bits = 64
                if cls == 6:
                    a &= M32
                    b &= M32
                    bits = 32
                else:
                    b &= M64
                sa, sb = sx(a, bits), sx(b, bits)
                t = {0x10: a == b, 0x20: a > b, 0x30: a >= b, 0x40: a & b != 0, 0x50: a != b,
                     0x60: sa > sb, 0x70: sa >= sb, 0xA0: a < b, 0xB0: a <= b, 0xC0: sa < sb,
                     0xD0: sa <= sb}[code]
                pc += 1 + (off if t else 0)
            elif cls == 0:  # LD imm64
                if op != 0x18:
                    raise Fault(f"ld op {op:#x}")
                if pc in self.relocs:
                    r[dst] = self.map_handle(self.relocs[pc])
                else:
                    r[dst] = (imm & M32) | ((ins[pc + 1][3] & M32) << 32)
                pc += 2
            else:  # LDX / ST / STX
                size = {0x00: 4, 0x08: 2, 0x10: 1, 0x18: 8}[op & 0x18]
                mode = op & 0xE0
                if mode != 0x60:
                    raise Fault(f"memory mode {op:#x}")
                if cls == 1:
                    r[dst] = self.mem.read((r[src] + off) & M64, size)
                elif cls == 2:
                    self.mem.write((r[dst] + off) & M64, size, imm)
                else:
                    self.mem.write((r[dst] + off) & M64, size, r[src])
                pc += 1


# ---------------------------------------------------------------- packets


def ip4(s):
    return bytes(int(x) for x in s.split("."))


def u32(s):
    return int.from_bytes(ip4(s), "little")


def csum(b):
    s = sum(int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload):
    h = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0x4000, 64, proto, 0,
                              ip4(src), ip4(dst)))
    struct.pack_into(">H", h, 10, csum(h))
    return bytes(h) + payload


def tcp(sport, dport, flags, n=10):
    return struct.pack(">HHIIBBHHH", sport, dport, 1000, 2000, 0x50, flags, 64240, 0, 0) + bytes(n)


def udp(sport, dport, payload):
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


def eth(l3):
    return bytes.fromhex("020000000001") + bytes.fromhex("020000000050") + b"\x08\x00" + l3


VIP, NODE, TC_NODE = "10.99.0.100", "10.99.0.1", "10.99.0.12"


def gue(flags, sport=41000, hop="10.99.0.13", inner=None, next_hop=0, udp_csum=False):
    if inner is None:
        inner = ipv4("10.99.0.2", VIP, 6, tcp(sport, 80, flags))
    g = bytes([2, 4, 0, 0, 0, 0, next_hop, 1]) + ip4(hop) + inner
    u = bytearray(udp(0x8000 | 1234, 19523, g))
    if udp_csum:
        pseudo = ip4(NODE) + ip4(TC_NODE) + struct.pack(">BBH", 0, 17, len(u))
        struct.pack_into(">H", u, 6, csum(pseudo + bytes(u) + bytes(len(u) % 2)) or 0xFFFF)
    return eth(ipv4(NODE, TC_NODE, 17, bytes(u)))


def ip6(s):
    import ipaddress
    return ipaddress.IPv6Address(s).packed


NODE6, TC_NODE6 = "fd99::1", "fd99::12"


def gue_o6(inner, inner_proto=4, src=NODE6, dst=TC_NODE6):
    """GUE in outer IPv6 (an IPv6 cluster network) from `src` to `dst`, no
    hop listed, around `inner` (GUE protocol `inner_proto`), as the
    benchmark's gue6_frame."""
    g = bytes([1, inner_proto, 0, 0, 0, 0, 0, 0]) + inner
    u = udp(0x8000 | 1234, 19523, g)
    l3 = struct.pack(">IHBB", 6 << 28, len(u), 17, 64) + ip6(src) + ip6(dst) + u
    return bytes.fromhex("020000000001") + bytes.fromhex("020000000050") + b"\x86\xdd" + l3


def icmp_error(proto, sport, dport, typ=3, code=4):
    """ICMP error to the VIP quoting a packet the VIP sent (VIP:sport -> client:dport)."""
    quoted = ipv4(VIP, "10.99.0.2", proto, struct.pack(">HHI", sport, dport, 0))[:28]
    m = bytearray(struct.pack(">BBHHH", typ, code, 0, 0, 1400) + quoted)
    struct.pack_into(">H", m, 2, csum(bytes(m)))
    return ipv4("10.99.0.77", VIP, 1, bytes(m))


def echo():
    m = bytearray(struct.pack(">BBHHH", 8, 0, 0, 1, 1) + bytes(8))
    struct.pack_into(">H", m, 2, csum(bytes(m)))
    return ipv4("10.99.0.2", VIP, 1, bytes(m))


def config(node, flags=0):
    # node, hash seed, GUE port, icmp_too_big_rate 1000, flags
    return struct.pack("<IIHHI", u32(node), 0x5EED1234, struct.unpack("<H", struct.pack(">H", 19523))[0], 1000, flags)


def skey(port, proto=6):
    return ip4(VIP) + struct.pack(">H", port) + bytes([proto, 0])


# Backend slots (the `backends` map): slot -> address; slot 0 is never used.
SLOTS = {u32("10.99.0.%d" % h): h - 10 for h in range(11, 17)}
BACKENDS = {slot: addr for addr, slot in SLOTS.items()}


def table(first, *previous, index=0):
    """A service whose every bucket has first hop `first` and the previous
    owners `previous` (newest first), its region at index * 4096."""
    base = index * 4096
    hops = [SLOTS[u32(a)] for a in (first,) + previous] + [0] * (4 - 1 - len(previous))
    return {"service": struct.pack("<IIII", base, 4095, index, 0),
            "bucket": struct.pack("<HHHH", *hops)}


XDP_BASE = {"kind": "xdp", "config": config(NODE), "vips": {u32(VIP)}, "backends": BACKENDS,
            "services": {skey(80): "web", skey(53, 17): "dns"},
            "tables": {"web": table("10.99.0.11"), "dns": table("10.99.0.11", index=1)}}
TC_BASE = {"kind": "tc", "config": config(TC_NODE), "vips": {u32(VIP)}, "backends": BACKENDS,
           "cluster_nodes": {u32(NODE), u32("10.99.0.11"), u32("10.99.0.13")},
           "services": {skey(80): "web", skey(53, 17): "dns"},
           "tables": {"web": table("10.99.0.12"), "dns": table("10.99.0.12", index=1)}}
DNS = ipv4("10.99.0.2", VIP, 17, udp(41000, 53, bytes(20)))

SCENARIOS = [
    ("xdp", "vip", "TCP to a VIP, no second hop (XDP_TX)", eth(ipv4("10.99.0.50", VIP, 6, tcp(40000, 80, 0x10))), {}, 3),
    ("xdp", "vip_second_hop", "TCP to a VIP, second hop listed", eth(ipv4("10.99.0.50", VIP, 6, tcp(40000, 80, 0x10))),
     {"tables": {"web": table("10.99.0.14", "10.99.0.11")}}, 3),
    ("xdp", "vip_prev2", "TCP to a VIP, two previous owners listed", eth(ipv4("10.99.0.50", VIP, 6, tcp(40000, 80, 0x10))),
     {"tables": {"web": table("10.99.0.14", "10.99.0.11", "10.99.0.12")}}, 3),
    ("xdp", "vip_prev3", "TCP to a VIP, three previous owners listed", eth(ipv4("10.99.0.50", VIP, 6, tcp(40000, 80, 0x10))),
     {"tables": {"web": table("10.99.0.14", "10.99.0.11", "10.99.0.12", "10.99.0.13")}}, 3),
    ("xdp", "vip_too_big", "TCP to a VIP, DF, 1480 bytes, FIB says MTU 1500: ICMP frag-needed (XDP_TX)",
     eth(ipv4("10.99.0.50", VIP, 6, tcp(40000, 80, 0x10, 1440))),
     {"fib_rc": 8, "fib_mtu": 1500, "prefill": {"icmp_limit": struct.pack("<QQ", 0, 10**9)}}, 3),
    ("xdp", "non_vip_pass", "UDP to the node's address (not a service): pass", eth(ipv4("10.99.0.50", NODE, 17, udp(40000, 9, bytes(22)))), {}, 2),
    ("xdp", "non_ip_pass", "ARP: pass", bytes.fromhex("ffffffffffff0200000000500806") + bytes(28), {}, 2),
    ("tc", "decap_syn", "GUE, inner SYN: decapsulate", gue(0x02), {}, 0),
    ("tc", "decap_established", "GUE, established socket: decapsulate", gue(0x10), {"socket": 1}, 0),
    ("tc", "second_chance", "GUE, listener only: forward to the second hop", gue(0x10), {"socket": 10}, 7),
    ("tc", "non_gue_pass", "TCP to the node (not GUE): pass", eth(ipv4("10.99.0.50", TC_NODE, 6, tcp(40000, 22, 0x10))), {}, 0),
    ("xdp", "vip_udp", "UDP to a VIP, no second hop (XDP_TX)", eth(DNS), {}, 3),
    ("xdp", "vip_udp_second_hop", "UDP to a VIP, second hop and first hop again listed", eth(DNS),
     {"tables": {"web": table("10.99.0.11"), "dns": table("10.99.0.14", "10.99.0.11", index=1)}}, 3),
    ("xdp", "vip_udp_prev3", "UDP to a VIP, three previous owners and the first hop again listed", eth(DNS),
     {"tables": {"web": table("10.99.0.11"),
                 "dns": table("10.99.0.14", "10.99.0.11", "10.99.0.12", "10.99.0.13", index=1)}}, 3),
    ("xdp", "icmp_error", "ICMP frag-needed about a TCP flow: balanced like the flow", eth(icmp_error(6, 80, 40000)), {}, 3),
    ("tc", "time_wait_forward", "GUE, TIME_WAIT socket, hop left: forward", gue(0x10), {"socket": 6}, 7),
    ("tc", "udp_connected", "GUE, UDP with a connected socket: decapsulate", gue(0, inner=DNS),
     {"socket": 1, "socket_dport": 4444}, 0),
    ("tc", "udp_listener_forward", "GUE, UDP with an unconnected socket, hop left: forward", gue(0, inner=DNS),
     {"socket": 7}, 7),
    ("tc", "udp_listener_last_hop", "GUE, UDP with an unconnected socket, no hop left: decapsulate",
     gue(0, inner=DNS, next_hop=1), {"socket": 7}, 0),
    ("tc", "icmp_error_established", "GUE, ICMP error about an established flow: decapsulate",
     gue(0, inner=icmp_error(6, 80, 41000)), {"socket": 1}, 0),
    ("tc", "ping", "GUE, ICMP echo request to the VIP: decapsulate", gue(0, inner=echo()), {}, 0),
    ("tc", "unknown_drop", "GUE, no socket, no hop left, unknown_flow drop", gue(0x10, next_hop=1), {}, 2),
    ("tc", "unknown_rst", "GUE, no socket, no hop left, unknown_flow rst: RST sent",
     gue(0x10, next_hop=1), {"config": config(TC_NODE, 2)}, 7),
    ("tc", "forward_udp_csum", "GUE with a UDP checksum, listener only: forward", gue(0x10, udp_csum=True),
     {"socket": 10}, 7),
    ("xdp.frags", "rx_decap_syn", "backend XDP: GUE, inner SYN: decapsulate", gue(0x02), {}, 2),
    ("xdp.frags", "rx_decap_established", "backend XDP: GUE, established socket: decapsulate", gue(0x10),
     {"socket": 1}, 2),
    ("xdp.frags", "rx_to_tc", "backend XDP: GUE, listener only: to TC untouched", gue(0x10), {"socket": 10}, 2),
    ("xdp.frags", "rx_decap_syn_o6", "backend XDP, IPv6 cluster network: GUE in outer IPv6, inner SYN: decapsulate",
     gue_o6(ipv4("10.99.0.2", VIP, 6, tcp(41000, 80, 0x02))),
     {"config": config(TC_NODE, 0x4000), "prefill": {"config6": ip6(TC_NODE6)},
      "cluster_nodes6": {ip6(NODE6)}}, 2),
    ("xdp.frags", "rx_decap_established_o6",
     "backend XDP, IPv6 cluster network: GUE in outer IPv6, established socket: decapsulate",
     gue_o6(ipv4("10.99.0.2", VIP, 6, tcp(41000, 80, 0x10))),
     {"config": config(TC_NODE, 0x4000), "prefill": {"config6": ip6(TC_NODE6)},
      "cluster_nodes6": {ip6(NODE6)}, "socket": 1}, 2),
    ("xdp.frags", "rx_non_gue_pass", "backend XDP: TCP to the node (not GUE): pass",
     eth(ipv4("10.99.0.50", TC_NODE, 6, tcp(40000, 22, 0x10))), {}, 2),
]


def run_one(obj, kind, frame, extra):
    """Run the program twice on `frame` with the same maps and return the
    second run: the first one fills whatever the program caches in its maps
    (e.g. the hop cache), so the count is of the steady state."""
    # the backend XDP program (xdp.frags) runs on the TC program's node
    sc = dict(XDP_BASE if kind == "xdp" else TC_BASE)
    sc.update(extra)
    insns, relocs, targets, entries = load_program(obj, kind)
    program = {"xdp": "nilb_xdp_balancer", "xdp.frags": "nilb_xdp_backend", "tc": "nilb_tc_second_chance"}
    entry = entries.get(program.get(kind, ""), 0)
    m = Run(insns, relocs, sc, targets)
    for n in range(2):
        m.count, m.helpers, m.lookups, m.counters, m.pcs = 0, {}, {}, [], {}
        pkt = bytearray(256 + len(frame) + 256)
        pkt[256:256 + len(frame)] = frame
        base = 0x10000000 + n * 0x1000000
        m.mem.add(pkt, "packet", base)
        data, end = base + 256, base + 256 + len(frame)
        if kind.startswith("xdp"):
            ctx = bytearray(24)
            struct.pack_into("<IIII", ctx, 0, data, end, data, 2)
        else:
            ctx = bytearray(192)
            struct.pack_into("<II", ctx, 0, len(frame), 0)
            struct.pack_into("<I", ctx, 16, 0x0008)
            struct.pack_into("<I", ctx, 40, 2)
            struct.pack_into("<II", ctx, 76, data, end)
            struct.pack_into("<I", ctx, 140, data)
        ctx_addr = m.mem.add(ctx, "ctx", 0x08000000 + n * 0x100000)
        ret = m.run(ctx_addr, entry=entry)
    return ret, m


def line_map(obj, section):
    """pc -> 'file:line' from llvm-objdump -d -l (debug info needed: clang -g)."""
    import re
    import subprocess
    try:
        txt = subprocess.run(["llvm-objdump", "-d", "-l", "--no-show-raw-insn", f"--section={section}", obj],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    cur, out = "?", {}
    for line in txt.splitlines():
        m = re.match(r"^; (\S+):(\d+)", line)
        if m:
            cur = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
            continue
        m = re.match(r"^\s+(\d+):\s", line)
        if m:
            out[int(m.group(1))] = cur
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    obj = sys.argv[1]
    out = []
    for kind, name, what, frame, extra, want in SCENARIOS:
        try:
            ret, m = run_one(obj, kind, frame, extra)
            ok = ret == want
            out.append({"program": kind, "path": name, "what": what, "insns": m.count,
                        "helpers": m.helpers, "lookups": {k: v for k, v in m.lookups.items() if k},
                        "counters": m.counters, "verdict": ret, "expected_verdict": want, "ok": ok})
        except Fault as e:
            out.append({"program": kind, "path": name, "what": what, "error": str(e), "ok": False})
    if "--lines" in sys.argv:
        # where the instructions of each path go, by source line
        for kind, name, what, frame, extra, want in SCENARIOS:
            try:
                ret, m = run_one(obj, kind, frame, extra)
            except Fault:
                continue
            lm = line_map(obj, kind)
            agg = {}
            for pc, n in m.pcs.items():
                agg[lm.get(pc, "?")] = agg.get(lm.get(pc, "?"), 0) + n
            top = sorted(agg.items(), key=lambda x: -x[1])
            print(f"{kind} {name}: {m.count} insns; " + ", ".join(f"{k} {v}" for k, v in top[:25]))
        return 0
    if "--json" in sys.argv:
        print(json.dumps(out))
    else:
        for o in out:
            if "error" in o:
                print(f"{o['program']:4} {o['path']:18} ERROR {o['error']}")
                continue
            print(f"{o['program']:4} {o['path']:18} {o['insns']:4} insns, verdict {o['verdict']} "
                  f"(expected {o['expected_verdict']}), helpers {o['helpers']}, lookups {o['lookups']}, counters {o['counters']}")
    return 0 if all(o["ok"] for o in out) else 1


if __name__ == "__main__":
    raise SystemExit(main())
