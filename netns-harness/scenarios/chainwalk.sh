# shellcheck shell=bash
# scenario-order: 220
# (chainwalk) What a packet no owner claims costs when it walks its bucket's
# whole chain (issue 20: "the extra latency of an unknown-flow packet that
# walks the whole chain"). With `unknown_flow: rst`, the chains trimmed to one
# previous owner (a reload with previous_owners 1), then two weight changes
# (3:1:1, 1:3:1, each settled) leave buckets with 0, 1 and 2 previous owners; node1's live table (`nilb lookup --live`) sorts 300 source ports by
# the chain length of their bucket, and up to 8 ports of each length are
# probed 25 times each from the client with a bare TCP ACK for no connection
# (flows.py rst-probe): the first hop and then every previous owner find no
# socket and pass it on (tc_forward), the last owner answers with a RST from
# the VIP (tc_rst_sent). Printed: the median round trip per chain length and
# the extra per hop (longest minus shortest median, per hop), and the counters
# that moved, summed over the nodes. Pass: every probe answered by a RST,
# ports of two chain lengths found, tc_forward moved by at least the hops the
# probes walked and tc_rst_sent by at least the probes.
# Needs: the base state. Leaves: the base state.

scenario_chainwalk() {
  local nums="" ok=1 w picks res before=() after=() n fwd0 fwd1 rst0 rst1 want_fwd sent summary
  header "(chainwalk) an unknown flow walks its bucket's chain to the last owner, which answers with a RST: round trip per chain length"
  need_base chainwalk || return
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  UNKNOWN_FLOW=rst
  # Chains trimmed to one previous owner first (earlier scenarios leave
  # full chains), then nilb's default again: the changes below leave a mix.
  RB_PREVIOUS_OWNERS=1
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  wait_settled 40 >/dev/null || { ok=0; nums+="trimming the chains did not settle: $WAIT_SUMMARY; "; }
  RB_PREVIOUS_OWNERS=""
  for w in "3 1 1" "1 3 1"; do
    # shellcheck disable=SC2086 # three weights
    write_config $w
    hup_all
    wait_settled 40 >/dev/null || { ok=0; nums+="weights ${w// /:} did not settle: $WAIT_SUMMARY; "; }
  done
  picks=$NH_OUT/chainwalk-ports.json
  "$NH_PY" - "$NILB" "$CFG" "${PIN_DIR[node1]}" "$NH_CLIENT_IP" "$NH_VIP" >"$picks" <<'PY'
import json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
nilb, cfg, pins, client, vip = sys.argv[1:6]
def chain(sport):
    try:
        p = subprocess.run([nilb, "lookup", "--json", "--config", cfg, "--live", "--pin-dir", pins,
                            "%s:%d" % (client, sport), "%s:80" % vip, "tcp"],
                           capture_output=True, text=True, timeout=10)
        return sport, len(json.loads(p.stdout).get("previous_hops") or [])
    except Exception:  # noqa: BLE001 - a failed lookup picks nothing
        return sport, None
with ThreadPoolExecutor(max_workers=4) as ex:
    rows = list(ex.map(chain, range(43000, 43300)))
by = {}
for sport, n in rows:
    if n is not None and len(by.setdefault(str(n), [])) < 8:
        by[str(n)].append(sport)
print(json.dumps(by, sort_keys=True))
PY
  echo "  source ports by chain length (previous owners of their bucket, node1's live table): $(<"$picks")"
  if [[ $(json "$picks" 'sum(1 for v in d.values() if len(v) >= 3) >= 2') != True ]]; then
    ok=0
    nums+="too few ports of two different chain lengths: $(<"$picks"); "
  fi
  before=()
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-chainwalk-0.json"; before+=("$NH_OUT/stats-$n-chainwalk-0.json"); done
  res=$NH_OUT/chainwalk-result.json
  nh_fg client timeout 150 "$NH_PY" "$HERE/flows.py" rst-probe --host "$NH_VIP" --port 80 --count 25 --timeout 1 \
    --sports "$(json "$picks" '",".join(str(p) for ps in d.values() for p in ps)')" --out "$res" >/dev/null || ok=0
  after=()
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-chainwalk-1.json"; after+=("$NH_OUT/stats-$n-chainwalk-1.json"); done
  fwd0=$(rst_sum tc_forward "${before[@]}") fwd1=$(rst_sum tc_forward "${after[@]}")
  rst0=$(rst_sum tc_rst_sent "${before[@]}") rst1=$(rst_sum tc_rst_sent "${after[@]}")
  if [[ -s $res ]]; then
    summary=$("$NH_PY" - "$res" "$picks" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); picks = json.load(open(sys.argv[2]))
med = {}
for k, ports in sorted(picks.items()):
    xs = [x for p in ports for x in r["rtt_us"].get(str(p), [])]
    if xs:
        med[int(k)] = statistics.median(xs)
parts = ["%d previous owner(s): %.0f us (%d probes)" % (k, v, sum(len(r["rtt_us"].get(str(p), [])) for p in picks[str(k)])) for k, v in sorted(med.items())]
ks = sorted(med)
extra = "; extra per hop %.0f us" % ((med[ks[-1]] - med[ks[0]]) / (ks[-1] - ks[0])) if len(ks) > 1 else ""
hops = sum(int(k) * len(r["rtt_us"].get(str(p), [])) for k, ports in picks.items() for p in ports)
print("%d/%d answered by a RST; median round trip with %s%s|%d" % (r["answered"], r["sent"], ", ".join(parts), extra, hops))
PY
)
    want_fwd=${summary##*|}
    summary=${summary%|*}
    sent=$(json "$res" 'd["sent"]')
  else
    summary="rst-probe wrote no result" want_fwd=0 sent=0 ok=0
  fi
  echo "  $summary"
  echo "  counters over the nodes: tc_forward +$((fwd1 - fwd0)) (the probes walked $want_fwd hops), tc_rst_sent +$((rst1 - rst0)) ($sent probes)"
  [[ $(json "$res" 'd["answered"] == d["sent"] and d["sent"] > 0' 2>/dev/null) == True ]] || ok=0
  ((fwd1 - fwd0 >= want_fwd && rst1 - rst0 >= sent)) || ok=0
  nums+="$summary; tc_forward +$((fwd1 - fwd0)) for $want_fwd hops walked"
  leave_base
  if ((ok)); then pass chainwalk "$nums"; else fail chainwalk "$nums"; fi
}
