#!/usr/bin/env python3
"""Line up a `client.py stream` result with an event (Python 3 stdlib only).

    timeline.py down  --result S.json --node node3 --t0 EPOCH --window SECS [--t-signal EPOCH]
                      [--log F --log-match RE]...
    timeline.py up    --result S.json --node node3 --t0 EPOCH --window SECS [--log F --log-match RE]...
    timeline.py avoid --result S.json --node node2 [--t0 EPOCH]
    timeline.py recover --result S.json --node node3 --t0 EPOCH --window SECS

Times are wall-clock (time.time()) seconds; each request of the stream carries
the time it was started (connect() called, SYN sent).

down   NODE stopped accepting at T0.  Reports the last request that reached NODE
       (answered by it, or failed: a SYN that reaches a node without listener is
       refused) relative to T0, and counts what happened after T0 + WINDOW.
       PASS when no request started after T0 + WINDOW failed or was answered by
       NODE, no request failed before T0 (before --t-signal, when the stop was
       requested, if that is given), and at least 20 requests were made after
       the window (so the check had something to see).
up     NODE started accepting at T0.  Reports the first request answered by NODE
       relative to T0.  PASS when that is within WINDOW and no request failed.
avoid  PASS when no request was answered by NODE and none failed (requests
       started before T0, if given, are ignored).
recover  something broke the way to NODE at T0 (e.g. a wrong MAC address).
       Reports the last failed request relative to T0 (the recovery time) and
       NODE's answers after it.  PASS when no request failed before T0 or
       after T0 + WINDOW, and NODE answered at least one request started
       after T0 + WINDOW (it is reached again, not only avoided).

--log FILE --log-match REGEX (repeatable, pairs): also print the time of the
first line of FILE after T0 matching REGEX (nilb's RFC 3339 timestamps), e.g.
when node1's nilb logged the health change.  Information only.

Output: a few lines, then one last line
    SUMMARY <PASS|FAIL> key=value ...
Exit status 0 on PASS, 1 on FAIL, 2 on bad input.
"""

import argparse
import datetime
import json
import re
import sys


def log_time(path, pattern, t0):
    rx = re.compile(pattern)
    ts_rx = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = re.sub(r"\x1b\[[0-9;]*m", "", line)
                m = ts_rx.search(line)
                if not m or not rx.search(line):
                    continue
                t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
                if t >= t0 - 0.05:
                    return t, line.strip()
    except OSError:
        pass
    return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("down", "up", "avoid", "recover"))
    ap.add_argument("--result", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--t0", type=float)
    ap.add_argument("--window", type=float)
    ap.add_argument("--t-signal", type=float, help="down: when the stop was requested (<= t0)")
    ap.add_argument("--log", action="append", default=[])
    ap.add_argument("--log-match", action="append", default=[])
    a = ap.parse_args()
    if a.mode in ("down", "up", "recover") and (a.t0 is None or a.window is None):
        ap.error("%s needs --t0 and --window" % a.mode)
    if len(a.log) != len(a.log_match):
        ap.error("--log and --log-match come in pairs")
    try:
        with open(a.result) as f:
            d = json.load(f)
        reqs = [(float(r[0]), r[1], r[2], r[3]) for r in d["requests"]]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print("SUMMARY FAIL cannot read %s: %s" % (a.result, e))
        return 2
    node = a.node
    out = []
    verdict = True
    why = []

    def fmt(x):
        return "none" if x is None else "%+.3fs" % x

    for path, pattern in zip(a.log, a.log_match):
        t, line = log_time(path, pattern, a.t0 if a.t0 is not None else 0.0)
        if t is None:
            out.append("  log: no line matching /%s/ in %s after t0" % (pattern, path))
        else:
            out.append("  log: %s after t0: %s" % (fmt(t - a.t0), line[:170]))

    if a.mode == "avoid":
        use = [r for r in reqs if a.t0 is None or r[0] >= a.t0]
        hit = [r for r in use if r[2] == node]
        failed = [r for r in use if r[3] is not None]
        by = {}
        for r in use:
            k = r[2] or "error:%s" % r[3]
            by[k] = by.get(k, 0) + 1
        nums = "requests=%d to_%s=%d failed=%d by_backend=%s" % (
            len(use), node, len(hit), len(failed), json.dumps(dict(sorted(by.items())), separators=(",", ":")))
        if hit:
            why.append("%d new connections landed on %s (first at sport %s)" % (len(hit), node, hit[0][1]))
        if failed:
            why.append("%d failed (%s)" % (len(failed), ",".join(sorted({r[3] for r in failed}))))
        if not use:
            why.append("no requests")
        verdict = not why
    else:
        t0 = a.t0
        rel = [(r[0] - t0, r[1], r[2], r[3]) for r in reqs]
        before = [r for r in rel if r[0] < 0]
        after = [r for r in rel if r[0] >= 0]
        if a.mode == "recover":
            failed = [r for r in rel if r[3] is not None]
            fail_before = [r for r in before if r[3] is not None]
            fail_after = [r for r in after if r[3] is not None]
            late = [r for r in rel if r[0] > a.window]
            late_fail = [r for r in late if r[3] is not None]
            late_node = [r for r in late if r[2] == node]
            last_fail = max((r[0] for r in fail_after), default=None)
            kinds = sorted({r[3] for r in failed})
            out.append("  stream: %d requests, %d before t0, %d after (%.1f/s); %d failed after t0 %s" % (
                len(rel), len(before), len(after), d.get("rate", 0), len(fail_after), ",".join(kinds)))
            nums = ("recovered_after=%s window=%.2fs failed_before=%d failed_after_t0=%d failed_after_window=%d "
                    "%s_after_window=%d total=%d") % (
                fmt(last_fail) if last_fail is not None else "+0.000s(no failure)", a.window, len(fail_before),
                len(fail_after), len(late_fail), node, len(late_node), len(rel))
            if fail_before:
                why.append("%d requests failed before t0" % len(fail_before))
            if late_fail:
                why.append("%d requests failed after the window (last %+.3fs %s)" % (
                    len(late_fail), late_fail[-1][0], late_fail[-1][3]))
            if not late_node:
                why.append("%s answered no request after the window" % node)
        elif a.mode == "down":
            to_node = [r for r in rel if r[2] == node or r[3] is not None]
            answered = [r for r in rel if r[2] == node]
            failed = [r for r in rel if r[3] is not None]
            last_to = max((r[0] for r in to_node), default=None)
            last_ans = max((r[0] for r in answered), default=None)
            last_fail = max((r[0] for r in failed), default=None)
            late = [r for r in rel if r[0] > a.window]
            late_fail = [r for r in late if r[3] is not None]
            late_node = [r for r in late if r[2] == node]
            t_sig = min(0.0, a.t_signal - t0) if a.t_signal is not None else 0.0
            fail_before = [r for r in before if r[3] is not None and r[0] < t_sig]
            fail_in = [r for r in rel if 0 <= r[0] <= a.window and r[3] is not None]
            kinds = sorted({r[3] for r in failed})
            out.append("  stream: %d requests, %d before t0, %d in the window, %d after it (%.1f/s)" % (
                len(rel), len(before), len([r for r in after if r[0] <= a.window]), len(late), d.get("rate", 0)))
            out.append("  last request answered by %s: %s; last failed request: %s; failures in the window: %d %s" % (
                node, fmt(last_ans), fmt(last_fail), len(fail_in), ",".join(kinds)))
            nums = ("last_to_%s=%s window=%.2fs failed_before=%d failed_in_window=%d failed_after=%d "
                    "%s_after=%d requests_after=%d total=%d") % (
                node, fmt(last_to), a.window, len(fail_before), len(fail_in), len(late_fail), node,
                len(late_node), len(late), len(rel))
            if last_to is not None and last_to > a.window:
                why.append("a request reached %s %.3f s after t0 (window %.2f s)" % (node, last_to, a.window))
            if late_fail:
                why.append("%d requests failed after the window (first %+.3fs %s)" % (
                    len(late_fail), late_fail[0][0], late_fail[0][3]))
            if late_node:
                why.append("%d requests answered by %s after the window" % (len(late_node), node))
            if fail_before:
                why.append("%d requests failed before t0" % len(fail_before))
            if len(late) < 20:
                why.append("only %d requests after the window" % len(late))
            if not before:
                why.append("no request before t0 (stream started late)")
        else:
            answered = [r for r in after if r[2] == node]
            failed = [r for r in rel if r[3] is not None]
            first = min((r[0] for r in answered), default=None)
            tail = [r for r in rel if r[0] >= (rel[-1][0] - 1.0)] if rel else []
            share = (100.0 * sum(1 for r in tail if r[2] == node) / len(tail)) if tail else 0.0
            out.append("  stream: %d requests, %d before t0, %d after; %s answered %d after t0" % (
                len(rel), len(before), len(after), node, len(answered)))
            nums = "first_from_%s=%s bound=%.2fs failed=%d %s_share_last_1s=%.0f%% total=%d" % (
                node, fmt(first), a.window, len(failed), node, share, len(rel))
            if first is None:
                why.append("%s answered no request after t0" % node)
            elif first > a.window:
                why.append("%s answered first %.3f s after t0 (bound %.2f s)" % (node, first, a.window))
            if failed:
                why.append("%d requests failed (%s)" % (len(failed), ",".join(sorted({r[3] for r in failed}))))
        verdict = not why
    for line in out:
        print(line)
    print("SUMMARY %s %s%s" % ("PASS" if verdict else "FAIL", nums, (" [" + "; ".join(why) + "]") if why else ""))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
