# shellcheck shell=bash
# scenario-order: 270
# (v6-cluster-v4vip) the IPv4 VIP over the IPv6-only cluster network of
# v6-cluster-http (need_cluster6): the service web ($NH_VIP:80, DIPs IPv6)
# whose IPv4 packets node1 carries in GUE over outer IPv6 (inner IPv4, GUE
# protocol 4); the client's route to the VIP has an IPv6 next hop (node1) and
# the backends reply to it through an IPv4 route with an IPv6 next hop (the
# client), since no node has an IPv4 address. Checks:
#   1. 300 new IPv4 connections spread by weight (chi-square as in a);
#   2. DSR: the replies from $NH_VIP come from node2's and node3's MACs;
#   3. 30 held IPv4 connections through a weight change 1:1:2 -> 3:1:1 with
#      SIGHUP: 30/30 answered by their first backend, 0 resets, second-chance
#      forwards counted (tc_forward);
#   4. the wire during all of it: IPv6 GUE only, no IPv4 GUE, no IPv4 packet
#      but client <-> $NH_VIP; node1's health checks over IPv6;
#   5. the counters as in v6-cluster-http.
# Needs: the base state. Leaves: the base state (IPv4 node addresses back).

scenario_v6-cluster-v4vip() {
  local ok=1 nums="" n okc resets fails rounds fw=0 c
  header "(v6-cluster-v4vip) IPv4 VIP $NH_VIP:80 over an IPv6-only cluster network, weights $(base_ratio)"
  need_cluster6 v6-cluster-v4vip || return
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-v6c-v4-before.json"; done
  wire_bg v6c-v4 || { ok=0; nums+="tcpdump on the switch did not start; "; }
  # 1. distribution
  if burst_dist v6c-v4 26600; then
    nums+="300 IPv4 connections: $DIST_NUMBERS; "
  else
    nums+="distribution: $DIST_NUMBERS; "
    ok=0
  fi
  v6c_live_lookup v6c-v4 "$NH_VIP"
  # 2. DSR
  if dsr_capture v6c-v4 27000 90; then
    nums+="VIP-sourced frames by MAC: $DSR_NUMBERS; "
  else
    nums+="expected VIP-sourced frames from node2 and node3 MACs: $DSR_NUMBERS; "
    ok=0
  fi
  # 3. held connections through a weight change
  hold_bg v6c-v4 --count 30 --sport-base 27600 --rounds 3 --interval 0.3 --max-seconds 30
  write_config 3 1 1
  hup_all
  wait_settled 20 || ok=0
  touch "$HOLD_GO"
  hold_finish 40
  if hold_read; then
    echo "  held: $okc/30 ok after $rounds rounds, resets $resets, failures $fails"
    nums+="held IPv4 connections $okc/30 ok, $resets resets, $fails failures; "
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || { ok=0; live_hops_of_bad; }
  else
    nums+="the hold client left no result; "
    ok=0
  fi
  # 4. the wire
  wire_stop || ok=0
  nums+="$WIRE_NUMBERS; "
  # 5. counters
  for n in "${NH_NODES[@]}"; do
    save_stats "$n" "$NH_OUT/stats-$n-v6c-v4.json"
    c=$(v6c_delta "$n" tc_forward v6c-v4-before v6c-v4)
    fw=$((fw + c))
  done
  v6c_counters v6c-v4-before v6c-v4
  nums+=", tc_forward over the nodes +$fw"
  [[ $fw -gt 0 ]] || ok=0
  [[ $ok == 1 ]] || second_chance_counters
  leave_base
  if [[ $ok == 1 ]]; then pass v6-cluster-v4vip "$nums"; else fail v6-cluster-v4vip "$nums"; fi
}
