# shellcheck shell=bash
# scenario-order: 110
# (spoof) GUE source checks: from the client namespace, gue_send.py sends three
# sets of 20 GUE packets built byte for byte like nilb's (inner TCP SYN
# client:PORT -> VIP:80) to node2's address with a forged outer source: set 1
# from 10.77.0.99 (outside the cluster), set 2 claiming node2's own address,
# set 3 (control) claiming node1, a balancer. node2's counters (`nilb stats
# --json`) are saved before and after each set; tcpdump watches GUE arriving on
# node2 and SYN-ACKs reaching the client. Set 1 must add exactly 20 to
# tc_drop_not_cluster, set 2 exactly 20 to tc_drop_self_unmarked, neither any
# SYN decapsulation (tc_decap_syn or, before GRO, xdp_decap_syn), other drop
# counter or SYN-ACK; set 3 must be decapsulated (+20 tc_decap_syn +
# xdp_decap_syn; node2's XDP takes it when its backend XDP program is
# attached) and answered. Sets 1 and 2 must reach TC (XDP leaves them to it:
# xdp_gue_to_tc). The encapsulated health checks are off for the scenario
# (`encap_check: false`): node1's GUE SYNs to node2 would move the SYN
# counters too.
# Needs: the base state. Leaves: the base state.

# tcpdump_bg ROLE LABEL FILTER: capture on ROLE's eth0 into $NH_OUT/LABEL.pcap;
# waits (bounded) until it listens. Sets TCPDUMP_PID.
tcpdump_bg() {
  local log=$NH_OUT/tcpdump-$2.log
  nh_bg "tcpdump on $1" "$log" "$1" timeout 60 tcpdump -i eth0 -nn -U --immediate-mode -Z root -c 20000 \
    -w "$NH_OUT/$2.pcap" "$3"
  TCPDUMP_PID=$NH_BG_PID
  nh_wait_until 10 grep -q 'listening on' "$log"
}

# gue_set OUTER_SRC SPORT_BASE: SPOOF_COUNT hand-built GUE packets from the client
# namespace to node2 (outer source forged), each with an inner SYN
# client:SPORT -> VIP:80; prints gue_send.py's JSON line
gue_set() {
  nh_fg client timeout 20 "$NH_PY" "$HERE/gue_send.py" --outer-src "$1" --outer-dst "${NH_NODE_IP[node2]}" \
    --inner-src "$NH_CLIENT_IP" --vip "$NH_VIP" --port 80 --sport-base "$2" --count "$SPOOF_COUNT" --interval 0.005
}

# spoof_delta COUNTER K: how much COUNTER moved during set K (SPOOF_STATS: the saved stats)
# (-999999 if a saved file cannot be read: fails every check, keeps the arithmetic valid)
spoof_delta() { "$NH_PY" "$HERE/results.py" delta "${SPOOF_STATS[$(($2 - 1))]}" "${SPOOF_STATS[$2]}" "$1" 2>/dev/null || echo -999999; }

scenario_spoof() {
  local nums="" ok=1 n2=${NH_NODE_IP[node2]} outsider=10.77.0.99 i pc pn sent
  local arrivals synacks c
  SPOOF_COUNT=20
  header "(spoof) GUE to node2 from outside the cluster and claiming node2's own address"
  need_base spoof || return
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  ENCAP_YAML=false
  write_config "${BASE_WEIGHTS[@]}"
  hup_all
  if ! wait_reload node1 10 "reload.get('ok') is True" || ! wait_reload node2 10 "reload.get('ok') is True"; then
    fail spoof "precondition: the config without encapsulated checks was not loaded: $WAIT_SUMMARY"
    leave_base
    return
  fi
  sleep 1 # encapsulated checks in flight when the reload stopped them
  SPOOF_STATS=()
  for i in 0 1 2 3; do SPOOF_STATS+=("$NH_OUT/stats-node2-spoof$i.json"); done
  if ! save_stats node2 "${SPOOF_STATS[0]}"; then
    fail spoof "cannot read node2's counters: $(head -n 2 "${SPOOF_STATS[0]}" | tr '\n' ' ')"
    return
  fi
  # SYN-ACKs from the VIP reaching the client (DSR: a backend that accepted a SYN
  # answers the inner source directly), and GUE arriving at node2
  if ! tcpdump_bg client spoof-client "tcp and src host $NH_VIP and src port 80 and tcp[tcpflags] & (tcp-syn|tcp-ack) == (tcp-syn|tcp-ack)"; then
    nh_stop "$TCPDUMP_PID" TERM 3
    fail spoof "tcpdump on the client did not start"
    return
  fi
  pc=$TCPDUMP_PID
  if ! tcpdump_bg node2 spoof-node2 "udp dst port 19523"; then
    nh_stop "$pc" TERM 3
    nh_stop "$TCPDUMP_PID" TERM 3
    fail spoof "tcpdump on node2 did not start"
    return
  fi
  pn=$TCPDUMP_PID
  echo "  each set: $SPOOF_COUNT GUE packets built like nilb's (gue_send.py) from the client namespace to $n2:19523, inner TCP SYN $NH_CLIENT_IP:PORT -> $NH_VIP:80"
  sent=$(gue_set "$outsider" 48000)
  echo "  set 1, outer source $outsider (outside the cluster), inner ports 48000+: $sent"
  sleep 0.3
  save_stats node2 "${SPOOF_STATS[1]}"
  sent=$(gue_set "$n2" 48100)
  echo "  set 2, outer source $n2 (node2's own address), inner ports 48100+: $sent"
  sleep 0.3
  save_stats node2 "${SPOOF_STATS[2]}"
  sent=$(gue_set "${NH_NODE_IP[node1]}" 48200)
  echo "  set 3 (control), outer source ${NH_NODE_IP[node1]} (node1, a balancer), inner ports 48200+: $sent"
  sleep 0.5
  save_stats node2 "${SPOOF_STATS[3]}"
  sleep 0.2
  nh_stop "$pc" TERM 5
  nh_stop "$pn" TERM 5
  arrivals=$(tcpdump -nn -r "$NH_OUT/spoof-node2.pcap" 2>/dev/null | awk '$2 == "IP" { split($3, a, "."); print a[1] "." a[2] "." a[3] "." a[4] }' | sort | uniq -c | awk '{ printf "%s%s=%s", sep, $2, $1; sep = " " }')
  synacks=$(tcpdump -nn -r "$NH_OUT/spoof-client.pcap" 2>/dev/null | awk '$2 == "IP" { split($5, a, "."); p = a[5] + 0; print (p >= 48200 ? "set3" : p >= 48100 ? "set2" : p >= 48000 ? "set1" : "other") ":" p }' | sort -u | cut -d: -f1 | sort | uniq -c | awk '{ printf "%s%s=%s", sep, $2, $1; sep = " " }')
  echo "  GUE packets seen arriving on node2's eth0 by outer source: ${arrivals:-none}"
  echo "  SYN-ACKs from $NH_VIP:80 on the client's eth0 (distinct flows) by set: ${synacks:-none}"
  printf '  %-32s %8s %8s %8s\n' "node2 counter (delta)" "set 1" "set 2" "set 3"
  for c in tc_drop_not_cluster tc_drop_self_unmarked tc_decap_syn xdp_decap_syn xdp_gue_to_tc tc_drop_malformed tc_pass_other; do
    printf '  %-32s %8s %8s %8s\n' "$c" "$(spoof_delta "$c" 1)" "$(spoof_delta "$c" 2)" "$(spoof_delta "$c" 3)"
  done
  local n1 s1 n2d s2 s3 y1 y2 y3
  # SYNs decapsulated, by TC or (before GRO) by XDP
  syns() { echo $(($(spoof_delta tc_decap_syn "$1") + $(spoof_delta xdp_decap_syn "$1"))); }
  n1=$(spoof_delta tc_drop_not_cluster 1) s1=$(syns 1)
  n2d=$(spoof_delta tc_drop_self_unmarked 2) s2=$(syns 2) s3=$(syns 3)
  y1=$(sed -n 's/.*set1=\([0-9]*\).*/\1/p' <<<"$synacks") y2=$(sed -n 's/.*set2=\([0-9]*\).*/\1/p' <<<"$synacks")
  y3=$(sed -n 's/.*set3=\([0-9]*\).*/\1/p' <<<"$synacks")
  nums+="outside source: sent $SPOOF_COUNT, arrived $(sed -n "s/.*$outsider=\([0-9]*\).*/\1/p" <<<"$arrivals"), tc_drop_not_cluster +$n1, SYNs decapsulated +$s1, SYN-ACKs ${y1:-0}; "
  nums+="own source: sent $SPOOF_COUNT, tc_drop_self_unmarked +$n2d, SYNs decapsulated +$s2, SYN-ACKs ${y2:-0}; "
  nums+="control from node1: SYNs decapsulated +$s3 (tc $(spoof_delta tc_decap_syn 3), xdp $(spoof_delta xdp_decap_syn 3)), drops +$(( $(spoof_delta tc_drop_not_cluster 3) + $(spoof_delta tc_drop_self_unmarked 3) + $(spoof_delta tc_drop_malformed 3) )), SYN-ACKs ${y3:-0}"
  [[ $n1 == "$SPOOF_COUNT" && $s1 == 0 && -z $y1 ]] || ok=0
  [[ $n2d == "$SPOOF_COUNT" && $s2 == 0 && -z $y2 ]] || ok=0
  (( $(spoof_delta tc_drop_malformed 1) == 0 && $(spoof_delta tc_drop_malformed 2) == 0 && $(spoof_delta tc_drop_self_unmarked 1) == 0 && $(spoof_delta tc_drop_not_cluster 2) == 0 )) || { ok=0; nums+="; other drop counters moved"; }
  # the control proves the packets are well-formed GUE that node2 would accept
  # from a cluster member (so the drops above are the source checks)
  [[ $s3 == "$SPOOF_COUNT" && ${y3:-0} -ge 1 ]] || { ok=0; nums+="; control not accepted: the test packets may be malformed"; }
  leave_base # encapsulated checks on again
  if ((ok)); then pass spoof "$nums"; else fail spoof "$nums"; fi
}

