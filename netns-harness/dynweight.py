#!/usr/bin/env python3
"""Load model, sampler, verdict and plot for the dynamic-weights scenario (dw).

    dynweight.py serve   --node NAME --port P --control CTL --state STATE
    dynweight.py sample  --state STATE --control CTL --phase-file F --out CSV --t0 EPOCH
                         [--interval 0.5] [--stop-file F] [--max-seconds 120]
    dynweight.py wait    --state STATE --quiet S --timeout S [--need-change]
    dynweight.py analyze --csv CSV --log NILB_LOG... --control-hot CTL --t0 EPOCH --t-hot EPOCH
                         [--t-hot-end EPOCH] --t-cool EPOCH --t-end EPOCH
                         --max-step-percent P --deadband-percent D [--weights W] [--min-weight W]
    dynweight.py plot    --csv CSV --out PNG [--title T] [--mark T:LABEL]...

(Python 3 stdlib only; `plot` needs gnuplot.)  STATE is node1's --state-file;
it is read through `nilb status --json` (state.py: the nilb binary from
$NH_NILB), never parsed here.

Load model.  Every node's metrics endpoint (`serve`, in the node's namespace on
0.0.0.0:P, path /metrics) answers with nilb's own gauge
`nilb_host_cpu_utilization_ratio`, computed at each scrape as

    cpu(node) = min(1, idle(node) + cost(node) * share(node))

share = the node's fraction of first-hop buckets in the balancer's (node1's)
state file, read at that moment; idle and cost come from the control file CTL
(JSON {"nodes": {"node1": {"idle": 0.1, "cost": 0.9}, ...}}, rewritten
atomically by the harness).  So a node's CPU reacts to the traffic nilb gives it:
with idle 0.1 and cost 0.9 a node with a third of the buckets reads 40 %.
"node2 at 95 %" is node2 getting slower (cost 2.55: the same share now costs
2.8 times the CPU, e.g. a noisy neighbour), so shifting buckets away cools it
down, and the loads meet at an interior point (shares proportional to
1/cost: 15 / 42.5 / 42.5 %) instead of node2 being pushed to
min_weight_percent as a constant 95 % would.  A node may also be given
{"cpu": X} for a constant reading.  Each scrape is logged
(`scrape at=EPOCH cpu=... share=... from=ADDR`).

sample  every --interval seconds: one CSV row from the state file and CTL
        time_s,phase,node1_share,node2_share,node3_share,node1_cpu,node2_cpu,
        node3_cpu,node1_load,node2_load,node3_load,node1_weight,node2_weight,
        node3_weight,pending_moves
        (shares and cpu in percent; cpu = what the model serves at that moment;
        load = the reading nilb last took, from the state file; weight = the
        effective weight; phase = contents of --phase-file).
wait    until the shares in the state file have not changed for --quiet
        seconds and pending_moves is 0 (with --need-change: and they changed at
        least once since the start); one JSON line, exit 0 / 1 on timeout.
analyze the verdict: node1's `table installed` log lines between --t-hot and
        --t-end (hot phase: --t-hot to --t-hot-end or --t-cool; cool: --t-cool to --t-end) (steps; the last step of a round has pending=0, so rounds = such
        lines), the CSV (shares over time), and the model (expected equilibrium).
        Prints details and a last line `SUMMARY <PASS|FAIL> key=value ...`.
plot    a PNG (gnuplot): bucket shares of the three nodes (steps) and the CPU each
        node reported (dotted, right axis), with a dashed line at each --mark.
"""

import argparse
import csv
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import state as statemod  # noqa: E402 - reads the state through `nilb status --json`

NODES = ("node1", "node2", "node3")
GAUGE = "nilb_host_cpu_utilization_ratio"


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def shares_of(state_path):
    """{name: fraction of first-hop buckets}, pending_moves, the backends; None if unreadable."""
    try:
        v = statemod.View(statemod.load(state_path))
    except (statemod.StateError, KeyError, TypeError, ValueError):
        return None
    size = int(v.svc["table_size"])
    return ({n: x["buckets"] / size for n, x in v.b.items()}, int(v.svc.get("pending_moves", 0) or 0), v.b)


def model_cpu(ctl, node, share):
    spec = (ctl or {}).get("nodes", {}).get(node, {})
    if "cpu" in spec:
        return max(0.0, min(1.0, float(spec["cpu"])))
    return max(0.0, min(1.0, float(spec.get("idle", 0.1)) + float(spec.get("cost", 0.9)) * share))


# --------------------------------------------------------------------------- serve

def cmd_serve(a):
    last = {"share": 1.0 / 3}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "nilb-harness-cpu"
        sys_version = ""

        def do_GET(self):  # noqa: N802 (stdlib naming)
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            got = shares_of(a.state)
            with lock:
                if got is not None and a.node in got[0]:
                    last["share"] = got[0][a.node]
                share = last["share"]
            cpu = model_cpu(read_json(a.control, {}), a.node, share)
            body = ("# HELP %s Host CPU utilisation (harness load model).\n# TYPE %s gauge\n%s %.6f\n"
                    % (GAUGE, GAUGE, GAUGE, cpu)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            print("scrape at=%.6f cpu=%.4f share=%.4f from=%s" % (time.time(), cpu, share, self.client_address[0]),
                  flush=True)

        def log_message(self, fmt, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("0.0.0.0", a.port), Handler)
    print("cpu metrics for %s listening on 0.0.0.0:%d at=%.6f" % (a.node, a.port, time.time()), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start())
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda *_: threading.Thread(target=srv.shutdown, daemon=True).start())
    srv.serve_forever(poll_interval=0.2)
    srv.server_close()
    return 0


# --------------------------------------------------------------------------- sample

COLUMNS = (["time_s", "phase"] + ["%s_share" % n for n in NODES] + ["%s_cpu" % n for n in NODES]
           + ["%s_load" % n for n in NODES] + ["%s_weight" % n for n in NODES] + ["pending_moves"])


def cmd_sample(a):
    end = time.monotonic() + a.max_seconds
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        f.flush()
        nxt = time.monotonic()
        while time.monotonic() < end:
            if a.stop_file and os.path.exists(a.stop_file):
                break
            got = shares_of(a.state)
            if got is not None:
                shares, pending, b = got
                ctl = read_json(a.control, {})
                try:
                    with open(a.phase_file) as pf:
                        phase = pf.read().strip()
                except OSError:
                    phase = ""
                row = ["%.2f" % (time.time() - a.t0), phase]
                row += ["%.2f" % (100 * shares.get(n, 0)) for n in NODES]
                row += ["%.1f" % (100 * model_cpu(ctl, n, shares.get(n, 0))) for n in NODES]
                row += ["" if b.get(n, {}).get("load") is None else "%.1f" % float(b[n]["load"]) for n in NODES]
                row += ["%s" % b.get(n, {}).get("effective_weight", "") for n in NODES]
                row += [pending]
                w.writerow(row)
                f.flush()
            nxt += a.interval
            time.sleep(max(0.0, nxt - time.monotonic()))
    return 0


# --------------------------------------------------------------------------- wait

def cmd_wait(a):
    t0 = time.monotonic()
    end = t0 + a.timeout
    first = None
    last = None
    last_change = time.monotonic()
    changed = False
    ok = False
    summary = "state file not read yet"
    while True:
        got = shares_of(a.state)
        now = time.monotonic()
        if got is not None:
            shares, pending, _ = got
            key = tuple(round(shares.get(n, 0) * 100000) for n in NODES)
            if first is None:
                first = key
            if key != last:
                last = key
                last_change = now
            if key != first:
                changed = True
            summary = "shares %s pending=%d" % ("/".join("%.1f" % (100 * shares.get(n, 0)) for n in NODES), pending)
            if pending == 0 and now - last_change >= a.quiet and (changed or not a.need_change):
                ok = True
                break
        if now >= end:
            break
        time.sleep(0.1)
    print(json.dumps({"ok": ok, "elapsed_s": round(time.monotonic() - t0, 3), "at": round(time.time(), 6),
                      "changed": changed, "summary": summary}, sort_keys=True))
    return 0 if ok else 1


# --------------------------------------------------------------------------- analyze

TS_RX = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")


def installs(logs, t_from, t_to):
    """[(epoch, moved, pending)] of `table installed` lines in [t_from, t_to], in time order."""
    out = []
    for log in logs:
        out += _installs(log, t_from, t_to)
    return sorted(out)


def _installs(log, t_from, t_to):
    out = []
    try:
        with open(log, errors="replace") as f:
            for line in f:
                line = re.sub(r"\x1b\[[0-9;]*m", "", line)
                if "table installed" not in line:
                    continue
                m = TS_RX.search(line)
                mv = re.search(r"\bmoved=(\d+)", line)
                pd = re.search(r"\bpending=(\d+)", line)
                if not (m and mv and pd):
                    continue
                t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
                if t_from <= t <= t_to:
                    out.append((t, int(mv.group(1)), int(pd.group(1))))
    except OSError:
        pass
    return out


def equilibrium(ctl):
    """Shares at which every node's modelled CPU is equal (percent), or None."""
    nodes = ctl.get("nodes", {})
    if any("cpu" in nodes.get(n, {}) for n in NODES):
        return None
    idle = [float(nodes.get(n, {}).get("idle", 0.1)) for n in NODES]
    cost = [float(nodes.get(n, {}).get("cost", 0.9)) for n in NODES]
    # idle_i + cost_i * s_i = c for all i, sum s_i = 1
    c = (1 + sum(i / k for i, k in zip(idle, cost))) / sum(1 / k for k in cost)
    return {n: 100 * (c - i) / k for n, i, k in zip(NODES, idle, cost)}


def cmd_analyze(a):
    rows = []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            rows.append(r)
    if not rows:
        print("SUMMARY FAIL no samples in %s" % a.csv)
        return 1
    t0 = a.t0
    ctl_hot = read_json(a.control_hot, {})
    size = a.table_size
    limit = max(1, size * a.max_step_percent // 100)  # at most: rounded down, at least one bucket
    ok = True
    notes = []

    def t_of(r):
        return t0 + float(r["time_s"])

    def share(r, n):
        return float(r["%s_share" % n])

    def phase_rows(t1, t2):
        return [r for r in rows if t1 <= t_of(r) <= t2]

    t_hot_end = a.t_hot_end or a.t_cool
    hot = phase_rows(a.t_hot, t_hot_end)
    cool = phase_rows(a.t_cool, a.t_end)
    before = [r for r in rows if t_of(r) < a.t_hot]
    if not hot or not cool or not before:
        print("SUMMARY FAIL too few samples (before %d, hot %d, cool %d)" % (len(before), len(hot), len(cool)))
        return 1
    start = {n: share(before[-1], n) for n in NODES}

    res = {}
    for name, t1, t2, rs in (("hot", a.t_hot, t_hot_end, hot), ("cool", a.t_cool, a.t_end, cool)):
        ins = installs(a.log, t1, t2)
        steps = len(ins)
        rounds = sum(1 for _, _, p in ins if p == 0)
        max_moved = max((m for _, m, _ in ins), default=0)
        last_t = ins[-1][0] - t1 if ins else None
        first_t = ins[0][0] - t1 if ins else None
        # direction of node2's share: falling in "hot", rising in "cool" (1 bucket of slack)
        seq = [share(r, "node2") for r in rs]
        slack = 100.0 / size + 1e-6
        if name == "hot":
            against = max((b - a_ for a_, b in zip(seq, seq[1:])), default=0)
        else:
            against = max((a_ - b for a_, b in zip(seq, seq[1:])), default=0)
        monotone = against <= slack
        final = {n: share(rs[-1], n) for n in NODES}
        cpus = {n: float(rs[-1]["%s_cpu" % n]) for n in NODES}
        res[name] = dict(steps=steps, rounds=rounds, max_moved=max_moved, last_t=last_t, first_t=first_t,
                         monotone=monotone, against=against, final=final, cpus=cpus)
        print("  %s phase: %d table installs (%d rounds = installs ending with pending=0), first %s, last %s after"
              " the change; largest install moved %d buckets (limit %d = %s%% of %d); node2 share %s; final shares %s;"
              " modelled cpu %s" % (
                  name, steps, rounds, "%+.2fs" % first_t if first_t is not None else "-",
                  "%+.2fs" % last_t if last_t is not None else "-", max_moved, limit, a.max_step_percent, size,
                  " -> ".join("%.1f" % x for x in _dedup(seq)),
                  "/".join("%.1f" % final[n] for n in NODES), "/".join("%.1f" % cpus[n] for n in NODES)))

    h, c = res["hot"], res["cool"]
    eq = equilibrium(ctl_hot)
    half_band = a.deadband_percent / 2.0
    # hot phase verdicts
    if h["steps"] < 2:
        ok = False
        notes.append("node2 hot: only %d table installs (expected a step-by-step shift)" % h["steps"])
    if h["max_moved"] > limit or c["max_moved"] > limit:
        ok = False
        notes.append("a step moved more than max_step_percent allows (%d/%d > %d)" % (h["max_moved"], c["max_moved"], limit))
    if not h["monotone"]:
        ok = False
        notes.append("node2's share rose by %.2f points while it was hot" % h["against"])
    if not (h["final"]["node2"] < start["node2"] - 5):
        ok = False
        notes.append("node2's share did not fall by more than 5 points (%.1f -> %.1f)" % (start["node2"], h["final"]["node2"]))
    for n in ("node1", "node3"):
        if not h["final"][n] > start[n] + 2:
            ok = False
            notes.append("%s's share did not rise while node2 was hot (%.1f -> %.1f)" % (n, start[n], h["final"][n]))
    spread_h = max(h["cpus"].values()) - min(h["cpus"].values())
    if spread_h > a.deadband_percent + 2:
        ok = False
        notes.append("loads not equalised while node2 was hot: cpu %s" % "/".join("%.1f" % h["cpus"][n] for n in NODES))
    w2 = rows_weight(hot[-1], "node2")
    if w2 is not None and w2 <= a.min_weight + 1e-9:
        ok = False
        notes.append("node2's effective weight is at the min_weight_percent floor (%.1f)" % w2)
    if eq:
        dev = max(abs(h["final"][n] - eq[n]) for n in NODES)
        if dev > a.share_tolerance:
            ok = False
            notes.append("hot-phase shares %.1f points from the model's equilibrium" % dev)
    # cool phase verdicts
    expected = {n: 100.0 / len(NODES) for n in NODES}
    if a.weights:
        ws = [float(x) for x in a.weights.split(":")]
        expected = {n: 100 * w / sum(ws) for n, w in zip(NODES, ws)}
    devc = max(abs(c["final"][n] - expected[n]) for n in NODES)
    if devc > a.share_tolerance:
        ok = False
        notes.append("shares did not return near the configured split (%.1f points off)" % devc)
    if not c["monotone"]:
        ok = False
        notes.append("node2's share fell by %.2f points while it recovered" % c["against"])
    if c["steps"] < 1:
        ok = False
        notes.append("no table change after node2 cooled down")
    if h["last_t"] is None or c["last_t"] is None:
        ok = False
    print("SUMMARY %s max_share_step=%.2f%%/change (%d buckets, limit %d) hot: %d steps %d rounds, node2 %.1f->%.1f%%,"
          " moved off in %s (first step %s), final %s (model equilibrium %s, cpu %s); cool: %d steps %d rounds,"
          " back in %s, final %s (configured %s, max dev %.1f points), half deadband %.1f points%s%s" % (
              "PASS" if ok else "FAIL", 100.0 * max(h["max_moved"], c["max_moved"]) / size, max(h["max_moved"], c["max_moved"]),
              limit, h["steps"], h["rounds"], start["node2"], h["final"]["node2"],
              "%.1fs" % h["last_t"] if h["last_t"] is not None else "never",
              "%+.2fs" % h["first_t"] if h["first_t"] is not None else "never",
              "/".join("%.1f" % h["final"][n] for n in NODES),
              "/".join("%.1f" % eq[n] for n in NODES) if eq else "n/a",
              "/".join("%.0f" % h["cpus"][n] for n in NODES),
              c["steps"], c["rounds"], "%.1fs" % c["last_t"] if c["last_t"] is not None else "never",
              "/".join("%.1f" % c["final"][n] for n in NODES), "/".join("%.1f" % expected[n] for n in NODES), devc,
              half_band, "; " if notes else "", "; ".join(notes)))
    return 0 if ok else 1


def rows_weight(r, n):
    try:
        return float(r["%s_weight" % n])
    except (KeyError, ValueError):
        return None


def _dedup(seq):
    out = []
    for x in seq:
        if not out or abs(out[-1] - x) > 1e-9:
            out.append(x)
    return out


# --------------------------------------------------------------------------- plot

def cmd_plot(a):
    gp = shutil.which("gnuplot")
    if not gp:
        print("gnuplot not found (Debian: apt-get install gnuplot-nox); no plot")
        return 3
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    marks = []
    for m in a.mark:
        t, _, label = m.partition(":")
        marks.append((float(t), label))
    if not a.mark:  # from the phase column (up to one sample late)
        prev = None
        for r in rows:
            if r["phase"] != prev:
                if prev is not None:
                    marks.append((float(r["time_s"]), r["phase"]))
                prev = r["phase"]
    script = [
        "set terminal pngcairo size 1000,560 font 'DejaVu Sans,10'",
        "set output '%s'" % a.out.replace("'", ""),
        "set datafile separator ','",
        "set key outside bottom center horizontal",
        "set title '%s'" % a.title.replace("'", ""),
        "set xlabel 'time (s)'",
        "set ylabel 'bucket share (%)'",
        "set y2label 'CPU utilisation reported (%)'",
        "set yrange [0:60]",
        "set y2range [0:100]",
        "set ytics nomirror",
        "set y2tics",
        "set grid xtics ytics",
        "set autoscale xfixmax",
        "set xrange [0:*]",
    ]
    for t, label in marks:
        script.append("set arrow from %.2f, graph 0 to %.2f, graph 1 nohead dashtype 2 lc rgb '#888888'" % (t, t))
        script.append("set label '%s' at %.2f, graph 0.97 offset 0.5,0 font ',9' tc rgb '#555555'" % (
            label.replace("'", ""), t))
    script.append(
        "plot '%s' every ::1 using 1:3 with steps lw 4 lc rgb '#1f77b4' title 'node1 share', "
        "'' every ::1 using 1:5 with steps lw 2 lc rgb '#2ca02c' title 'node3 share', "
        "'' every ::1 using 1:4 with steps lw 3 lc rgb '#d62728' title 'node2 share', "
        "'' every ::1 using 1:7 axes x1y2 with steps lw 1.5 dt 2 lc rgb '#d62728' title 'node2 CPU (right axis)', "
        "'' every ::1 using 1:6 axes x1y2 with steps lw 1.5 dt 3 lc rgb '#1f77b4' title 'node1 CPU', "
        "'' every ::1 using 1:8 axes x1y2 with steps lw 1.5 dt 3 lc rgb '#2ca02c' title 'node3 CPU'" % a.csv.replace("'", ""))
    try:
        p = subprocess.run([gp], input="\n".join(script) + "\n", text=True, capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        print("gnuplot timed out")
        return 1
    if p.returncode != 0 or not os.path.exists(a.out):
        print("gnuplot failed: %s" % p.stderr.strip()[:300])
        return 1
    print("plot written: %s (%d samples)" % (a.out, len(rows)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--node", required=True)
    p.add_argument("--port", type=int, default=9101)
    p.add_argument("--control", required=True)
    p.add_argument("--state", required=True)
    p = sub.add_parser("sample")
    p.add_argument("--state", required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--phase-file", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--stop-file")
    p.add_argument("--max-seconds", type=float, default=120)
    p = sub.add_parser("wait")
    p.add_argument("--state", required=True)
    p.add_argument("--quiet", type=float, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--need-change", action="store_true")
    p = sub.add_parser("analyze")
    p.add_argument("--csv", required=True)
    p.add_argument("--log", required=True, action="append", help="nilb log of the balancer (repeatable)")
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--t-hot-end", type=float, help="end of the hot phase's window (default --t-cool)")
    p.add_argument("--control-hot", required=True)
    p.add_argument("--t-hot", type=float, required=True)
    p.add_argument("--t-cool", type=float, required=True)
    p.add_argument("--t-end", type=float, required=True)
    p.add_argument("--table-size", type=int, default=1024)
    p.add_argument("--max-step-percent", type=float, required=True)
    p.add_argument("--deadband-percent", type=float, required=True)
    p.add_argument("--share-tolerance", type=float, default=4.0,
                   help="percentage points between final and expected shares")
    p.add_argument("--weights", help="configured weights w1:w2:w3 (default equal)")
    p.add_argument("--min-weight", type=float, default=0.0,
                   help="node2's effective-weight floor (min_weight_percent of its weight)")
    p = sub.add_parser("plot")
    p.add_argument("--csv", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="nilb dynamic weights")
    p.add_argument("--mark", action="append", default=[], help="T:LABEL, a dashed vertical line at T seconds")
    a = ap.parse_args()
    return {"serve": cmd_serve, "sample": cmd_sample, "wait": cmd_wait, "analyze": cmd_analyze,
            "plot": cmd_plot}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
