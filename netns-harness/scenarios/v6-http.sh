# shellcheck shell=bash
# scenario-order: 230
# (v6-http) IPv6 VIP over the IPv4 cluster network: the service `web6`
# ($NH_VIP6:80, the same backends and weights as web) is added; the client
# reaches it over IPv6 through node1, which carries the IPv6 packets in GUE
# (protocol 41) to the backends. Checks:
#   1. 300 new IPv6 connections from distinct source ports spread by weight
#      (chi-square as in a);
#   2. DSR: a capture on the client during 90 more requests sees the replies
#      from $NH_VIP6 come from node2's and node3's MACs (straight from the
#      backends), as (b) for IPv4;
#   3. the counters: node1 encapsulated the IPv6 traffic (xdp_encap_tx, no
#      malformed drops); node2 and node3 decapsulated it (the SYNs in XDP
#      before GRO, xdp_decap_syn; the rest in XDP or TC, tc_decap_ipv6),
#      no malformed drops (only IPv6 flows during the scenario).
# Needs: the base state. Leaves: the base state (web6 removed).

scenario_v6-http() {
  local ok=1 nums="" n d6 m
  header "(v6-http) IPv6 VIP $NH_VIP6:80 over the IPv4 cluster network, weights $(base_ratio)"
  need_base v6-http || return
  WEB6=1
  write_config "${BASE_WEIGHTS[@]}"
  nilb_check || ok=0
  hup_all
  if nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "weights() == '$(weights_ratio)' and settled(1)" \
    --timeout 20 --service web6 >"$NH_OUT/wait.out" 2>&1; then
    echo "  web6 installed and settled: $(json "$NH_OUT/wait.out" 'd["summary"]')"
  else
    echo "  web6 did not settle: $(json "$NH_OUT/wait.out" 'd["summary"]')"
    ok=0
  fi
  for n in node2 node3; do wait_reload "$n" 5 >/dev/null || { ok=0; echo "  $n did not reload"; }; done
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-v6-before.json"; done

  # 1. distribution
  if BURST_HOST=$NH_VIP6 burst_dist v6-http 23000; then
    nums+="300 IPv6 connections: $DIST_NUMBERS; "
  else
    nums+="distribution: $DIST_NUMBERS; "
    ok=0
  fi
  # 2. DSR replies straight from the backends
  if BURST_HOST=$NH_VIP6 dsr_capture v6-http 23400 90; then
    nums+="VIP6-sourced frames by MAC: $DSR_NUMBERS; "
  else
    nums+="expected VIP6-sourced frames from node2 and node3 MACs: $DSR_NUMBERS; "
    ok=0
  fi
  # 3. counters
  save_stats node1 "$NH_OUT/stats-node1-v6.json"
  d6=$(($(counter xdp_encap_tx "$NH_OUT/stats-node1-v6.json") - $(counter xdp_encap_tx "$NH_OUT/stats-node1-v6-before.json")))
  m=$(counter xdp_drop_malformed "$NH_OUT/stats-node1-v6.json")
  nums+="node1 xdp_encap_tx +$d6, xdp_drop_malformed $m"
  [[ $d6 -gt 0 && $m == 0 ]] || ok=0
  local syn tc6 bad
  for n in node2 node3; do
    save_stats "$n" "$NH_OUT/stats-$n-v6.json"
    v6_delta() { echo $(($(counter "$1" "$NH_OUT/stats-$n-v6.json") - $(counter "$1" "$NH_OUT/stats-$n-v6-before.json"))); }
    syn=$(v6_delta xdp_decap_syn) tc6=$(v6_delta tc_decap_ipv6) bad=$(v6_delta tc_drop_malformed)
    nums+=", $n xdp_decap_syn +$syn tc_decap_ipv6 +$tc6 tc_drop_malformed +$bad"
    [[ $syn -gt 0 && $bad == 0 ]] || ok=0
  done
  WEB6=""
  leave_base
  if [[ $ok == 1 ]]; then pass v6-http "$nums"; else fail v6-http "$nums"; fi
}
