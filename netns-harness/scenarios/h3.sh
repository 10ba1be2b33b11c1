# shellcheck shell=bash
# scenario-order: 70 health
# (h3) drain: 20 keep-alive connections that landed on node2 (others opened and
# closed again) send one request per second for 31 s; 1 s in, node2 gets
# `state: drained` + SIGHUP to every nilb; once node1's state shows node2
# drained with 0 buckets, 10 new connections/s for 27 s. All 20 must answer
# every round from node2 (no reset, no failure) and no new connection may land
# on node2 or fail; then the drain is undone and node2 gets its quota back.
# Needs: the base state. Leaves: the base state.

scenario_h3() {
  local nums="" ok=1 est t_hup drain_s out rc okc resets fails rounds same
  header "(h3) drain: node2 drained by config + SIGHUP; 20 held connections keep talking for 30 s, no new ones land on node2"
  need_base h3 || return
  hold_bg h3 --count 300 --want-backend node2 --want-count 20 --sport-base 42000 --rounds 31 --interval 1.0 --max-seconds 45
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail h3 "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-h3.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  keep-alive connections on node2 opened before the drain: $est/20 (others tried and closed again: $(json "$HOLD_STATE" 'json.dumps(d["discarded"])'))"
  [[ $est == 20 ]] || ok=0
  touch "$HOLD_GO" # one request per connection per second from now on, 31 rounds
  sleep 1
  cp "$CFG" "$NH_OUT/nilb-before-h3.yaml"
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  BSTATE["node2"]=drained
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  nilb_check || ok=0
  hup_all
  t_hup=$HUP_T
  if wait_reload node1 5; then
    echo "  node1 state after SIGHUP: $WAIT_SUMMARY"
    echo "  node1 log: $(log_since node1 "${HUP_LINES[node1]}" | grep -E 'table installed|reload' | cut -c1-170 | paste -sd '|' | sed 's/|/\n  node1 log: /g')"
  else
    echo "  node1's state shows no reload within 5 s: $WAIT_SUMMARY"
  fi
  if st_wait node1 10 "b['node2']['state'] == 'drained' and b['node2']['buckets'] == 0 and svc['pending_moves'] == 0 and settled(1)"; then
    drain_s=$(nh_calc "$WAIT_AT - $t_hup")
    echo "  drain complete in node1's state file ${drain_s}s after SIGHUP: $WAIT_SUMMARY"
    nums+="drained (node2 0 buckets, $(st get "$(state_of node1)" "b['node2']['second_hop_buckets']") as 2nd hop) ${drain_s}s after SIGHUP; "
  else
    echo "  node1 state does not show node2 drained and empty: $WAIT_SUMMARY"
    nums+="drain not complete: $WAIT_SUMMARY; "
    ok=0
  fi
  # new connections while the held ones keep talking (until about 1.5 s before they stop)
  stream_bg h3 43000 10 27 || ok=0
  hold_finish 60
  stream_wait 20
  out=$("$NH_PY" "$HERE/timeline.py" avoid --result "$STREAM_RES" --node node2)
  rc=$?
  sed '$d' <<<"$out"
  ((rc == 0)) || ok=0
  if hold_read; then
    same=$(json "$HOLD_RES" 'sum(1 for c in d["per_connection"] if c["status"] == "ok" and c["same_backend"] and c["first"] == "node2")')
    nums+="held on node2: ${okc}/20 OK over ${rounds} rounds 1 s apart (all answered by node2: $same), resets ${resets}, failures ${fails}, exit ${HOLD_RC}; "
    [[ $okc == 20 && $same == 20 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 && $rounds -ge 30 ]] || ok=0
  else
    nums+="hold client produced no result (exit $HOLD_RC); "
    ok=0
  fi
  nums+="new connections during the 30 s: ${out##*SUMMARY [A-Z]* }"
  echo "  second-chance counters (nilb stats):"
  second_chance_counters
  # undo the drain
  unset "BSTATE[node2]"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  t_hup=$HUP_T
  if wait_settled 10; then
    nums+="; undone: node2 back to $(st get "$(state_of node1)" "b['node2']['buckets']") buckets $(nh_calc "$WAIT_AT - $t_hup")s after SIGHUP"
  else
    nums+="; undoing the drain did not settle: $WAIT_SUMMARY"
    ok=0
  fi
  leave_base
  if ((ok)); then pass h3 "$nums"; else fail h3 "$nums"; fi
}

