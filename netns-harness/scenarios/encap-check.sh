# shellcheck shell=bash
# scenario-order: 130
# (encap-check) the encapsulated health check: node3's TC program and its
# backend XDP program are removed (`tc filter del dev eth0 ingress` and
# `ip link set dev eth0 xdp off` in node3's namespace: GUE to node3 is no
# longer decapsulated, while its HTTP server still answers node1's regular
# check; with only TC gone, XDP would still take SYNs and established
# segments out of GUE). node1's encapsulated check (a GUE-encapsulated SYN to the VIP, sent
# to node3) must take node3 out within fall_count x interval + timeout
# (+ NH_HEALTH_MARGIN), with its regular health still up; then 60 new
# connections through the VIP must all succeed (none may time out on node3's
# old buckets). Restore: node3's nilb is restarted (which attaches its TC
# and XDP programs again); node3 must come back (encapsulated check up, its quota of
# buckets). Before the check existed, node3 stayed in and about half of the
# new connections (its share at weights 1:1:2) timed out.
# Needs: the base state. Leaves: the base state (node3's nilb restarted).

scenario_encap-check() {
  local bound nums ok=1 ns3 t0 t1 failed down_at back_at pre burst
  bound=$(nh_calc "($HC_FALL * $HC_INTERVAL_MS + $HC_TIMEOUT_MS) / 1000 + $HEALTH_MARGIN")
  header "(encap-check) node3's TC and XDP programs removed: out by its encapsulated check within ${bound}s; 60 new connections; back: node3 back"
  echo "  fall_count $HC_FALL x interval ${HC_INTERVAL_MS}ms + timeout ${HC_TIMEOUT_MS}ms + ${HEALTH_MARGIN}s margin = ${bound}s"
  need_base encap-check || return
  pre="b['node2'].get('encap_health') == 'up' and b['node3'].get('encap_health') == 'up' and b['node1'].get('encap_health') == 'local up'"
  if st_wait node1 5 "$pre"; then
    echo "  node1 state before: encapsulated checks node1=local up node2=up node3=up"
  else
    echo "  node1 state before: encapsulated checks not all up ($WAIT_SUMMARY)"
    nums="encapsulated checks not all up before: $WAIT_SUMMARY; "
    ok=0
  fi
  ns3=$(nh_ns node3)
  echo "  node3's ingress filters before: $(tc -n "$ns3" filter show dev eth0 ingress 2>/dev/null | grep -c .) line(s)"
  t0=$(nh_now)
  if ! tc -n "$ns3" filter del dev eth0 ingress || ! ip -n "$ns3" link set dev eth0 xdp off; then
    fail encap-check "could not remove node3's TC filter and XDP program"
    return
  fi
  if st_wait node1 10 "b['node3'].get('encap_health') == 'down' and b['node3']['buckets'] == 0"; then
    down_at=$(nh_calc "$WAIT_AT - $t0")
    nums+="node3 out ${down_at}s after its TC filter and XDP program were removed (bound ${bound}s)"
    if awk "BEGIN { exit !($down_at > $bound) }"; then ok=0; fi
    echo "  node1 state: $WAIT_SUMMARY"
  else
    nums+="node3 not taken out within 10s ($WAIT_SUMMARY)"
    ok=0
  fi
  nums+="; node3 regular health $(st get "$(state_of node1)" "b['node3']['health']"), encap error: $(st get "$(state_of node1)" "(b['node3'].get('encap_error') or '')[:90]")"
  burst=$NH_OUT/burst-encap-check.json
  cl burst --host "$NH_VIP" --port 80 --count 60 --sport-base 43000 --timeout 2 --max-seconds 60 --out "$burst"
  echo "  60 new connections after: $OUT"
  failed=$(json "$burst" 'd["failed"]')
  nums+="; new connections after: $(json "$burst" 'd["ok"]')/60 ok, ${failed:-?} failed $(json "$burst" 'd["errors"]')"
  [[ $failed == 0 ]] || ok=0
  echo "  nilb status on node1:"
  status_table node1
  # restore: a restarted nilb attaches its TC and XDP programs again
  t1=$(nh_now)
  nh_stop "${NILB_PID[node3]}" TERM 15
  if ensure_base restore && st_wait node1 15 "b['node3'].get('encap_health') == 'up' and b['node3']['health'] == 'up' and settled(1)"; then
    back_at=$(nh_calc "$WAIT_AT - $t1")
    nums+="; node3's nilb restarted: back (encap up, its quota) ${back_at}s later"
  else
    nums+="; node3 not back after its nilb restarted: $WAIT_SUMMARY"
    ok=0
  fi
  leave_base
  if ((ok)); then pass encap-check "$nums"; else fail encap-check "$nums"; fi
}
