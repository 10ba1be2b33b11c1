#!/usr/bin/env python3
"""Read nilb's state file (`nilb run --state-file`) for the harness (Python 3 stdlib only).

    state.py json    FILE                       the state as JSON on stdout
    state.py summary FILE [--service NAME]      one line: per backend state/health/weight/buckets
    state.py get     FILE EXPR [--service NAME] print the value of a Python expression
    state.py wait    FILE EXPR --timeout S [--interval 0.1] [--service NAME]
                     poll until EXPR is true; prints one JSON line
                     {"ok": bool, "elapsed_s": s, "at": epoch, "polls": n, "summary": "..."}
                     and exits 0 when it became true, 1 on timeout

Names available in EXPR:
    d          the whole state (dict, as in the YAML file)
    svc        the service (--service NAME, default: the first one)
    b          svc's backends by hostname (falling back to the address)
    reload     d["last_reload"] or {} (keys at, ok, error, succeeded, failed)
    weights()  "w1:w2:..." of svc's backends in file order
    buckets()  {name: first-hop buckets}
    quotas()   {name: buckets nilb should give it}: largest-remainder apportionment of
               table_size by weight over the first-hop candidates (state active and
               health not down; when there is none, fail-open: every backend not
               offline), ties to the lower address; 0 for the others
    fits(tol=1)  every backend's buckets within tol of quotas()
    settled(tol=1)  pending_moves == 0 and fits(tol)

The file is YAML as serde_yaml writes it; a small parser for that subset (block
mappings and sequences, plain/quoted scalars, block scalars) is used so that no
third-party module is needed.  A missing or half-readable file counts as "not yet"
for wait and as an error (exit 2) for the other commands.
"""

import argparse
import ipaddress
import json
import sys
import time


class ParseError(Exception):
    pass


def _scalar(text):
    t = text.strip()
    if t == "" or t in ("~", "null", "Null", "NULL"):
        return None
    if t in ("true", "True", "TRUE"):
        return True
    if t in ("false", "False", "FALSE"):
        return False
    if t.startswith("'"):
        if not t.endswith("'") or len(t) < 2:
            raise ParseError("unterminated single-quoted scalar: %r" % t[:60])
        return t[1:-1].replace("''", "'")
    if t.startswith('"'):
        try:
            return json.loads(t)
        except ValueError:
            return t[1:-1]
    if t == "[]":
        return []
    if t == "{}":
        return {}
    if t.startswith("[") and t.endswith("]"):
        return [_scalar(x) for x in t[1:-1].split(",") if x.strip()]
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if " #" in t:
        t = t.split(" #", 1)[0].rstrip()
    return t


def _lines(text):
    out = []
    for raw in text.splitlines():
        body = raw.rstrip()
        stripped = body.lstrip(" ")
        if stripped == "" or stripped.startswith("#") or stripped in ("---", "..."):
            out.append((None, raw))  # kept for block scalars
            continue
        out.append((len(body) - len(stripped), stripped))
    return out


def parse_yaml(text):
    """Parse the block-style YAML subset that serde_yaml emits."""
    lines = _lines(text)
    n = len(lines)

    def skip(i):
        while i < n and lines[i][0] is None:
            i += 1
        return i

    def block_scalar(i, parent_indent, header):
        # lines[i] is the first line after the "key: |-" line
        body = []
        ind = None
        while i < n:
            indent, content = lines[i]
            if indent is None:
                body.append("")
                i += 1
                continue
            if indent <= parent_indent:
                break
            if ind is None:
                ind = indent
            raw = lines[i][1]
            body.append(" " * (indent - ind) + raw)
            i += 1
        while body and body[-1] == "":
            body.pop()
        if header.startswith(">"):
            textv = " ".join(x.strip() for x in body)
        else:
            textv = "\n".join(body)
        if "-" not in header:
            textv += "\n"
        return textv, i

    def value_after_key(i, indent, rest):
        # rest: text after "key:"; i: index of the next line
        rest = rest.strip()
        if rest.startswith("|") or rest.startswith(">"):
            return block_scalar(i, indent, rest)
        if rest != "":
            return _scalar(rest), i
        j = skip(i)
        if j >= n:
            return None, j
        nind, ncontent = lines[j]
        if nind > indent or (nind == indent and (ncontent == "-" or ncontent.startswith("- "))):
            return node(j, nind)
        return None, j

    def split_key(content):
        if content.startswith(("'", '"')):
            q = content[0]
            end = content.find(q, 1)
            if end < 0:
                raise ParseError("bad quoted key %r" % content[:60])
            key = content[1:end]
            after = content[end + 1:]
        else:
            pos = content.find(": ")
            if pos < 0:
                if content.endswith(":"):
                    return content[:-1], ""
                raise ParseError("expected 'key: value', got %r" % content[:60])
            key, after = content[:pos], content[pos:]
        if not after.startswith(":"):
            raise ParseError("expected ':' after key in %r" % content[:60])
        return key, after[1:]

    def mapping(i, indent, first=None):
        out = {}
        if first is not None:
            key, rest = split_key(first)
            out[key], i = value_after_key(i, indent, rest)
        while True:
            i = skip(i)
            if i >= n:
                break
            ind, content = lines[i]
            if ind != indent or content == "-" or content.startswith("- "):
                break
            key, rest = split_key(content)
            out[key], i = value_after_key(i + 1, indent, rest)
        return out, i

    def sequence(i, indent):
        out = []
        while True:
            i = skip(i)
            if i >= n:
                break
            ind, content = lines[i]
            if ind != indent or not (content == "-" or content.startswith("- ")):
                break
            item = content[1:].lstrip(" ")
            if item == "":
                j = skip(i + 1)
                if j < n and lines[j][0] > indent:
                    v, i = node(j, lines[j][0])
                else:
                    v, i = None, j
                out.append(v)
                continue
            item_indent = indent + (len(content) - len(item))
            if item.startswith(("'", '"', "[", "{")) or (": " not in item and not item.endswith(":")):
                out.append(_scalar(item))
                i += 1
                continue
            v, i = mapping(i + 1, item_indent, first=item)
            out.append(v)
        return out, i

    def node(i, indent):
        content = lines[i][1]
        if content == "-" or content.startswith("- "):
            return sequence(i, indent)
        if ": " not in content and not content.endswith(":"):
            return _scalar(content), i + 1
        return mapping(i, indent)

    i = skip(0)
    if i >= n:
        return None
    v, i = node(i, lines[i][0])
    i = skip(i)
    if i < n:
        raise ParseError("unexpected content at line %d: %r" % (i + 1, lines[i][1][:60]))
    return v


def load(path):
    with open(path) as f:
        return parse_yaml(f.read())


def largest_remainder(size, items):
    """items: [(addr, weight)] -> {addr: quota} (nilb's table::quotas)."""
    total = sum(w for _, w in items)
    if total == 0:
        return {a: 0 for a, _ in items}
    q = {a: size * w // total for a, w in items}
    left = size - sum(q.values())
    order = sorted(items, key=lambda x: (-(size * x[1] % total), ipaddress.ip_address(x[0])))
    for a, _ in order[:left]:
        q[a] += 1
    return q


class View:
    def __init__(self, d, service=None):
        self.d = d
        svcs = d.get("services") or []
        if service:
            svcs = [s for s in svcs if s.get("name") == service]
        if not svcs:
            raise KeyError("no service%s in the state file" % (" " + service if service else ""))
        self.svc = svcs[0]
        self.backends = self.svc.get("backends") or []
        self.b = {(x.get("hostname") or str(x["dip"])): x for x in self.backends}
        self.name_of = {str(x["dip"]): (x.get("hostname") or str(x["dip"])) for x in self.backends}

    def weights(self):
        return ":".join(str(x["weight"]) for x in self.backends)

    def buckets(self):
        return {n: x["buckets"] for n, x in self.b.items()}

    def quotas(self):
        cand = [x for x in self.backends if x["state"] == "active" and x["health"] != "down"]
        if not cand:
            cand = [x for x in self.backends if x["state"] not in ("offline", "removing")]
        q = largest_remainder(int(self.svc["table_size"]), [(str(x["dip"]), int(x["weight"])) for x in cand])
        return {self.name_of[str(x["dip"])]: q.get(str(x["dip"]), 0) for x in self.backends}

    def fits(self, tol=1):
        q = self.quotas()
        return all(abs(self.b[n]["buckets"] - q[n]) <= tol for n in q)

    def settled(self, tol=1):
        return int(self.svc.get("pending_moves", 0)) == 0 and self.fits(tol)

    def summary(self):
        parts = []
        for n, x in self.b.items():
            parts.append("%s %s/%s w=%s buckets=%s 2nd=%s" % (
                n, x["state"], x["health"], x["weight"], x["buckets"], x["second_hop_buckets"]))
        r = self.d.get("last_reload") or {}
        rl = "none"
        if r:
            rl = "%s (%s applied, %s rejected)" % ("ok" if r.get("ok") else "FAILED", r.get("succeeded"), r.get("failed"))
        return "%s; pending_moves=%s fail_open=%s last_reload=%s" % (
            "; ".join(parts), self.svc.get("pending_moves"), str(self.svc.get("fail_open")).lower(), rl)

    def env(self):
        return {
            "d": self.d, "svc": self.svc, "b": self.b,
            "reload": self.d.get("last_reload") or {},
            "weights": self.weights, "buckets": self.buckets, "quotas": self.quotas,
            "fits": self.fits, "settled": self.settled, "json": json,
        }


def evaluate(path, expr, service):
    v = View(load(path), service)
    return eval(expr, {"__builtins__": __builtins__}, v.env()), v  # noqa: S307 - harness-internal


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("json")
    p.add_argument("file")
    for name in ("summary", "get", "wait"):
        p = sub.add_parser(name)
        p.add_argument("file")
        if name != "summary":
            p.add_argument("expr")
        p.add_argument("--service")
        if name == "wait":
            p.add_argument("--timeout", type=float, required=True)
            p.add_argument("--interval", type=float, default=0.1)
    a = ap.parse_args()

    if a.cmd == "wait":
        t0 = time.monotonic()
        end = t0 + a.timeout
        polls = 0
        last = "state file not read yet"
        ok = False
        while True:
            polls += 1
            try:
                val, v = evaluate(a.file, a.expr, a.service)
                last = v.summary()
                if val:
                    ok = True
                    break
            except (OSError, ParseError, KeyError, TypeError, ValueError) as e:
                last = "%s: %s" % (type(e).__name__, e)
            if time.monotonic() >= end:
                break
            time.sleep(a.interval)
        print(json.dumps({"ok": ok, "elapsed_s": round(time.monotonic() - t0, 3), "at": round(time.time(), 6),
                          "polls": polls, "summary": last}, sort_keys=True))
        return 0 if ok else 1

    try:
        if a.cmd == "json":
            print(json.dumps(load(a.file), sort_keys=True))
        elif a.cmd == "summary":
            print(View(load(a.file), a.service).summary())
        else:
            val, _ = evaluate(a.file, a.expr, a.service)
            print(val if not isinstance(val, (dict, list)) else json.dumps(val, sort_keys=True))
    except (OSError, ParseError, KeyError, TypeError, ValueError) as e:
        print("state.py: %s: %s" % (a.file, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
