#!/usr/bin/env python3
"""Render BENCHMARKS.md from the raw results of scripts/bench.sh (stdlib only).

    report.py --work DIR --out FILE

DIR holds machine.txt, load-*.txt, dataplane.json, control.json, reload.json,
filters.json and e2e-runs.jsonl (each optional: a section that did not run shows
as "not run").
"""

import argparse
import json
import math
import os
import statistics


def load_json(path):
    try:
        with open(path) as f:
            d = json.load(f)
        return None if "error" in d else d
    except (OSError, ValueError):
        return None


def kv(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    out[k] = v
    except OSError:
        pass
    return out


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def median_ci(xs, rounds=2000):
    # 95 % bootstrap confidence interval of the median of xs (resampled
    # with replacement, fixed seed: the same data render the same report).
    import random
    rng = random.Random(12)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(rounds))
    return meds[int(rounds * 0.025)], meds[int(rounds * 0.975) - 1]


def status(ok):
    if ok is None:
        return "n/a"
    return "**met**" if ok else "**missed**"


def fmt(x, digits=2):
    if x is None:
        return "-"
    return f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    w = a.work
    m = kv(os.path.join(w, "machine.txt"))
    dp = load_json(os.path.join(w, "dataplane.json"))
    cp = load_json(os.path.join(w, "control.json"))
    rl = load_json(os.path.join(w, "reload.json"))
    rl1000 = load_json(os.path.join(w, "reload-1000.json"))
    rdaemon = {n: load_json(os.path.join(w, f"reload-daemon-{n}.json")) for n in (100, 1000)}
    rbreak = {n: load_json(os.path.join(w, f"reload-breakdown-{n}.json")) for n in (100, 1000)}
    fl = load_json(os.path.join(w, "filters.json"))
    e2e = []
    try:
        with open(os.path.join(w, "e2e-runs.jsonl")) as f:
            e2e = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        e2e = []

    rows = []  # (area, measurement, nilb, reference, ratio, target, status)
    targets = []

    # ---- XDP: live frames, or repeat-mode program cost where the kernel
    # refused live frames (dataplane.json "xdp_method"; examples/bench_dataplane.rs)
    xdp_names = {
        "vip": "TCP to a VIP, no second hop",
        "vip_second_hop": "TCP to a VIP, second hop in every bucket",
        "vip_prev2": "TCP to a VIP, 2 previous owners in every bucket",
        "vip_prev3": "TCP to a VIP, 3 previous owners in every bucket",
        "vip_100_services": "TCP to a VIP with 100 services (flows over all)",
        "vip_vs_encap": "TCP to a VIP, no second hop, against GUE encapsulation alone",
        "vip_100_services_1024": "TCP to a VIP with 100 services of 1024 buckets (flows over all)",
        "vip_ipv6": "TCP to an IPv6 VIP (GUE protocol 41 over IPv4)",
        "vip_c6": "TCP to an IPv4 VIP over an IPv6 cluster network (outer IPv6)",
        "vip6_c6": "TCP to an IPv6 VIP over an IPv6 cluster network (outer IPv6)",
        "non_vip_pass": "non-VIP (UDP to the node itself), XDP_PASS",
        "quic_plaintext": "QUIC-LB short header, plaintext server ID",
        "quic_four_pass": "QUIC-LB short header, four-pass (3 AES in XDP)",
        "quic_single_pass": "QUIC-LB short header, single-pass (1 AES in XDP)",
    }
    rep_mode = bool(dp) and dp.get("xdp_method") == "repeat"
    xdp_area = "XDP, ns/packet (1 CPU, repeat-mode, program cost)" if rep_mode else "XDP, Mpps (1 CPU, live frames)"

    def fig(c, who="nilb"):
        # nilb's or the baseline's ("base") figure of a case: Mpps (live
        # frames), or ns per packet raw (driver and program) and net of the
        # driver alone (repeat mode).
        if rep_mode:
            return f"{c[who + '_raw_ns_median']:.1f} raw, {c[who + '_net_ns_median']:.1f} net"
        return fmt(c[who + "_mpps_median"], 3)

    def ref_of(c, name):
        # The reference column of a case: the baseline's figure and name
        # (repeat mode: and the driver alone).
        drv = f"; driver alone {c['driver_ns_median']:.1f}" if rep_mode else ""
        return f"{fig(c, 'base')} ({name}{drv})"

    def rel(c, ref):
        # nilb of case c against nilb of case ref, medians of the same run:
        # Mpps over Mpps, or (repeat mode) ns the other way round, raw.
        if not ref:
            return float("nan")
        if rep_mode:
            return ref["nilb_raw_ns_median"] / c["nilb_raw_ns_median"]
        return c["nilb_mpps_median"] / ref["nilb_mpps_median"]

    def net_part(r, ref_net):
        # Repeat mode: ", N net" of a case or pair r (the ratio net of the
        # driver), unless the reference's own net cost is under 1 ns, the
        # driver's noise (then its net is given instead).
        if not rep_mode:
            return ""
        if ref_net < 1:
            return f"; net: the reference {ref_net:.1f} ns, within the driver's noise"
        return f", {r['ratio_net_median']:.3f} net"

    def ratio_of(c, extra=""):
        # A case's ratio to its baseline: "median (lo-hi)", repeat mode raw
        # and net.
        raw = " raw" if rep_mode else ""
        net = net_part(c, c["base_net_ns_median"]) if rep_mode else ""
        return f"{fmt(c['ratio_median'], 3)}{raw} ({min(c['ratio']):.2f}-{max(c['ratio']):.2f}{extra}){net}"

    def pair(name):
        # A back-to-back pair of xdp_pairs, or None.
        return next((p for p in dp.get("xdp_pairs", []) if p["pair"] == name), None)

    def pair_of(name):
        # A back-to-back pair of xdp_pairs: (median ratio, " (lo-hi, back to
        # back)", repeat mode with " raw" before and the net ratio after), or
        # (nan, "") if the run has none of that name.
        p = pair(name)
        if not p:
            return float("nan"), ""
        ci = ""
        if len(p["ratio"]) >= 20:
            lo, hi = median_ci(p["ratio"])
            ci = f"; median's 95 % CI {lo:.3f}-{hi:.3f}, {len(p['ratio'])} reps"
        text = f" ({min(p['ratio']):.2f}-{max(p['ratio']):.2f}, back to back{ci})"
        if rep_mode:
            text = " raw" + text + net_part(p, p["b_net_ns_median"])
        return p["ratio_median"], text

    def pair_ns(name, a, b):
        # Repeat mode: the ns of a pair's two sides (named a and b) and of
        # the driver alone, "" otherwise.
        p = pair(name)
        if not rep_mode or not p:
            return ""
        return (f"{a} {p['a_raw_ns_median']:.1f} raw, {p['a_net_ns_median']:.1f} net; {b} "
                f"{p['b_raw_ns_median']:.1f} raw, {p['b_net_ns_median']:.1f} net; driver alone "
                f"{p['driver_ns_median']:.1f} ns")

    def info_row(c, ref, ratio):
        # An XDP row with no target: nilb's figure, the reference, the ratio.
        rows.append((xdp_area, xdp_names.get(c["case"], c["case"]), fig(c), ref, ratio, "-", status(None)))

    def target_status(ok):
        # Targets are set on live frames: repeat-mode program cost is not
        # held against them.
        return None if rep_mode else ok

    tgt_note = " (live frames)" if rep_mode else ""
    if dp:
        vipc = next((c for c in dp["xdp_live"] if c["case"] == "vip"), None)
        tcp_vip = fig(vipc) if vipc else "-"
        raw = " raw" if rep_mode else ""
        for c in dp["xdp_live"]:
            if c["case"] == "vip_ipv6":
                # issue 13: the IPv6 VIP path >= 0.9 of the IPv4 one: the
                # median of per-repetition ratios of the two run back to
                # back (xdp_pairs); older results: the ratio of the cases'
                # medians.
                r6, spread = pair_of("ipv6_vs_ipv4")
                if not spread:
                    r6 = rel(c, vipc)
                    spread = ""
                ok = target_status(r6 >= 0.9)
                rows.append((
                    xdp_area,
                    xdp_names["vip_ipv6"],
                    fig(c),
                    f"{tcp_vip} (nilb, TCP to an IPv4 VIP, same run)",
                    f"{fmt(r6, 3)}{spread} of the IPv4 VIP path; {fmt(c['ratio_median'], 3)}{raw} of MAC swap",
                    ">= 0.9 of IPv4" + tgt_note,
                    status(ok),
                ))
                method = " (repeat-mode, program cost)" if rep_mode else ""
                targets.append(("XDP IPv6 VIP path", f"{r6:.3f}{raw} of the IPv4 VIP path{method}", ">= 0.9" + tgt_note, ok))
                continue
            if c["case"] in ("vip_c6", "vip6_c6"):
                # issue 13: the IPv6 cluster network's paths against the IPv4
                # VIP path over IPv4 (back to back, xdp_pairs); no target.
                r6, spread = pair_of({"vip_c6": "c6_vs_ipv4", "vip6_c6": "c6_ipv6_vs_ipv4"}[c["case"]])
                info_row(c, f"{tcp_vip} (nilb, TCP to an IPv4 VIP over IPv4, same run)",
                         f"{fmt(r6, 3)}{spread} of the IPv4 VIP path; {fmt(c['ratio_median'], 3)}{raw} of MAC swap")
                continue
            if c["case"] == "vip_vs_encap":
                # issue 12: the nearest thing to the VIP path that does no
                # balancing (encap_tx: the same 36 bytes to one fixed hop,
                # no parsing, hash or lookup), and it against MAC swap
                # (xdp_pairs, back to back); no target: what is left of the
                # path's cost once the encapsulation is paid.
                re, spread = pair_of("encap_vs_macswap")
                floor = f"; encap_tx itself {re:.3f}{spread} of MAC swap" if spread else ""
                info_row(c, ref_of(c, "encap_tx: GUE to one fixed hop, no balancing"),
                         f"{ratio_of(c)} of encap_tx{floor}")
                continue
            if c["case"] == "vip_100_services_1024":
                # issue 12: the 100-service case with a quarter of the bucket
                # memory (800 KiB instead of 3.2 MiB): how much of that
                # case is the bucket arrays' cache misses; no target.
                info_row(c, ref_of(c, "MAC swap + XDP_TX"), ratio_of(c))
                continue
            if c["case"].startswith("quic_"):
                # QUIC-LB paths: reported as a ratio to the TCP VIP path of
                # the same run (no target: the price of the decoding).
                rows.append((
                    xdp_area,
                    xdp_names.get(c["case"], c["case"]),
                    fig(c),
                    f"{tcp_vip} (nilb, TCP to a VIP, same run)",
                    f"{fmt(rel(c, vipc), 3)}{raw} of the TCP VIP path; {fmt(c['ratio_median'], 3)}{raw} of MAC swap",
                    "-",
                    status(None),
                ))
                continue
            vip = c["case"] != "non_vip_pass"
            # issue 12: >= 0.8 with one service, >= 0.75 with 100
            tgt = {"vip": 0.8, "vip_100_services": 0.75}.get(c["case"], 0.7) if vip else 0.95
            ratio = c["ratio_median"]
            ok = target_status(ratio >= tgt)
            ref = "MAC swap + XDP_TX" if vip else "XDP_PASS only"
            extra = ""
            floor = ""
            if c["case"] in ("vip", "vip_100_services"):
                # The cases with a target run more repetitions: the
                # median's confidence interval says how sure the status is.
                lo, hi = median_ci(c["ratio"])
                extra = f"; median's 95 % CI {lo:.3f}-{hi:.3f}, {len(c['ratio'])} reps"
                fr, _ = pair_of({"vip": "floor_vs_macswap", "vip_100_services": "floor100_vs_macswap"}[c["case"]])
                nr, _ = pair_of({"vip": "vip_vs_floor", "vip_100_services": "vip100_vs_floor100"}[c["case"]])
                if not math.isnan(fr):
                    floor = (f"; the floor balancer (hash, one bucket read, encapsulation, nothing else) "
                             f"{fr:.3f}{raw} of MAC swap, nilb {nr:.3f}{raw} of the floor")
            rows.append((
                xdp_area,
                xdp_names.get(c["case"], c["case"]),
                fig(c),
                ref_of(c, ref),
                ratio_of(c, extra),
                f">= {tgt}{tgt_note}",
                status(ok),
            ))
            method = " (repeat-mode, program cost)" if rep_mode else ""
            targets.append((f"XDP {xdp_names.get(c['case'], c['case'])}",
                            f"{ratio:.3f}{raw} of {ref}{floor}{method}", f">= {tgt}{tgt_note}", ok))
        # issue 12: the floor balancer (bench.bpf.c floor_lb: the least a
        # balancer of nilb's kind does) against MAC swap, and nilb against
        # it, back to back (xdp_pairs); no target: how far nilb is from the
        # least a balancer does with the same tables, in the same run.
        floor_area = ("XDP floor balancer, ns/packet ratio (1 CPU, repeat-mode, program cost)" if rep_mode
                      else "XDP floor balancer, Mpps ratio (1 CPU, live frames)")
        for label, floor_pair, nilb_pair in (
            ("1 service of 4096 buckets, 2-byte entries", "floor_vs_macswap", "vip_vs_floor"),
            ("100 services of 4096 buckets, 2-byte entries (800 KiB, nilb's layout)",
             "floor100_vs_macswap", "vip100_vs_floor100"),
            ("100 services of 4096 buckets, 1-byte entries (400 KiB)", "floor100_u8_vs_macswap", None),
            ("100 services of 1024 buckets, 2-byte entries (200 KiB)", "floor100_1024_vs_macswap",
             "vip100_1024_vs_floor100_1024"),
            # The footprint sweep: the same floor, other table sizes.
            ("100 services of 64 buckets (12.5 KiB)", "floor100_64_vs_macswap", None),
            ("100 services of 256 buckets (50 KiB)", "floor100_256_vs_macswap", None),
            ("100 services of 2048 buckets (400 KiB)", "floor100_2048_vs_macswap", None),
            ("100 services of 8192 buckets (1.6 MiB)", "floor100_8192_vs_macswap", None),
        ):
            fr, fspread = pair_of(floor_pair)
            if not fspread:
                continue
            nr, nspread = pair_of(nilb_pair) if nilb_pair else (float("nan"), "")
            ns = pair_ns(floor_pair, "the floor", "MAC swap")
            nns = pair_ns(nilb_pair, "nilb", "the floor") if nilb_pair else ""
            rows.append((
                floor_area,
                f"hash, one bucket read, encapsulation, nothing else: {label}",
                f"nilb {nr:.3f}{nspread} of it" + (f" ({nns})" if nns else "") if nspread else "-",
                "MAC swap + XDP_TX" + (f" ({ns})" if ns else ""),
                f"{fr:.3f}{fspread}",
                "-",
                status(None),
            ))
        nm = dp.get("nat_memory")
        if nm:
            rows.append((
                "NAT mode, kernel memory",
                "nat_flows per tracked flow (fdinfo memlock, 10,000 flows added)",
                f"{fmt(nm['bytes_per_flow'], 0)} B",
                "-",
                f"{nm['flows_per_gib'] / 1e6:.1f} M flows per GiB",
                "-",
                status(None),
            ))
        for c in dp["tc"]:
            rows.append((
                "XDP receive path (backend), ns/packet" if c["case"].startswith("xdp_") else "TC, ns/packet",
                {"decap_syn": "decapsulate, inner SYN",
                 "decap_established": "decapsulate, established socket",
                 "second_chance": "second-chance forward (listener, no flow)",
                 "xdp_decap_syn": "decapsulate, inner SYN",
                 "xdp_decap_established": "decapsulate, established socket",
                 "xdp_to_tc": "left to TC (listener, no flow)",
                 "xdp_decap_syn_o6": "IPv6 cluster network (outer IPv6): decapsulate, inner SYN",
                 "xdp_decap_syn6_o6": "IPv6 cluster network (outer IPv6): decapsulate, inner IPv6 SYN to an IPv6 VIP",
                 "nat_decap_syn": "NAT mode: decapsulate, inner SYN of a tracked flow, translate",
                 "nat_egress_reply": "NAT mode, egress: translate a reply's source",
                 "nat_egress_other": "NAT mode, egress: another port's packet, passed"}.get(c["case"], c["case"]),
                fmt(c["nilb_ns"], 0),
                f"{fmt(c['base_ns'], 0)} ({c.get('base', 'TC_ACT_OK only')})",
                f"+{c['nilb_ns'] - c['base_ns']:.0f} ns",
                # issue 12: an established flow's segment costs at most
                # 150 ns over a pass-only program.
                "<= +150 ns" if c["case"] == "xdp_decap_established" else "-",
                status(c["nilb_ns"] - c["base_ns"] <= 150) if c["case"] == "xdp_decap_established" else "-",
            ))
            if c["case"] == "xdp_decap_established":
                added = c["nilb_ns"] - c["base_ns"]
                targets.append(("Backend receive path (XDP), established flow's segment",
                                f"+{added:.0f} ns over XDP_PASS only", "<= +150 ns", added <= 150))
    else:
        rows.append(("XDP / TC", "not run or failed", "-", "-", "-", "-", "-"))

    # ---- end to end
    def e2e_vals(kind, path):
        out = []
        for r in e2e:
            if r["kind"] != kind or r["path"] != path:
                continue
            if kind == "iperf3":
                out.append(r["bps"] / 1e9)
            else:
                out.append(r["result"]["rps"])
        return out

    def e2e_ratios(kind, other="direct", path="vip"):
        by = {}
        for r in e2e:
            if r["kind"] != kind:
                continue
            v = r["bps"] / 1e9 if kind == "iperf3" else r["result"]["rps"]
            by.setdefault(r["rep"], {})[r["path"]] = v
        return [d[path] / d[other] for d in by.values() if path in d and d.get(other)]

    if e2e:
        for kind, label, unit, digits in (("iperf3", "TCP throughput (iperf3, 1 stream)", "Gbit/s", 2),
                                          ("http", "HTTP requests/s, new connection each", "req/s", 0)):
            v, d, rs = e2e_vals(kind, "vip"), e2e_vals(kind, "direct"), e2e_ratios(kind)
            if not v or not d or not rs:
                rows.append(("End to end", label, "failed", "-", "-", ">= 0.9", "-"))
                continue
            ratio = statistics.median(rs)
            ok = ratio >= 0.9
            rows.append((
                "End to end",
                f"{label}, {unit}",
                fmt(statistics.median(v), digits),
                f"{fmt(statistics.median(d), digits)} (direct to the backend)",
                fmt(ratio, 3),
                ">= 0.9",
                status(ok),
            ))
            targets.append((f"End to end: {label}", f"{ratio:.3f} of direct", ">= 0.9", ok))
            vn, rn = e2e_vals(kind, "nat"), e2e_ratios(kind, "vip", "nat")
            if vn and rn:
                nat_ok = statistics.median(rn) >= 0.95
                rows.append((
                    "End to end",
                    f"{label}, {unit}: NAT mode (node1's own address, node2 translates) versus DSR (VIP)",
                    fmt(statistics.median(vn), digits),
                    f"{fmt(statistics.median(v), digits)} (DSR through the VIP)",
                    fmt(statistics.median(rn), 3),
                    ">= 0.95",
                    status(nat_ok),
                ))
                targets.append((f"End to end, NAT mode: {label}", f"{statistics.median(rn):.3f} of DSR",
                                ">= 0.95", nat_ok))
            ro, rr = e2e_vals(kind, "routed"), e2e_ratios(kind, "routed")
            if ro and rr:
                rows.append((
                    "End to end",
                    f"{label}, {unit}: VIP versus the same two hops without nilb",
                    fmt(statistics.median(v), digits),
                    f"{fmt(statistics.median(ro), digits)} (routed by node1's kernel)",
                    fmt(statistics.median(rr), 3),
                    "-",
                    "-",
                ))
        # CPU per unit of work, from the processes' own accounting (kernel
        # work done in their context included): less sensitive to other jobs
        # on a shared machine than the rates.
        def cpu_per(path, kind):
            out = []
            for r in e2e:
                if r["kind"] != kind or r["path"] != path:
                    continue
                if kind == "http" and "server_cpu_s" in r and "client_cpu_s" in r["result"] and r["result"]["ok"]:
                    out.append((r["server_cpu_s"] + r["result"]["client_cpu_s"]) / r["result"]["ok"] * 1e6)
                if kind == "iperf3" and r.get("client_cpu_pct") is not None and r.get("bytes"):
                    cpu_s = (r["client_cpu_pct"] + r["server_cpu_pct"]) / 100 * r["seconds"]
                    out.append(cpu_s / (r["bytes"] / 1e9))
            return out
        # The whole machine's CPU (/proc/stat, both CPUs: client, balancer
        # and backend together, softirqs included) per GB and its busy
        # share over the run, per path: what the balancer's hop costs, and
        # whether the runs were bound by CPU.
        def machine(path):
            per_gb, busy = [], []
            for r in e2e:
                if r["kind"] == "iperf3" and r["path"] == path and r.get("machine_cpu_s") and r.get("bytes"):
                    per_gb.append(r["machine_busy_s"] / (r["bytes"] / 1e9))
                    busy.append(r["machine_busy_s"] / r["machine_cpu_s"])
            return per_gb, busy
        mv, md, mr = machine("vip"), machine("direct"), machine("routed")
        if mv[0] and md[0]:
            routed = (f"; routed {fmt(statistics.median(mr[0]), 2)} s, busy {statistics.median(mr[1]) * 100:.0f} %"
                      if mr[0] else "")
            rows.append(("End to end", "machine CPU per GB received (iperf3; all namespaces: client, balancer, "
                         "backend, softirqs), s; share of the CPUs busy",
                         f"{fmt(statistics.median(mv[0]), 2)} (busy {statistics.median(mv[1]) * 100:.0f} %)",
                         f"{fmt(statistics.median(md[0]), 2)} (direct, busy {statistics.median(md[1]) * 100:.0f} %){routed}",
                         fmt(statistics.median(mv[0]) / statistics.median(md[0]), 3), "-", "-"))
        for kind, label in (("http", "CPU per HTTP request (client + server processes), us"),
                            ("iperf3", "CPU per GB received (iperf3 client + server), s")):
            v, d = cpu_per("vip", kind), cpu_per("direct", kind)
            if v and d:
                rows.append(("End to end", label, fmt(statistics.median(v), 1),
                             f"{fmt(statistics.median(d), 1)} (direct)",
                             fmt(statistics.median(v) / statistics.median(d), 3), "-", "-"))
    else:
        rows.append(("End to end", "not run or failed", "-", "-", "-", "-", "-"))

    # ---- control plane
    if cp:
        for t in cp["tables"]:
            shape = f"{t['backends']} x {t['buckets']}"
            b = t["build"]["median_ms"]
            is_big = t["backends"] == 1000
            rows.append((
                "Control, ms",
                f"Table::build {shape}",
                f"{fmt(b, 3)} (min {fmt(min(t['build']['runs_ms']), 3)})",
                "-",
                "-",
                "< 10 ms" if is_big else "-",
                status(b < 10) if is_big else "-",
            ))
            if is_big:
                targets.append(("Table::build 1000 x 65536", f"{b:.2f} ms", "< 10 ms", b < 10))
            rows.append(("Control, ms", f"update {shape}: rebalance after a failure / after a weight change",
                         f"{fmt(t['rebalance_failure']['median_ms'], 3)} / {fmt(t['rebalance_weight']['median_ms'], 3)}",
                         "-", "-", "-", "-"))
            rows.append(("Control, ms", f"ControlPlane::update (reload, one weight doubled) {shape}",
                         fmt(t["cp_update"]["median_ms"], 3), "-", "-", "-", "-"))
            rows.append(("Control, ms", f"map sync of the full table ({t['buckets']} buckets, install_table)",
                         fmt(t["install_table"]["median_ms"], 3),
                         f"the {t.get('changed_buckets', '?')} buckets a weight change moved, alone: {fmt(t['install_changed']['median_ms'], 3)}" if "install_changed" in t else "-",
                         "-", "-", "-"))
        h = cp["hundred_services"]
        rows.append(("Control, ms", "map sync of 100 services x 4096 buckets (full plan apply)",
                     fmt(h["full_apply"]["median_ms"], 1), "-", "-", "-", "-"))
    else:
        rows.append(("Control", "not run or failed", "-", "-", "-", "-", "-"))

    if rl:
        one, all_ = rl["one_changed"], rl["all_changed"]
        for label, d in (("1 of 100 services changed", one), ("all 100 services changed", all_)):
            ok = d["live_ms_median"] < 100
            rows.append((
                "Reload, ms",
                f"SIGHUP to new table live (100 services, {label})",
                fmt(d["live_ms_median"], 1),
                f"daemon's own elapsed_us: {fmt(d['daemon_ms_median'], 1)}; CPU: {fmt(d.get('daemon_cpu_ms_median'), 1)}",
                "-",
                "< 100 ms",
                status(ok),
            ))
            targets.append((f"SIGHUP to live, 100 services, {label}", f"{d['live_ms_median']:.1f} ms", "< 100 ms", ok))
    else:
        rows.append(("Reload", "not run or failed", "-", "-", "-", "-", "-"))
    if rl1000:
        for label, key, limit in (("1 of 1,000 services changed", "one_changed", 50),
                                  ("all 1,000 services changed", "all_changed", 250)):
            d = rl1000[key]
            ok = d["live_ms_median"] < limit
            rows.append((
                "Reload, ms",
                f"SIGHUP to new table live (1,000 services, {label})",
                fmt(d["live_ms_median"], 1),
                f"daemon's own elapsed_us: {fmt(d['daemon_ms_median'], 1)}; CPU: {fmt(d.get('daemon_cpu_ms_median'), 1)}",
                "-",
                f"< {limit} ms",
                status(ok),
            ))
            targets.append((f"SIGHUP to live, 1,000 services, {label}", f"{d['live_ms_median']:.1f} ms", f"< {limit} ms", ok))
    for n in (100, 1000):
        rd, rb = rdaemon[n], rbreak[n]
        if rd:
            rows.append(("Reload", f"`nilb run` with {n:,} services: start to ready, ms",
                         str(rd["ready_ms"]), "-", "-", "-", "-"))
            ok = rd["rss_kb_after"] <= 128 * 1024
            rows.append(("Reload", f"`nilb run` with {n:,} services: daemon RSS after the reloads, MB",
                         fmt(rd["rss_kb_after"] / 1024, 1), f"at ready {fmt(rd['rss_kb_ready'] / 1024, 1)}",
                         "-", "<= 128 MB" if n == 1000 else "-", status(ok) if n == 1000 else "-"))
            if rd.get("bpf_kb") is not None:
                rows.append(("Reload", f"`nilb run` with {n:,} services: BPF map memory (memlock of the maps it holds), MiB",
                             fmt(rd["bpf_kb"] / 1024, 1), f"peak RSS (VmHWM) {fmt(rd.get('hwm_kb', 0) / 1024, 1)} MB",
                             "-", "reported", "-"))
            if n == 1000:
                targets.append(("Daemon RSS, 1,000 services", f"{rd['rss_kb_after'] / 1024:.1f} MB", "<= 128 MB", ok))
        if rb:
            h = rb["health_event_ms_median"]
            ok = h < 20
            rows.append(("Reload, ms", f"health event of one backend to its table live ({n:,} services, in-process)",
                         fmt(h, 2), "-", "-", "< 20 ms" if n == 1000 else "-", status(ok) if n == 1000 else "-"))
            if n == 1000:
                targets.append(("Health event to live, 1,000 services", f"{h:.2f} ms", "< 20 ms", ok))

    # ---- edge filters
    fl_names = {
        "denied_host": ("denied packet (a /32 of the list)", "bare XDP_DROP", 0.9),
        "denied_subnet": ("denied packet (under a /24 of the list)", "bare XDP_DROP", 0.9),
        "allowed_vip": ("allowed VIP packet", "nilb without filters", 0.9),
        "trie_host": ("(design not taken) one LPM_TRIE lookup, denied /32", "bare XDP_DROP", None),
    }
    # Live frames, or repeat-mode program cost (filters.json "xdp_method", as
    # the data plane's): raw and net ns, ratios raw and net.
    fl_rep = bool(fl) and fl.get("xdp_method") == "repeat"
    if fl:
        n = fl["prefixes"]
        for c in fl["live"]:
            what, ref, tgt = fl_names.get(c["case"], (c["case"], c["baseline"], None))
            ratio = c["ratio_median"]
            # Targets are set on live frames (see the XDP rows).
            ok = None if tgt is None or fl_rep else ratio >= tgt
            spread = f"{min(c['ratio']):.2f}-{max(c['ratio']):.2f}"
            if fl_rep:
                bnet = c["base_net_ns_median"]
                net = (f", {c['ratio_net_median']:.3f} net" if bnet >= 1
                       else f"; net: the reference {bnet:.1f} ns, within the driver's noise")
                figs = (f"{c['nilb_raw_ns_median']:.1f} raw, {c['nilb_net_ns_median']:.1f} net",
                        f"{c['base_raw_ns_median']:.1f} raw, {bnet:.1f} net ({ref}; driver alone "
                        f"{c['driver_ns_median']:.1f})", f"{fmt(ratio, 3)} raw ({spread}){net}")
            else:
                figs = (fmt(c["mpps_median"], 3), f"{fmt(c['base_mpps_median'], 3)} ({ref})", f"{fmt(ratio, 3)} ({spread})")
            rows.append((
                f"Filters ({n:,} prefixes), " + ("ns/packet (1 CPU, repeat-mode, program cost)" if fl_rep
                                                 else "Mpps (1 CPU, live frames)"),
                what,
                *figs,
                (f">= {tgt}" + (" (live frames)" if fl_rep else "")) if tgt else "-",
                status(ok),
            ))
            if tgt:
                targets.append((f"Filters, {what}, {n:,} prefixes",
                                f"{ratio:.3f}{' raw' if fl_rep else ''} of {ref}"
                                + (" (repeat-mode, program cost)" if fl_rep else ""),
                                f">= {tgt}" + (" (live frames)" if fl_rep else ""), ok))
        first = fl["first"]["read_compile_ms"] + fl["first"]["install_ms"]
        swap = fl["swap"]["total_ms_median"]
        for label, ms in ((f"loading {n:,} prefixes (read, compile, build maps, flip)", first),
                          (f"swapping in another {n:,} (as SIGHUP: read, compile, build, flip)", swap)):
            ok = ms < 2000
            rows.append(("Filters, ms", label, fmt(ms, 0), "-", "-", "< 2000 ms", status(ok)))
            targets.append((f"Filters, {label}", f"{ms:.0f} ms", "< 2000 ms", ok))
        rows.append(("Filters, memory", f"kernel maps of the live generation ({n:,} prefixes)",
                     f"{fl['swap']['kernel_bytes'] / 1048576:.1f} MiB", "-", "-", "reported", "-"))
        rows.append(("Filters, memory", "daemon peak RSS growth while compiling",
                     f"{fl['process']['peak_growth_all_kb'] / 1024:.0f} MiB", "-", "-", "reported", "-"))
    else:
        rows.append(("Filters", "not run or failed", "-", "-", "-", "-", "-"))

    # ---- write
    L = []
    L.append("# nilb benchmarks")
    L.append("")
    L.append("Generated by `scripts/bench.sh` (as root; installs what it needs, builds release, "
             "takes about 8 minutes on 2 cores). Do not edit by hand: rerun the script. "
             "Numbers are medians of several repetitions; ratios are medians of per-repetition "
             "ratios of measurements taken back to back in the same run.")
    L.append("")
    L.append(f"- **Date:** {m.get('date', '?')}; nilb commit {m.get('commit', '?')}; script runtime {m.get('runtime_s', '?')} s")
    L.append(f"- **Machine:** {m.get('cpu', '?')}, {m.get('ncpu', '?')} CPUs, {m.get('mem', '?')}, "
             f"{m.get('virt', '?')} virtualisation; {m.get('os', '?')}, kernel {m.get('kernel', '?')}; "
             f"{m.get('rustc', '?')}; {m.get('clang', '?')}; hardware perf counters: {m.get('perf_hw', '?')}")
    loads = []
    for sec in ("start", "xdp", "control", "reload", "filters", "e2e", "end"):
        t = read(os.path.join(w, f"load-{sec}.txt"))
        if t:
            body = "; ".join(x.replace("load average at ", "").replace("load ", "") for x in t.splitlines())
            loads.append(body if body.startswith(sec) else f"{sec}: {body}")
    L.append(f"- **Load average (1/5/15 min)** (the machine is shared; other jobs may run): " + " | ".join(loads))
    L.append(f"- **Repetitions:** {m.get('reps', '?')}; data-plane programs pinned to CPU {m.get('pin_cpu', '?')}")
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("Ratios: median, and in brackets the range over the repetitions. Control-plane times: "
             "median (and the minimum, the least disturbed run).")
    L.append("")
    L.append("| area | measurement | nilb | reference | ratio | target | status |")
    L.append("|---|---|---:|---|---:|---|---|")
    for r in rows:
        L.append("| " + " | ".join(str(x) for x in r) + " |")
    L.append("")
    L.append("## Targets")
    L.append("")
    L.append("| target | measured | required | |")
    L.append("|---|---|---|---|")
    for name, meas, req, ok in targets:
        L.append(f"| {name} | {meas} | {req} | {status(ok)} |")
    L.append("")
    L.append("Where a missed target's cause is measured: the XDP VIP path in \"Issue 12, step 4\" and "
             "\"step 5\" below (nilb is 0.90-0.94 of a floor balancer in every run; the floor itself "
             "moves with what else uses this shared host's caches, the more the larger the tables); "
             "end to end in docs/design.md \"Data-plane cost\" (the VIP path against the same two hops "
             "routed by the kernel, the rows \"routed by node1's kernel\" above: on one 2-core machine "
             "the second hop's work is what costs); NAT mode in \"NAT mode (issue 11)\" below; the "
             "edge filters' denied packets in docs/design.md \"Edge filters\" (a denied /32 reads one "
             "64-byte bucket of a 32 MiB table, as cache-bound as the 100-service VIP path).")
    L.append("")

    if dp:
        L.append("## Data plane details")
        L.append("")
        if rep_mode:
            L.append(f"Repeat mode (see the method notes): {dp['frames_per_run']} runs "
                     f"per measurement on frames of {dp['frame_bytes']} bytes, {dp['reps']} repetitions, "
                     "baseline, nilb and the driver alone back to back, the order rotating. The driver "
                     "program (`gen_repeat`) restores the frame's length and bytes, gives every packet a "
                     "new source port (and, for 100 services, one of 100 destination ports) and "
                     "tail-calls the program under test, for nilb and the baselines alike.")
            L.append("")
            L.append("| case | nilb raw ns per repetition | baseline raw ns per repetition | driver alone ns | "
                     "nilb ns/packet (program) | baseline ns/packet (program) |")
            L.append("|---|---|---|---|---:|---:|")
            for c in dp["xdp_live"]:
                L.append(f"| {xdp_names.get(c['case'], c['case'])} | {', '.join(f'{x:.1f}' for x in c['nilb_raw_ns'])} | "
                         f"{', '.join(f'{x:.1f}' for x in c['base_raw_ns'])} | "
                         f"{', '.join(f'{x:.1f}' for x in c['driver_ns'])} | {c['nilb_prog_ns']:.0f} | {c['base_prog_ns']:.0f} |")
        else:
            L.append(f"Live frames: {dp['frames_per_run']} frames of {dp['frame_bytes']} bytes per run, "
                     f"{dp['reps']} repetitions, baseline and nilb back to back, order alternating. "
                     "The driver program (`gen_tail`) restores the frame, gives every packet a new "
                     "source port (and, for 100 services, one of 100 destination ports) and tail-calls "
                     "the program under test, for nilb and the baselines alike.")
            L.append("")
            L.append("| case | nilb Mpps per run | baseline Mpps per run | nilb ns/packet (program) | baseline ns/packet (program) |")
            L.append("|---|---|---|---:|---:|")
            for c in dp["xdp_live"]:
                L.append(f"| {xdp_names.get(c['case'], c['case'])} | {', '.join(f'{x:.2f}' for x in c['nilb_mpps'])} | "
                         f"{', '.join(f'{x:.2f}' for x in c['base_mpps'])} | {c['nilb_prog_ns']:.0f} | {c['base_prog_ns']:.0f} |")
        L.append("")
        L.append("Program ns/packet: `BPF_PROG_TEST_RUN` without live frames, one run per call, median "
                 f"of {dp['runs']}; includes the test-run timer overhead (the XDP_PASS-only row shows it).")
        L.append("")
        L.append("Single operations (`BPF_PROG_TEST_RUN`, repeat 200000, ns per run including the empty-program floor):")
        L.append("")
        L.append("| probe | what | ns |")
        L.append("|---|---|---:|")
        for p in dp["probes"]:
            L.append(f"| `{p['probe']}` | {p['what']} | {p['ns']:.0f} |")
        L.append("")
        if dp.get("progs"):
            L.append("Program sizes: " + "; ".join(
                f"`{p['prog']}` {p['xlated_insns']} BPF instructions (xlated), {p['jited_bytes']} bytes JITed, "
                f"{p['verified_insns']} instructions processed by the verifier" for p in dp["progs"]) + ".")
            L.append("")
        L.append("Path check (nilb counters moved during the warm-up of 200000 frames): " +
                 "; ".join(f"{k}: `{v}`" for k, v in dp.get("path_checks", {}).items()) + ".")
        L.append("")

    paths = None
    try:
        with open(os.path.join(w, "paths.json")) as f:
            paths = json.load(f)
    except (OSError, ValueError):
        paths = None
    if paths:
        L.append("## Instructions per path")
        L.append("")
        L.append("BPF instructions executed per packet by nilb's programs, counted by running the compiled "
                 "bytecode of `bpf/nilb.bpf.c` in `bench/bpf_paths.py` on the benchmark's packets with the "
                 "benchmark's map contents (no hardware counters on this machine). Before the JIT the kernel "
                 "inlines array, per-CPU-array and hash-of-maps lookups (a few instructions instead of a "
                 "call); helpers run kernel code not counted here (see the probes above for their cost).")
        L.append("")
        L.append("| program | path | BPF insns | helper calls | map lookups | verdict ok |")
        L.append("|---|---|---:|---|---|---|")
        for p in paths:
            if "error" in p:
                L.append(f"| {p['program']} | {p['what']} | error: {p['error']} | | | no |")
                continue
            h = ", ".join(f"{k} {v}" for k, v in p["helpers"].items() if k != "map_lookup_elem")
            lk = ", ".join(f"{k} {v}" for k, v in p["lookups"].items())
            L.append(f"| {p['program']} | {p['what']} | {p['insns']} | {h or '-'} | {lk} | {'yes' if p['ok'] else 'no'} |")
        L.append("")

    if cp:
        L.append("## Control plane details (ms, median)")
        L.append("")
        L.append("`install_table` writes every bucket of the table in place through the pool's mapping; "
                 "`changed` writes only the buckets a weight change moved (`TableInstall::changed`).")
        L.append("")
        L.append("| backends x buckets | build | rebalance, failure | rebalance, weight x2 (buckets moved) | ControlPlane::new | ControlPlane::update | install_table | changed (buckets) |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for t in cp["tables"]:
            g = lambda k: fmt(t[k]["median_ms"], 3) if k in t else "-"
            L.append(f"| {t['backends']} x {t['buckets']} | {g('build')} | {g('rebalance_failure')} | "
                     f"{g('rebalance_weight')} ({t['weight_change_moved']}) | {g('cp_new')} | {g('cp_update')} | "
                     f"{g('install_table')} | {g('install_changed')} ({t.get('changed_buckets', '-')}) |")
        h = cp["hundred_services"]
        L.append("")
        L.append(f"100 services x 4096 buckets (3 backends each), through ControlPlane::apply: full apply {fmt(h['full_apply']['median_ms'], 1)} ms; "
                 f"a reload doubling one weight in every service: ControlPlane::update "
                 f"{fmt(h['update_all']['median_ms'], 1)} ms + apply {fmt(h['apply_all']['median_ms'], 1)} ms.")
        if "parse" in h:
            L.append(f"A reload changing one of the 100 services: parse and validate the file "
                     f"{fmt(h['parse']['median_ms'], 1)} ms, ControlPlane::update {fmt(h['update_one']['median_ms'], 1)} ms, "
                     f"apply {fmt(h['apply_one']['median_ms'], 1)} ms.")
        sw = cp.get("swap_100")
        if sw:
            L.append(f"Swapping 100 bucket arrays into `services`: one update per service (as install_table does) "
                     f"{fmt(sw['one_by_one']['median_ms'], 1)} ms, one `BPF_MAP_UPDATE_BATCH` "
                     f"{fmt(sw['batch']['median_ms'], 1)} ms, 100 concurrent threads {fmt(sw['threads']['median_ms'], 1)} ms "
                     "(each update of a map-in-map waits for an RCU grace period).")
        L.append("")

    if rl:
        L.append("## Reload details")
        L.append("")
        L.append("`nilb run` on a veth in its own namespace with 100 and with 1,000 services (4096 buckets, "
                 "3 backends, no health checks). Per repetition the config is rewritten (rename) and SIGHUP "
                 "sent; the pinned tables are read every 0.2 ms (the daemon writes a reload's tables in "
                 "key order: the first service that must change until it is live, then the last one, "
                 "then one read of the whole pool checks all) until every service that must change "
                 "shows its new buckets (the drained backend's first-hop buckets gone, or back). The "
                 "daemon's CPU is its loop thread's CPU time for the reload (`cpu_us`): on 2 shared CPUs "
                 "the elapsed time minus it is time spent waiting for a CPU.")
        L.append("")
        for doc, n in ((rl, "100"), (rl1000, "1,000")):
            if not doc:
                continue
            for label, key in ((f"1 of {n} services changed", "one_changed"), (f"all {n} services changed", "all_changed")):
                d = doc[key]
                L.append(f"- {label}: SIGHUP to live {', '.join(f'{x:.1f}' for x in d['live_ms'])} ms; "
                         f"daemon's elapsed {', '.join(f'{x:.1f}' for x in d['daemon_ms'])} ms; "
                         f"daemon's CPU {', '.join(f'{x:.1f}' for x in d.get('daemon_cpu_ms', []))} ms")
        L.append("")

    if any(rbreak.values()):
        L.append("## Reload breakdown")
        L.append("")
        L.append("`bench_reload breakdown`: the daemon's reload steps timed one by one in-process, on a data "
                 "plane of its own (medians, ms). `state_handover` is what the event loop does for the state "
                 "file (a copy of the state for the writer thread); `state_write_background` is that "
                 "thread's encode and write; `total` is file to live plus the hand-over.")
        L.append("")
        cols = ["parse", "clone", "update", "apply", "state_handover", "metrics", "drop_old", "total",
                "state_write_background"]
        L.append("| services | reload | installed | " + " | ".join(cols) + " |")
        L.append("|---|---|---:|" + "---:|" * len(cols))
        for n in (100, 1000):
            rb = rbreak[n]
            if not rb:
                continue
            for key in ("nothing_changed", "one_changed", "all_changed"):
                d = rb.get(key)
                if not d:
                    continue
                L.append(f"| {n:,} | {key.replace('_', ' ')} | {d['installed']} | "
                         + " | ".join(fmt(d.get(c + "_ms"), 2) for c in cols) + " |")
        L.append("")
        for n in (100, 1000):
            rb = rbreak[n]
            if rb:
                L.append(f"- {n:,} services: `ControlPlane::new` {fmt(rb['cp_new_ms'], 1)} ms, first full apply "
                         f"{fmt(rb['start_apply_ms'], 1)} ms, health event to live {fmt(rb['health_event_ms_median'], 2)} ms; "
                         f"RSS of the benchmark process {fmt(rb['rss_kb_before'] / 1024, 1)} MB before the state, "
                         f"{fmt(rb['rss_kb_state'] / 1024, 1)} MB with it")
        L.append("")

    if fl:
        n = fl["prefixes"]
        L.append("## Edge filter details")
        L.append("")
        L.append(f"Two lists of {n:,} prefixes (95 % /32, 4.5 % /24, 0.5 % /20-/23, outside 10/8), "
                 f"{fl['distinct_prefixes']:,} distinct after compilation; {fl['long_entries']:,} addresses "
                 f"in the long table ({fl['buckets']:,} buckets of 64 bytes). Written as list files and read "
                 "the way the daemon reads them (`filters::lists::prepare`: read, parse, check against the "
                 "cluster's addresses, compile), then installed through `ControlPlane::apply` (build the "
                 "generation that is not live, flip one bit of `nilb_config`, wait an RCU grace period, "
                 "release the old generation).")
        L.append("")
        f0, sw = fl["first"], fl["swap"]
        L.append("| phase | first load, ms | swap, ms (median; per repetition) |")
        L.append("|---|---:|---|")
        L.append(f"| read, parse, check, compile | {f0['read_compile_ms']:.0f} | {sw['read_compile_ms_median']:.0f} "
                 f"({', '.join(f'{x:.0f}' for x in sw['read_compile_ms'])}) |")
        L.append(f"| install (apply) | {f0['install_ms']:.0f} | {sw['install_ms_median']:.0f} "
                 f"({', '.join(f'{x:.0f}' for x in sw['install_ms'])}) |")
        L.append(f"| of which maps built and flipped (data plane) | {f0['maps_ms']:.0f} | {sw['maps_ms_median']:.0f} "
                 f"({', '.join(f'{x:.0f}' for x in sw['maps_ms'])}) |")
        L.append("")
        p = fl["process"]
        L.append(f"Memory: kernel maps of the live generation {fl['swap']['kernel_bytes'] / 1048576:.1f} MiB "
                 "(flat table 32 MiB + long table; during a swap both generations exist until the flip is "
                 f"done); the benchmark process's peak RSS grew by {p['peak_growth_first_kb'] / 1024:.0f} MiB "
                 f"for the first load and {p['peak_growth_all_kb'] / 1024:.0f} MiB over all swaps (two "
                 "compiled sets live at once during a swap).")
        L.append("")
        tr = fl["trie"]
        L.append(f"The design not taken: the same {fl['distinct_prefixes']:,} prefixes in one `LPM_TRIE` take "
                 f"{tr['fill_ms']:.0f} ms to fill with `BPF_MAP_UPDATE_BATCH` (the kernel reports "
                 f"{tr['memlock_bytes'] / 1048576:.0f} MiB), and its lookup costs a denied packet the ratio "
                 "in the results table (docs/design.md \"Edge filters\").")
        L.append("")
        if fl_rep:
            L.append("| case | raw ns per repetition (repeat mode) | baseline raw ns | driver alone ns | program ns | baseline ns |")
            L.append("|---|---|---|---|---:|---:|")
            for c in fl["live"]:
                L.append(f"| {fl_names.get(c['case'], (c['case'],))[0]} | {', '.join(f'{x:.1f}' for x in c['nilb_raw_ns'])} | "
                         f"{', '.join(f'{x:.1f}' for x in c['base_raw_ns'])} | {', '.join(f'{x:.1f}' for x in c['driver_ns'])} | "
                         f"{c['prog_ns']:.0f} | {c['base_prog_ns']:.0f} |")
        else:
            L.append("| case | Mpps per run | baseline Mpps per run | program ns | baseline ns |")
            L.append("|---|---|---|---:|---:|")
            for c in fl["live"]:
                L.append(f"| {fl_names.get(c['case'], (c['case'],))[0]} | {', '.join(f'{x:.2f}' for x in c['mpps'])} | "
                         f"{', '.join(f'{x:.2f}' for x in c['base_mpps'])} | {c['prog_ns']:.0f} | {c['base_prog_ns']:.0f} |")
        L.append("")
        L.append("Program ns: `BPF_PROG_TEST_RUN`, repeat 100000, ns per run including the test-run floor. "
                 + ("Repeat mode: see the method notes (raw: driver and program, net: raw - driver alone)."
                    if fl_rep else "Denied and dropped frames are counted as generated per second (nothing "
                    "leaves the interface); allowed VIP frames as counted on the peer."))
        L.append("")

    if e2e:
        L.append("## End-to-end details")
        L.append("")
        L.append("Harness topology (netns-harness/lib.sh): client -> bridge -> node1 (XDP balancer) -> "
                 "bridge -> node2 (TC decapsulation, backend), replies straight to the client (DSR); "
                 "direct = client -> bridge -> node2; routed = client -> bridge -> node1 (kernel IP "
                 "forwarding, nilb's XDP passes it) -> bridge -> node2, the VIP path's hops without nilb. "
                 "GRO is off on the client's bridge port (see scripts/bench.sh: with it on, merged "
                 "CHECKSUM_PARTIAL segments reach node1's XDP and arrive at node2 with bad TCP checksums). "
                 "nat = client -> node1's own address (ports 8000, 5202; `mode: nat`, target ports 8080, 5203: "
                 "twins of the same servers on node2, so that a translated connection never meets a direct "
                 "one's TIME_WAIT; docs/config.md \"NAT mode\") -> node2, which translates in and out; no VIP anywhere. "
                 "Every service has node2 as "
                 "its only backend, so every path ends at the same host. The order of the paths rotates per repetition.")
        L.append("")
        L.append("| rep | path | iperf3 Gbit/s | iperf3 retransmits | HTTP req/s | HTTP errors |")
        L.append("|---|---|---:|---:|---:|---:|")
        reps = sorted({r["rep"] for r in e2e})
        for rep in reps:
            for path in ("vip", "nat", "direct", "routed"):
                ip = [r for r in e2e if r["rep"] == rep and r["path"] == path and r["kind"] == "iperf3"]
                ht = [r["result"] for r in e2e if r["rep"] == rep and r["path"] == path and r["kind"] == "http"]
                if not ip and not ht:
                    continue
                L.append(f"| {rep} | {path} | {fmt(ip[0]['bps'] / 1e9) if ip else '-'} | "
                         f"{ip[0].get('retransmits', '-') if ip else '-'} | {fmt(ht[0]['rps'], 0) if ht else '-'} | "
                         f"{ht[0]['errors'] if ht else '-'} |")
        L.append("")

    # Hand-kept sections of issues' own runs (NAT mode, IPv6), then the
    # record of what each data-plane change bought (numbers of the runs that
    # chose it); both carried into every report.
    for kept in ("sections.md", "history.md"):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), kept)
        if os.path.exists(path):
            with open(path) as f:
                L.append(f.read().rstrip("\n"))
            L.append("")

    L.append("## Method notes")
    L.append("")
    # Each XDP figure says its method: live frames, or repeat-mode program
    # cost where the kernel refused live frames (the probe's errno, once).
    methods = {d.get("xdp_method", "live") for d in (dp, fl) if d}
    refused = next((d["live_frames_refused"] for d in (dp, fl) if d and d.get("live_frames_refused")), None)
    if "repeat" in methods:
        why = (f"this kernel refused live frames: `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` "
               f"failed with {refused} (probed at start: one MAC-swapped frame, repeat 1, into `gen0`)"
               if refused else "repeat mode was chosen (`--method repeat`)")
        runs = (dp or fl)["frames_per_run"]
        L.append(f"- XDP method: {why}. The XDP figures marked \"repeat-mode, program cost\" measure the "
                 "same cases and pairs another way: `BPF_PROG_TEST_RUN` without live frames, "
                 f"{runs:,} runs per measurement in calls of 100,000 (per call: CPU time of the call / "
                 "runs, the kernel's own duration to within 1 ns; the median over the calls, taken "
                 "round-robin over the programs compared), of the driver `gen_repeat` "
                 "(bench/bpf/bench.bpf.c): it moves the frame's start back to its original length "
                 "(`bpf_xdp_adjust_head`, on every run), restores its first 64 bytes, varies the ports "
                 "and tail-calls the program under test through a `PROG_ARRAY` (nilb's own XDP "
                 "program, unchanged). **Raw**: driver and program, ns per packet. **Driver alone**: "
                 "the driver with an empty target (`xdp_pass_only`), measured in every repetition "
                 "beside the pair. **Net** = raw - driver alone, per repetition. Ratios: reference ns / "
                 "nilb ns (packets per CPU-second, the sense of the live ratio), raw and net. Program "
                 "cost only: nothing is transmitted (no XDP_TX to the veth, no peer), so these ratios "
                 "are not comparable with live-frames figures and the targets (set on live frames) are "
                 "not judged (n/a).")
    if "live" in methods:
        L.append("- Live frames: `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` on `gen0` of a veth pair; "
                 "XDP_TX frames leave `gen0` and are counted (per-CPU array) and dropped by an XDP program on the "
                 "peer `sink0`. Mpps = frames counted on the peer / wall time of the run (XDP_PASS rows: frames "
                 "generated / wall time, since they go up the node's stack). Everything runs on the pinned CPU "
                 "(the peer's NAPI runs in the softirq of the sending CPU).")
    L.append("- The 64-byte frames (TCP ACK with 10 bytes payload, or UDP) carry no Ethernet padding; nilb "
             "adds 36 + 4N bytes of GUE (N the hops listed: 0 to 3 previous owners) and sends 100-112-byte "
             "frames, the baseline 64.")
    L.append("- TC: `BPF_PROG_TEST_RUN` of `nilb_tc_second_chance` on a GUE frame (outer 10.99.0.1 -> node "
             "10.99.0.12, one listed hop), one run per call, median; an established TCP socket and a listener "
             "on VIP:80 exist in the namespace. The XDP receive path (backend) rows: the same, with "
             "`nilb_xdp_backend`.")
    L.append("- Repetitions: the XDP cases run 2N times (N: the report's repetitions), the two with a target "
             "(issue 12: TCP to a VIP with 1 and with 100 services) and the floor-balancer pairs 8N times: their "
             "per-repetition ratios spread over +-10 % on this shared machine. The median's 95 % interval is a "
             "bootstrap over those repetitions (2,000 resamples); it covers the variation within one run, not "
             "between runs minutes apart, which on this machine is larger (bench/history.md, issue 12 step 4).")
    L.append("- Raw JSON of every run is in the work directory the script prints (kept with `--keep`).")
    L.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
