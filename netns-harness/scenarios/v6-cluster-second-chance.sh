# shellcheck shell=bash
# scenario-order: 260
# (v6-cluster-second-chance) 30 held IPv6 connections to web6 ($NH_VIP6:80)
# over the IPv6-only cluster network of v6-cluster-http (need_cluster6)
# through a weight change 1:1:2 -> 3:1:1 with SIGHUP: buckets move, the new
# first hop has no socket for the held flows and forwards them (TC second
# chance, GUE in outer IPv6 with 16-byte hop entries) to the previous owner.
# Checks: 30/30 held connections answered by their first backend every round,
# 0 resets, IPv6 second-chance forwards counted (tc_forward_ipv6) on the
# nodes, and on the wire (tcpdump on every switch port throughout) IPv6 GUE
# only, no IPv4 GUE, no IPv4 packet at all. Then fail-static on the IPv6
# cluster: 30 more held IPv6 connections, node1's nilb killed with -9, 90 new
# IPv6 connections in the gap spread over the backends (the orphaned XDP
# program goes on encapsulating in IPv6), the held ones 30/30 with 0 resets;
# node1's nilb started again (adopting its pins).
# Needs: the base state. Leaves: the base state (IPv4 node addresses back).

scenario_v6-cluster-second-chance() {
  local ok=1 nums="" n okc resets fails rounds fw=0 c
  header "(v6-cluster-second-chance) 30 held IPv6 connections across 1:1:2 -> 3:1:1 over an IPv6-only cluster network"
  need_cluster6 v6-cluster-second-chance || return
  wire_bg v6c-sc || { ok=0; nums+="tcpdump on the switch did not start; "; }
  HOLD_HOST=$NH_VIP6 hold_bg v6c-sc --count 30 --sport-base 27200 --rounds 3 --interval 0.3 --max-seconds 30
  write_config 3 1 1
  hup_all
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "weights() == '3:1:1' and settled(1)" \
    --timeout 20 --service web6 >"$NH_OUT/wait.out" 2>&1 || { ok=0; echo "  web6 did not settle on 3:1:1"; }
  echo "  web6 on node1: $(json "$NH_OUT/wait.out" 'd["summary"]')"
  touch "$HOLD_GO"
  hold_finish 40
  if hold_read; then
    echo "  held: $okc/30 ok after $rounds rounds, resets $resets, failures $fails"
    nums+="held IPv6 connections $okc/30 ok, $resets resets, $fails failures; "
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || { ok=0; live_hops_of_bad "$NH_VIP6"; }
  else
    nums+="the hold client left no result; "
    ok=0
  fi
  # fail-static: node1's daemon killed, the data plane goes on
  HOLD_HOST=$NH_VIP6 hold_bg v6c-gap --count 30 --sport-base 27300 --rounds 3 --interval 0.3 --max-seconds 30
  nh_stop "${NILB_PID[node1]}" KILL 5
  sleep 0.5
  local gapres=$NH_OUT/burst-v6c-gap.json spread
  cl burst --host "$NH_VIP6" --port 80 --count 90 --sport-base 27400 --max-seconds 20 \
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
  wire_stop || ok=0
  nums+="$WIRE_NUMBERS; "
  mv -f "$NH_OUT/nilb-node1.log" "$NH_OUT/nilb-node1.before-v6ckill.log"
  start_nilb_on node1
  wait_ready node1 || { ok=0; nums+="node1's nilb not ready after the restart; "; }
  for n in "${NH_NODES[@]}"; do
    save_stats "$n" "$NH_OUT/stats-$n-v6c-sc.json"
    c=$(counter tc_forward_ipv6 "$NH_OUT/stats-$n-v6c-sc.json")
    fw=$((fw + c))
  done
  nums+="tc_forward_ipv6 over the nodes $fw"
  [[ $fw -gt 0 ]] || ok=0
  [[ $ok == 1 ]] || second_chance_counters
  leave_base
  if [[ $ok == 1 ]]; then pass v6-cluster-second-chance "$nums"; else fail v6-cluster-second-chance "$nums"; fi
}
