# shellcheck shell=bash
# scenario-order: 40
# (d) second chance: 30 keep-alive connections held; the config is rewritten
# with weights 3:1:1 and every nilb gets SIGHUP (node1 first); once node1's
# state shows the new weights in place, each connection sends 3 more requests:
# all must answer from their original backend with no reset; a fresh 300-burst
# must fit 3:1:1. `nilb lookup --json` on the old and new config shows how
# many held flows' buckets moved.
# Needs: the base state. Leaves: the base state (weights 1:1:2 restored).

scenario_d() {
  header "(d) second chance: 30 long-lived connections across a weight change and SIGHUP"
  local state=$NH_OUT/hold-state.json go=$NH_OUT/hold.go res=$NH_OUT/hold-result.json
  local hpid n nums="" okc resets fails est part1=1 part2=1 ok=1 rc
  need_base d || return
  rm -f "$go" "$state" "$res"
  nh_bg "hold client" "$NH_OUT/hold.log" client timeout 150 "$NH_PY" "$HERE/client.py" hold \
    --host "$NH_VIP" --port 80 --count 30 --sport-base 24000 --state "$state" --go "$go" \
    --go-timeout 90 --rounds 3 --interval 0.3 --max-seconds 20 --out "$res"
  hpid=$NH_BG_PID
  if ! nh_wait_until 30 test -e "$state"; then
    nh_stop "$hpid" TERM 3
    fail d "hold client did not establish its connections: $(tr '\n' ' ' <"$NH_OUT/hold.log")"
    return
  fi
  est=$(json "$state" 'd["established"]')
  echo "  held connections established: $est/30, by backend: $(json "$state" 'json.dumps(d["by_backend"])')"
  [[ $est == 30 ]] || part1=0

  local old_w
  old_w=$(weights_ratio)
  cp "$CFG" "$NH_OUT/nilb-before-d.yaml"
  write_config 3 1 1
  echo "  new config: weights $old_w -> $(weights_ratio)"
  if ! nilb_check; then
    nh_stop "$hpid" TERM 3
    fail d "nilb check rejected the new config"
    ensure_base restore >/dev/null
    return
  fi
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$NH_OUT/nilb-before-d.yaml" --result "$state" --show 0 |
    sed 's/^LOOKUP/  info: nilb lookup (old config) vs backend of each held connection:/'
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$state" --show 0 |
    sed 's/^LOOKUP/  info: nilb lookup (new config) vs backend of each held connection (differ = bucket moved, needs second chance):/'

  hup_all # node1 (the balancer) first
  daemons_alive || part1=0
  if wait_reload node1 5; then
    echo "  node1 state after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  (node1's state shows no reload within 5 s; continuing)"
  fi
  sleep 1
  # with rebalance pacing the new table may come in steps, and not before
  # min_bucket_age_ms after the daemon started: use the held connections once
  # node1's state shows the new weights in place (bounded)
  # (a stand-in nilb whose state has no services, e.g. selftest/fake-nilb: not waiting)
  if [[ $(st get "$(state_of node1)" "len(d['services'])" 2>/dev/null) == 0 ]]; then
    echo "  (node1's nilb reports no services in its state; not waiting for the table)"
  elif st_wait node1 10 "$(settled_expr)"; then
    echo "  node1 state: $WAIT_SUMMARY"
  else
    echo "  node1's table did not reach the new weights within 10 s: $WAIT_SUMMARY"
    nums+="table not at the new weights within 10 s; "
    part1=0
  fi
  for n in "${NH_NODES[@]}"; do
    if [[ -n ${NILB_PID[$n]:-} ]] && ! nh_alive "${NILB_PID[$n]}"; then
      echo "  nilb on $n is not running after SIGHUP:"
      log_tail "$NH_OUT/nilb-$n.log" 5
      nums+="nilb on $n died after SIGHUP; "
      part1=0
    fi
  done
  touch "$go"
  if ! nh_wait_until 60 nh_not_alive "$hpid"; then
    echo "  hold client still running after 60 s; stopping it"
  fi
  nh_stop "$hpid" TERM 3
  rc=$NH_LAST_RC
  if [[ ! -s $res ]]; then
    fail d "hold client produced no result (exit $rc): $(tail -n 3 "$NH_OUT/hold.log" | tr '\n' ' ')"
    ensure_base restore >/dev/null
    return
  fi
  echo "  hold client: $(head -n 1 "$NH_OUT/hold.log")"
  okc=$(json "$res" 'd["ok"]')
  resets=$(json "$res" 'd["resets"]')
  fails=$(json "$res" 'd["failures"]')
  "$NH_PY" "$HERE/results.py" hold-bad "$res"
  nums+="connections OK ${okc}/30 (3 rounds each), resets ${resets}, failures ${fails}, exit ${rc}"
  [[ $okc == 30 && $resets == 0 && $fails == 0 && $rc == 0 ]] || part1=0

  echo "  second-chance counters (nilb stats --json, non-zero):"
  second_chance_counters

  echo "  fresh burst with the new weights:"
  if burst_dist d 25000; then :; else part2=0; fi
  nums+="; new split: $DIST_NUMBERS"
  leave_base
  if ((part1 && part2 && ok)); then pass d "$nums"; else fail d "$nums"; fi
}
