# shellcheck shell=bash
# scenario-order: 250
# (v6-cluster-http) IPv6 VIP over an IPv6-only cluster network: every nilb
# runs with its IPv6 --node-address, cluster.balancers and every DIP are IPv6,
# and the nodes' eth0 has no IPv4 address at all (need_cluster6 in harness.sh,
# nh_cluster6_on in lib.sh). The client reaches web6 ($NH_VIP6:80, weights
# 1:1:2) through node1, which carries the packets in GUE over outer IPv6/UDP to
# the backends. Checks:
#   1. 300 new IPv6 connections from distinct source ports spread by weight
#      (chi-square as in a); node1 saw every backend up through its health
#      checks to the IPv6 DIPs (need_cluster6);
#   2. DSR: a capture on the client during 90 more requests sees the replies
#      from $NH_VIP6 come from node2's and node3's MACs;
#   3. the wire (tcpdump on every switch port during 1 and 2): IPv6 GUE (UDP
#      19523) between node addresses only, no IPv4 GUE, no IPv4 packet at all
#      but client <-> IPv4 VIP, node1's health checks over IPv6;
#   4. the counters: node1 encapsulated (xdp_encap_tx), no malformed or
#      no-route drops; node2 and node3 decapsulated SYNs in XDP
#      (xdp_decap_syn), no malformed GUE and no GUE refused as from outside
#      the cluster (tc_drop_not_cluster).
# Needs: the base state. Leaves: the base state (IPv4 node addresses back,
# every nilb restarted with its IPv4 --node-address).

scenario_v6-cluster-http() {
  local ok=1 nums="" n
  header "(v6-cluster-http) IPv6 VIP $NH_VIP6:80 over an IPv6-only cluster network, weights $(base_ratio)"
  need_cluster6 v6-cluster-http || return
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-v6c-http-before.json"; done
  wire_bg v6c-http || { ok=0; nums+="tcpdump on the switch did not start; "; }

  # 1. distribution
  if BURST_HOST=$NH_VIP6 burst_dist v6c-http 26000; then
    nums+="300 IPv6 connections: $DIST_NUMBERS; "
  else
    nums+="distribution: $DIST_NUMBERS; "
    ok=0
  fi
  v6c_live_lookup v6c-http "$NH_VIP6"
  # 2. DSR replies straight from the backends
  if BURST_HOST=$NH_VIP6 dsr_capture v6c-http 26400 90; then
    nums+="VIP6-sourced frames by MAC: $DSR_NUMBERS; "
  else
    nums+="expected VIP6-sourced frames from node2 and node3 MACs: $DSR_NUMBERS; "
    ok=0
  fi
  # 3. the wire
  wire_stop || ok=0
  nums+="$WIRE_NUMBERS; "
  # 4. counters
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-v6c-http.json"; done
  v6c_counters v6c-http-before v6c-http
  [[ $ok == 1 ]] || second_chance_counters
  leave_base
  if [[ $ok == 1 ]]; then pass v6-cluster-http "$nums"; else fail v6-cluster-http "$nums"; fi
}
