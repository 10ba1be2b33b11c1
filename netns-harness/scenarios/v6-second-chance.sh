# shellcheck shell=bash
# scenario-order: 240
# (v6-second-chance) 30 held IPv6 connections to the IPv6 VIP (service web6,
# as in v6-http) through a weight change 1:1:2 -> 3:1:1 with SIGHUP: buckets
# move, the new first hop has no socket for the held flows and forwards them
# (TC second chance, inner IPv6) to the previous owner. Checks: 30/30 held
# connections answered by their first backend every round, 0 resets, and IPv6
# second-chance forwards counted (tc_forward_ipv6) on the nodes. Then
# fail-static for IPv6: 30 more held IPv6 connections, node1's nilb killed
# with -9, 90 new IPv6 connections in the gap spread over the backends (not
# all on node1: the IPv6 program stays reachable from the orphaned XDP
# program), the held ones 30/30 with 0 resets; node1's nilb started again.
# Needs: the base state. Leaves: the base state (web6 removed).

scenario_v6-second-chance() {
  local ok=1 nums="" n okc resets fails rounds fw=0 c
  header "(v6-second-chance) 30 held IPv6 connections across a weight change 1:1:2 -> 3:1:1"
  need_base v6-second-chance || return
  WEB6=1
  write_config "${BASE_WEIGHTS[@]}"
  hup_all
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "weights() == '$(weights_ratio)' and settled(1)" \
    --timeout 20 --service web6 >"$NH_OUT/wait.out" 2>&1 || { ok=0; echo "  web6 did not settle"; }
  for n in node2 node3; do wait_reload "$n" 5 >/dev/null || { ok=0; echo "  $n did not reload"; }; done
  HOLD_HOST=$NH_VIP6 hold_bg v6-sc --count 30 --sport-base 24000 --rounds 3 --interval 0.3 --max-seconds 30
  write_config 3 1 1
  hup_all
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "weights() == '3:1:1' and settled(1)" \
    --timeout 20 --service web6 >"$NH_OUT/wait.out" 2>&1 || { ok=0; echo "  web6 did not settle on 3:1:1: $(json "$NH_OUT/wait.out" 'd["summary"]')"; }
  echo "  web6 on node1: $(json "$NH_OUT/wait.out" 'd["summary"]')"
  touch "$HOLD_GO"
  hold_finish 40
  if hold_read; then
    echo "  held: $okc/30 ok after $rounds rounds, resets $resets, failures $fails"
    nums+="held IPv6 connections $okc/30 ok, $resets resets, $fails failures; "
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    nums+="the hold client left no result; "
    ok=0
  fi
  # fail-static: node1's daemon killed, the data plane goes on for IPv6 too
  HOLD_HOST=$NH_VIP6 hold_bg v6-gap --count 30 --sport-base 24100 --rounds 3 --interval 0.3 --max-seconds 30
  nh_stop "${NILB_PID[node1]}" KILL 5
  sleep 0.5
  local gapres=$NH_OUT/burst-v6-gap.json spread
  cl burst --host "$NH_VIP6" --port 80 --count 90 --sport-base 24200 --max-seconds 20 \
    --max-consecutive-failures 10 --out "$gapres"
  spread=$(json "$gapres" 'd["by_backend"]')
  echo "  90 new IPv6 connections while node1's nilb is down: $OUT"
  touch "$HOLD_GO"
  hold_finish 40
  if hold_read; then
    nums+="nilb on node1 killed: held IPv6 $okc/30 ok, $resets resets; new IPv6 in the gap by backend $spread; "
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    nums+="the gap's hold client left no result; "
    ok=0
  fi
  [[ $(json "$gapres" 'd["ok"]') == 90 && $(json "$gapres" 'd["by_backend"].get("node2", 0) + d["by_backend"].get("node3", 0)') -gt 0 ]] || ok=0
  mv -f "$NH_OUT/nilb-node1.log" "$NH_OUT/nilb-node1.before-v6kill.log"
  start_nilb_on node1
  wait_ready node1 || { ok=0; nums+="node1's nilb not ready after the restart; "; }
  for n in "${NH_NODES[@]}"; do
    save_stats "$n" "$NH_OUT/stats-$n-v6sc.json"
    c=$(counter tc_forward_ipv6 "$NH_OUT/stats-$n-v6sc.json")
    fw=$((fw + c))
  done
  nums+="tc_forward_ipv6 over the nodes $fw"
  [[ $fw -gt 0 ]] || ok=0
  WEB6=""
  leave_base
  if [[ $ok == 1 ]]; then pass v6-second-chance "$nums"; else fail v6-second-chance "$nums"; fi
}
