# shellcheck shell=bash
# scenario-order: 140
# (neigh) stale neighbour entries, with health checks off (see below):
# node1's (the balancer's) neighbour entry
# for node3 is set to a wrong MAC address in state STALE (`ip neigh replace
# ... nud stale`), while node3 sends no ARP (permanent entries for node1,
# node2 and the client in node3's namespace: any ARP request from node3 would
# correct node1's entry as a side effect). The XDP fast path takes the hop's MAC from that entry.
# A stream of 20 new connections/s runs from 1 s before until 11 s after;
# new connections to node3's buckets must work again within 5 s
# (NH_NEIGH_WINDOW): none may fail after that, and node3 must answer again.
# Also prints node1's entry for node3 at the end and nilb's log line about the
# changed MAC. Before nilb refreshed its hops' entries, every connection to
# node3's buckets failed for as long as the wrong entry lived.
# With health checks on, node1's checks of node3 (the kernel's own traffic)
# make the kernel re-validate the entry itself within about 9 s and take node3
# out meanwhile: that would hide the fault, so the scenario runs without them.
# Needs: the base state. Leaves: the base state (node3's entries dynamic
# again, health checks back).

scenario_neigh() {
  local win=${NH_NEIGH_WINDOW:-5} nums ok=1 ns1 ns3 mac3 wrong=02:00:00:00:0b:ad t0 out rc entry n
  local -A silent=() # address -> MAC: node3's permanent entries for the scenario
  header "(neigh) node1's neighbour entry for node3 set STALE with a wrong MAC, node3 silent: new connections to node3 recover within ${win}s"
  need_base neigh || return
  # No health checks for the scenario: node1's checks of node3 are the
  # kernel's own traffic through the same entry, which makes the kernel
  # re-validate it (DELAY, PROBE: about 9 s) and takes node3 out meanwhile,
  # hiding what the XDP fast path does with an entry nobody confirms.
  local hc_saved=$NH_HEALTH_CHECK
  NH_HEALTH_CHECK=none
  write_config "${BASE_WEIGHTS[@]}"
  NH_HEALTH_CHECK=$hc_saved
  hup_all
  if ! wait_reload node1 10 "reload.get('ok') is True"; then
    fail neigh "precondition: node1 did not load the config without health checks: $WAIT_SUMMARY"
    leave_base
    return
  fi
  echo "  health checks off for the scenario (health_check: {none: {}})"
  ns1=$(nh_ns node1) ns3=$(nh_ns node3)
  mac3=$(nh_mac node3)
  # node3 sends no ARP at all: an ARP request from node3 (for node1, or for
  # the client its DSR replies go to) would correct node1's entry as a side
  # effect, so node3 gets permanent entries for everyone it talks to
  silent[$NH_CLIENT_IP]=$(nh_mac client)
  for n in node1 node2; do silent[${NH_NODE_IP[$n]}]=$(nh_mac "$n"); done
  for n in "${!silent[@]}"; do
    ip -n "$ns3" neigh replace "$n" lladdr "${silent[$n]}" dev eth0 nud permanent
  done
  if ! stream_bg neigh 44000 20 12; then
    nh_stop "$STREAM_PID" TERM 3
    fail neigh "stream client did not start: $(tr '\n' ' ' <"$NH_OUT/stream-neigh.log")"
    for n in "${!silent[@]}"; do ip -n "$ns3" neigh del "$n" dev eth0 2>/dev/null; done
    return
  fi
  sleep 1
  # node1's entry for node3, every 0.2 s, into neigh-node1.log (what corrected it, and when)
  (for _ in $(seq 60); do
    echo "$(nh_now) $(ip -n "$ns1" neigh show "${NH_NODE_IP[node3]}" dev eth0)"
    sleep 0.2
  done) >"$NH_OUT/neigh-node1.log" 2>&1 &
  local poller=$!
  t0=$(nh_now)
  ip -n "$ns1" neigh replace "${NH_NODE_IP[node3]}" lladdr "$wrong" dev eth0 nud stale
  echo "  node1's entry for node3 set to $wrong (node3's MAC is $mac3): $(ip -n "$ns1" neigh show "${NH_NODE_IP[node3]}" dev eth0)"
  stream_wait 40
  wait "$poller" 2>/dev/null
  echo "  node1's entry for node3 over time (s after t0: state MAC; changes only):"
  awk -v t0="$t0" '{ k = $4 " " $5 " " $6; if (k != last) { printf "    %+.2f %s\n", $1 - t0, k; last = k } }' "$NH_OUT/neigh-node1.log" | head -n 12
  out=$("$NH_PY" "$HERE/timeline.py" recover --result "$STREAM_RES" --node node3 --t0 "$t0" --window "$win" \
    --log "$NH_OUT/nilb-node1.log" --log-match "MAC address changed.*hop=${NH_NODE_IP[node3]}" \
    --log "$NH_OUT/nilb-node1.log" --log-match "backend health changed.*dip=${NH_NODE_IP[node3]}")
  rc=$?
  sed '$d' <<<"$out"
  nums=${out##*SUMMARY }
  nums=${nums#* }
  ((rc == 0)) || ok=0
  local fixed_at
  fixed_at=$(awk -v t0="$t0" -v mac="$mac3" '$1 >= t0 && index($0, mac) { printf "%+.2fs", $1 - t0; exit }' "$NH_OUT/neigh-node1.log")
  nums+="; node1's entry had node3's MAC again at ${fixed_at:-never (within the poll)}"
  entry=$(ip -n "$ns1" neigh show "${NH_NODE_IP[node3]}" dev eth0)
  echo "  node1's entry for node3 now: $entry"
  if [[ $entry == *"$mac3"* ]]; then
    nums+=" (nilb logged the change at $(log_rel "$out" 'MAC address changed'))"
  else
    nums+="; node1's entry is not node3's MAC: $entry"
    ok=0
  fi
  for n in "${!silent[@]}"; do ip -n "$ns3" neigh del "$n" dev eth0 2>/dev/null; done
  leave_base
  if ((ok)); then pass neigh "$nums"; else fail neigh "$nums"; fi
}
