# shellcheck shell=bash
# scenario-order: 170
# (timewait) A TIME_WAIT socket does not steal a live connection. node3 is set
# offline and active again first (so that it is second hop of no bucket and a
# later return swaps back exactly the buckets it gave away). Eight client
# source ports whose buckets' first hop is node3 (node1's live table, `nilb
# lookup --live`): from four of them one request with "Connection: close"
# (node3's server closes first, so node3 keeps a TIME_WAIT socket for each
# 4-tuple for 60 s); the other four are controls. node3 is drained (its buckets
# move to node1/node2, node3 second hop); the client opens a keep-alive
# connection from each of the eight ports (the four reuse their port: these
# land on node1/node2); after min_bucket_age_ms node3 is made active again (its
# buckets swap back, the live connections' backends now second hop); then
# every connection sends one
# more request (2 s timeout). Pass: 4/4 with TIME_WAIT and 4/4 controls answer
# from their backend (a TIME_WAIT socket counted as local used to take the
# packets: 0/4). Prints the TIME_WAIT sockets node3 held and each port's hops.
# Needs: the base state. Leaves: the base state.

scenario_timewait() {
  local nums="" ok=1 sport first tw=() ctl=() out res t0 n_tw hops i lines okc_tw=0 okc_ctl=0 moved=0
  header "(timewait) TIME_WAIT on the first hop does not take the packets of a live connection on the second hop"
  need_base timewait || return
  # Earlier changes may have left node3 second hop of other buckets, which a
  # return could then swap back instead of these: offline clears that.
  BSTATE["node3"]=offline
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  st_wait node1 10 "b['node3']['buckets'] == 0 and b['node3']['second_hop_buckets'] == 0" || ok=0
  unset "BSTATE[node3]"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  if wait_settled 20 && [[ $(st get "$(state_of node1)" "b['node3']['second_hop_buckets']") == 0 ]]; then
    echo "  node3 second hop of no bucket (offline, then active again): $WAIT_SUMMARY"
  else
    ok=0
    nums+="node3 still second hop after offline/active: $WAIT_SUMMARY; "
  fi
  for sport in $(seq 47000 47200); do
    first=$("$NILB" lookup --json --config "$CFG" --live --pin-dir "${PIN_DIR[node1]}" \
      "$NH_CLIENT_IP:$sport" "$NH_VIP:80" tcp 2>/dev/null | json - 'd["first_hop_hostname"] or d["first_hop"]')
    [[ $first == node3 || $first == "${NH_NODE_IP[node3]}" ]] || continue
    if ((${#tw[@]} < 4)); then tw+=("$sport"); else ctl+=("$sport"); fi
    ((${#ctl[@]} == 4)) && break
  done
  echo "  ports on node3: TIME_WAIT ${tw[*]}; controls ${ctl[*]}"
  if ((${#tw[@]} != 4 || ${#ctl[@]} != 4)); then
    fail timewait "precondition: found ${#tw[@]}+${#ctl[@]} of 4+4 source ports whose first hop is node3"
    leave_base
    return
  fi
  out=$(nh_fg client timeout 30 "$NH_PY" "$HERE/flows.py" tcp-close --host "$NH_VIP" --port 80 \
    --sports "$(IFS=,; echo "${tw[*]}")")
  echo "  Connection: close requests: $out"
  sleep 0.2
  n_tw=$(ip netns exec "$(nh_ns node3)" ss -Htan state time-wait "( sport = :80 )" 2>/dev/null |
    grep -cE "$NH_CLIENT_IP:($(IFS='|'; echo "${tw[*]}"))\b")
  echo "  node3 holds $n_tw TIME_WAIT sockets for those ports"
  [[ $n_tw == 4 ]] || { ok=0; nums+="node3 holds $n_tw/4 TIME_WAIT sockets; "; }

  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  BSTATE["node3"]=drained
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  t0=$HUP_T
  if st_wait node1 15 "b['node3']['buckets'] == 0 and settled(1)"; then
    echo "  node3 drained $(nh_calc "$WAIT_AT - $t0")s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  node3 not drained: $WAIT_SUMMARY"
    ok=0
  fi
  res=$NH_OUT/hold-timewait-result.json
  rm -f "$NH_OUT/hold-timewait.go"
  nh_bg "hold client (timewait)" "$NH_OUT/hold-timewait.log" client timeout 90 "$NH_PY" "$HERE/flows.py" tcp-hold \
    --host "$NH_VIP" --port 80 --sports "$(IFS=,; echo "${tw[*]},${ctl[*]}")" --timeout 2 \
    --state "$NH_OUT/hold-timewait-state.json" --go "$NH_OUT/hold-timewait.go" --go-timeout 60 --out "$res"
  local hpid=$NH_BG_PID
  nh_wait_until 20 test -e "$NH_OUT/hold-timewait-state.json" || ok=0
  echo "  held connections: $(json "$NH_OUT/hold-timewait-state.json" 'json.dumps(d["first"], sort_keys=True)')"
  [[ $(json "$NH_OUT/hold-timewait-state.json" 'd["established"]') == 8 ]] || ok=0

  # the buckets may move again (back to node3, by swaps) only min_bucket_age_ms
  # after the drain moved them
  sleep "$(nh_calc "$RB_MIN_BUCKET_AGE_MS / 1000 + 0.5")"
  unset "BSTATE[node3]"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  t0=$HUP_T
  if wait_settled 20; then
    echo "  node3 active again, settled $(nh_calc "$WAIT_AT - $t0")s after SIGHUP"
  else
    ok=0
  fi
  # (bounded: a later paced step may still be due)
  for i in $(seq 1 25); do
    moved=0 lines=""
    for sport in "${tw[@]}" "${ctl[@]}"; do
      hops=$("$NILB" lookup --json --config "$CFG" --live --pin-dir "${PIN_DIR[node1]}" "$NH_CLIENT_IP:$sport" \
        "$NH_VIP:80" tcp 2>/dev/null | json - '"%s/%s" % (d["first_hop_hostname"], d["second_hop_hostname"])')
      first=$(json "$NH_OUT/hold-timewait-state.json" "d['first']['$sport']")
      lines+="    port $sport: connection on $first; bucket now first/second hop $hops"$'\n'
      [[ $hops == "node3/$first" ]] && moved=$((moved + 1))
    done
    ((moved == 8)) && break
    sleep 0.2
  done
  printf '%s' "$lines"
  echo "  buckets back on node3 with the connection's backend as second hop: $moved/8"
  [[ $moved == 8 ]] || ok=0
  touch "$NH_OUT/hold-timewait.go"
  nh_wait_until 20 nh_not_alive "$hpid"
  nh_stop "$hpid" TERM 3
  if [[ -s $res ]]; then
    for i in "${!tw[@]}"; do
      [[ $(json "$res" "[c['kind'] for c in d['per_connection'] if c['sport'] == ${tw[$i]}][0]") == ok ]] && okc_tw=$((okc_tw + 1))
      [[ $(json "$res" "[c['kind'] for c in d['per_connection'] if c['sport'] == ${ctl[$i]}][0]") == ok ]] && okc_ctl=$((okc_ctl + 1))
    done
    echo "  after the move back: $(json "$res" 'json.dumps([[c["sport"], c["first"], c["then"], c["kind"], c["ms"]] for c in d["per_connection"]])')"
  else
    ok=0
  fi
  nums+="with a TIME_WAIT socket on the first hop: $okc_tw/4 connections answered; controls: $okc_ctl/4; TIME_WAIT sockets $n_tw/4; buckets moved back $moved/8"
  [[ $okc_tw == 4 && $okc_ctl == 4 ]] || ok=0
  echo "  counters (nilb stats, node3): $(counters_matching node3 'tc_forward|time_wait|established')"
  leave_base
  if ((ok)); then pass timewait "$nums"; else fail timewait "$nums"; fi
}
