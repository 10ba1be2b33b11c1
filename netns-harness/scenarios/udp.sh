# shellcheck shell=bash
# scenario-order: 150
# (udp) UDP services follow the table: a DNS-style UDP server (one unconnected
# socket on VIP:53, flows.py udp-serve) on every node and a service `dns`
# (UDP 53, weights as web, TCP check on the server's health port). Four phases
# of 300 queries from 300 source ports each: all active; node2 drained; node3's
# server dead (its check fails, node3 down); node3 back and node2 active again.
# In every phase every query must be answered (0 lost) by the first hop of its
# bucket in node1's live table (`nilb lookup --live`): so the drained node2
# answers 0, the dead node3 loses 0, the returning node3 gets its share. Also
# one connected-UDP flow (the server connects a socket to the client, as QUIC
# servers do) on node2 must still be answered by node2's connected socket after
# the drain moved its bucket. Prints per phase the answers by node, the table's
# shares (`nilb status`), and the round-trip times of queries whose bucket has a
# second hop (the detour first -> second -> first) against those without.
# Needs: the base state. Leaves: the base state (service dns removed, servers
# stopped).

UDP_PORT=53
UDP_HEALTH_PORT=5301
declare -A UDP_PID=()

# udp_services_yaml: the dns service, its backends as web's (weights, BSTATE)
udp_services_yaml() {
  local n s
  s="  - name: dns"$'\n'"    vip: $NH_VIP"$'\n'"    port: $UDP_PORT"$'\n'"    protocol: udp"
  s+=$'\n'"    health_check: {tcp: {check_port: $UDP_HEALTH_PORT}}"$'\n'"    backends:"
  for n in "${NH_NODES[@]}"; do
    s+=$'\n'"      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: ${WEIGHT[$n]}${BSTATE[$n]:+, state: ${BSTATE[$n]}}}"
  done
  printf '%s' "$s"
}
udp_write_config() {
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  EXTRA_SERVICES=$(udp_services_yaml)
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
}
# udp_start NODE: flows.py udp-serve on NODE (bounded wait for its listening line)
udp_start() {
  local log=$NH_OUT/udp-$1-$SECONDS.log
  nh_bg "udp server $1" "$log" "$1" "$NH_PY" "$HERE/flows.py" udp-serve --name "$1" --vip "$NH_VIP" \
    --port "$UDP_PORT" --health-port "$UDP_HEALTH_PORT"
  UDP_PID[$1]=$NH_BG_PID
  nh_wait_until 10 grep -q 'listening on' "$log"
}
udp_stop() { [[ -n ${UDP_PID[$1]:-} ]] && nh_stop "${UDP_PID[$1]}" TERM 3; unset "UDP_PID[$1]"; }
# udp_wait TIMEOUT EXPR: node1's state of service dns (state.py --service dns)
udp_wait() {
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "$2" --timeout "$1" --service dns >"$NH_OUT/wait.out" 2>&1
  local rc=$?
  WAIT_SUMMARY=$(json "$NH_OUT/wait.out" 'd["summary"]')
  return "$rc"
}
# udp_phase LABEL SPORT_BASE: 300 queries, compared with node1's live table;
# sets PH_BY (answers by node, JSON), PH_LOST, PH_FIRST (answered by the first
# hop), PH_OTHER, PH_LINE (a summary)
udp_phase() {
  local res=$NH_OUT/udp-$1.json out look shares
  out=$(nh_fg client timeout 30 "$NH_PY" "$HERE/flows.py" udp-burst --host "$NH_VIP" --port "$UDP_PORT" \
    --count 300 --sport-base "$2" --timeout 1.5 --out "$res")
  look=$(nh_local "$NH_PY" "$HERE/flows.py" lookup --nilb "$NILB" --config "$CFG" --pin-dir "${PIN_DIR[node1]}" \
    --result "$res" --proto udp --client-ip "$NH_CLIENT_IP" --vip "$NH_VIP" --port "$UDP_PORT" \
    --nodes "$(for n in "${NH_NODES[@]}"; do printf '%s=%s,' "${NH_NODE_IP[$n]}" "$n"; done)")
  shares=$(st get "$(state_of node1)" "json.dumps(buckets())" --service dns)
  PH_BY=$(json - 'json.dumps(d["by_backend"], sort_keys=True)' <<<"$out")
  PH_LOST=$(json - 'd["lost"]' <<<"$out")
  PH_FIRST=$(json - 'd["first_hop"]' <<<"$look")
  PH_OTHER=$(json - 'd["other"]' <<<"$look")
  PH_LINE="$1: answers ${PH_BY:-?}, lost ${PH_LOST:-?}, by the bucket's first hop ${PH_FIRST:-?}/300 (other ${PH_OTHER:-?}), table buckets $shares"
  echo "  $PH_LINE"
  echo "    rtt $(json - 'json.dumps(d["rtt_ms"])' <<<"$out") ms; with a second hop: $(json - 'json.dumps([d["with_second_hop"], d["rtt_ms_second_hop"]])' <<<"$look"), without: $(json - 'd["rtt_ms_no_second_hop"]' <<<"$look") (queries, median ms)"
  [[ $(json - 'len(d["examples"])' <<<"$look") == 0 ]] || echo "    e.g. $(json - '"; ".join(d["examples"])' <<<"$look")"
}
udp_count() { json - "d.get('$2', 0)" <<<"$1"; }

scenario_udp() {
  local nums="" ok=1 n sport conn_sport="" ans t0
  header "(udp) UDP services follow the table: drain, dead backend, return (300 queries each) and a connected-UDP flow across a move"
  need_base udp || return
  for n in "${NH_NODES[@]}"; do
    udp_start "$n" || { ok=0; nums+="udp server on $n did not start; "; }
  done
  udp_write_config
  nilb_check || ok=0
  hup_all
  t0=$HUP_T
  if udp_wait 15 "b['node3']['health'] == 'up' and b['node1']['health'] == 'up' and b['node2']['health'] == 'up' and settled(1)"; then
    echo "  service dns installed and settled $(nh_calc "$(nh_now) - $t0")s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  service dns did not settle: $WAIT_SUMMARY"
    ok=0
  fi
  for n in node2 node3; do wait_reload "$n" 5 >/dev/null || { ok=0; echo "  $n did not reload"; }; done

  udp_phase active 44000
  [[ $PH_LOST == 0 && $PH_FIRST == 300 ]] || ok=0
  nums+="active: lost $PH_LOST, first hop $PH_FIRST/300 $PH_BY; "

  # a connected flow on node2: the first source port node2 answers
  for sport in $(seq 46000 46040); do
    ans=$(nh_fg client "$NH_PY" "$HERE/flows.py" udp-query --host "$NH_VIP" --port "$UDP_PORT" --sport "$sport" \
      --payload connect | json - 'd["answer"]')
    if [[ $ans == "node2 connected" ]]; then conn_sport=$sport; break; fi
  done
  echo "  connected flow: client port ${conn_sport:-none found} -> node2 (answer: $ans)"
  [[ -n $conn_sport ]] || ok=0

  # drain node2
  BSTATE["node2"]=drained
  udp_write_config
  hup_all
  t0=$HUP_T
  if udp_wait 15 "b['node2']['state'] == 'drained' and b['node2']['buckets'] == 0 and settled(1)"; then
    echo "  node2 drained $(nh_calc "$(nh_now) - $t0")s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  node2 not drained: $WAIT_SUMMARY"
    ok=0
  fi
  udp_phase drain 44400
  [[ $PH_LOST == 0 && $PH_FIRST == 300 && $(udp_count "$PH_BY" node2) == 0 ]] || ok=0
  nums+="drain: node2 answered $(udp_count "$PH_BY" node2), lost $PH_LOST, first hop $PH_FIRST/300; "
  if [[ -n $conn_sport ]]; then
    ans=$(nh_fg client "$NH_PY" "$HERE/flows.py" udp-query --host "$NH_VIP" --port "$UDP_PORT" --sport "$conn_sport" \
      --payload ping | json - 'd["answer"]')
    echo "  connected flow after the drain (its bucket moved, node2 second hop): answer '$ans'"
    [[ $ans == "node2 connected" ]] || ok=0
    nums+="connected flow after the move: '${ans:-none}'; "
  fi

  # node3's server dies: its check fails, node3 down
  udp_stop node3
  t0=$(nh_now)
  if udp_wait 15 "b['node3']['health'] == 'down' and b['node3']['buckets'] == 0 and svc['pending_moves'] == 0"; then
    echo "  node3 down $(nh_calc "$(nh_now) - $t0")s after its server stopped: $WAIT_SUMMARY"
  else
    echo "  node3 not down: $WAIT_SUMMARY"
    ok=0
  fi
  udp_phase dead 44800
  [[ $PH_LOST == 0 && $PH_FIRST == 300 && $(udp_count "$PH_BY" node3) == 0 ]] || ok=0
  nums+="dead node3: lost $PH_LOST, node3 answered $(udp_count "$PH_BY" node3), first hop $PH_FIRST/300; "

  # node3 returns, node2 active again
  udp_start node3 || ok=0
  unset "BSTATE[node2]"
  udp_write_config
  hup_all
  t0=$HUP_T
  if udp_wait 20 "b['node3']['health'] == 'up' and b['node2']['state'] == 'active' and settled(1)"; then
    echo "  node3 back and node2 active, settled $(nh_calc "$(nh_now) - $t0")s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  not settled after the return: $WAIT_SUMMARY"
    ok=0
  fi
  udp_phase return 45200
  [[ $PH_LOST == 0 && $PH_FIRST == 300 && $(udp_count "$PH_BY" node3) -gt 0 ]] || ok=0
  nums+="return: node3 answered $(udp_count "$PH_BY" node3) of 300 (table $(st get "$(state_of node1)" "b['node3']['buckets']" --service dns)/1024 buckets), lost $PH_LOST, first hop $PH_FIRST/300"
  echo "  counters (nilb stats):"
  for n in "${NH_NODES[@]}"; do
    echo "    $n: $(counters_matching "$n" 'tc_decap_udp|tc_forward|unknown_flow')"
  done

  for n in "${NH_NODES[@]}"; do udp_stop "$n"; done
  leave_base
  if ((ok)); then pass udp "$nums"; else fail udp "$nums"; fi
}
