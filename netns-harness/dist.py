#!/usr/bin/env python3
"""Judge a `client.py burst` result against backend weights (Python 3 stdlib only).

    dist.py --result burst.json --weights node1=1,node2=1,node3=2 [--alpha 0.001] [--table]

Test: Pearson chi-square goodness of fit over the backends with weight > 0
(k-1 degrees of freedom), rejected when p < alpha (default 0.001).  For
information every backend also gets its expected count and a +-4 sigma binomial
band.  The verdict also fails when any request failed, when a backend that is
not in --weights answered, or when a weighted backend got nothing although its
expected count is >= 5.

Output: a table, then one last line
    SUMMARY <PASS|FAIL> ok=300/300 node1=77/75.0 ... chi2=0.62 df=2 p=0.73 alpha=0.001 [reasons]
Exit status 0 on PASS, 1 on FAIL, 2 on bad input.
"""

import argparse
import json
import math
import sys


def gammainc_upper_reg(s, x):
    """Regularized upper incomplete gamma Q(s, x) (Numerical Recipes style)."""
    if x <= 0:
        return 1.0
    gln = math.lgamma(s)
    if x < s + 1.0:
        # series for P(s, x)
        ap, total, delta = s, 1.0 / s, 1.0 / s
        for _ in range(1000):
            ap += 1.0
            delta *= x / ap
            total += delta
            if abs(delta) < abs(total) * 1e-15:
                break
        p = total * math.exp(-x + s * math.log(x) - gln)
        return max(0.0, 1.0 - p)
    # continued fraction for Q(s, x)
    tiny = 1e-300
    b = x + 1.0 - s
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - s)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + s * math.log(x) - gln) * h


def chi2_sf(x, df):
    return gammainc_upper_reg(df / 2.0, x / 2.0)


def parse_weights(text):
    weights = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, w = item.partition("=")
        weights[name.strip()] = float(w)
    return weights


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--result", required=True, help="JSON from client.py burst ('-' = stdin)")
    ap.add_argument("--weights", required=True, help="name=weight,... (weight 0 = must get nothing)")
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--table", action="store_true", help="print the human-readable demo table")
    a = ap.parse_args()

    try:
        text = sys.stdin.read() if a.result == "-" else open(a.result).read()
        res = json.loads(text.strip().splitlines()[-1] if a.result == "-" else text)
        weights = parse_weights(a.weights)
    except (OSError, ValueError, IndexError) as exc:
        print("SUMMARY FAIL cannot read input: %s" % exc)
        return 2

    by = res.get("by_backend", {})
    count = int(res.get("count", res.get("ok", 0) + res.get("failed", 0)))
    ok = int(res.get("ok", 0))
    failed = int(res.get("failed", 0))
    total_w = sum(w for w in weights.values() if w > 0)
    reasons = []
    if failed:
        reasons.append("%d failed requests %s" % (failed, json.dumps(res.get("errors", {}), sort_keys=True)))
    unknown = {k: v for k, v in by.items() if k not in weights}
    if unknown:
        reasons.append("unexpected backends %s" % json.dumps(unknown, sort_keys=True))

    rows = []
    chi2 = 0.0
    df = -1
    for name in sorted(set(weights) | set(by)):
        w = weights.get(name, 0.0)
        obs = int(by.get(name, 0))
        p = w / total_w if total_w > 0 else 0.0
        exp = ok * p
        sigma = math.sqrt(ok * p * (1 - p))
        if w > 0:
            df += 1
            if exp > 0:
                chi2 += (obs - exp) ** 2 / exp
            if obs == 0 and exp >= 5:
                reasons.append("%s got no requests" % name)
        elif obs and name in weights:
            reasons.append("%s has weight 0 but got %d" % (name, obs))
        rows.append((name, w, obs, exp, sigma, p))
    pval = chi2_sf(chi2, df) if df > 0 else 1.0
    if ok == 0:
        reasons.append("no successful request")
    elif df > 0 and pval < a.alpha:
        reasons.append("chi2 %.2f > critical (p=%.2g < %g)" % (chi2, pval, a.alpha))

    if a.table:
        print("  %-10s %6s %9s %8s %10s" % ("backend", "weight", "requests", "share %", "expected %"))
        print("  %-10s %6s %9s %8s %10s" % ("-" * 10, "-" * 6, "-" * 9, "-" * 8, "-" * 10))
        for name, w, obs, exp, sigma, p in rows:
            share = 100.0 * obs / ok if ok else 0.0
            print("  %-10s %6g %9d %8.1f %10.1f" % (name, w, obs, share, 100.0 * p))
        print("  %-10s %6g %9d %8.1f %10.1f" % ("total", total_w, ok, 100.0 if ok else 0.0, 100.0))
        print("  (%d requests, %d ok, %d failed)" % (count, ok, failed))
    else:
        print("  %-10s %6s %9s %9s %17s %7s" % ("backend", "weight", "observed", "expected", "+-4 sigma band", "dev/sd"))
        for name, w, obs, exp, sigma, p in rows:
            lo, hi = max(0.0, exp - 4 * sigma), exp + 4 * sigma
            dev = (obs - exp) / sigma if sigma > 0 else 0.0
            print("  %-10s %6g %9d %9.1f %8.1f..%-7.1f %+7.2f" % (name, w, obs, exp, lo, hi, dev))
    crit = None
    # critical value by bisection, for display
    if df > 0:
        lo_x, hi_x = 0.0, 1000.0
        for _ in range(200):
            mid = (lo_x + hi_x) / 2
            if chi2_sf(mid, df) > a.alpha:
                lo_x = mid
            else:
                hi_x = mid
        crit = (lo_x + hi_x) / 2
    print("  chi-square %.3f, df %d, p-value %.4g, critical value at alpha=%g: %s"
          % (chi2, df, pval, a.alpha, "%.3f" % crit if crit is not None else "n/a"))

    verdict = "FAIL" if reasons else "PASS"
    parts = ["ok=%d/%d" % (ok, count)]
    parts += ["%s=%d/%.1f" % (name, obs, exp) for name, w, obs, exp, sigma, p in rows]
    parts.append("chi2=%.2f df=%d p=%.3g alpha=%g" % (chi2, df, pval, a.alpha))
    line = "SUMMARY %s %s" % (verdict, " ".join(parts))
    if reasons:
        line += " [" + "; ".join(reasons) + "]"
    print(line)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
