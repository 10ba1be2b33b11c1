# shellcheck shell=bash
# scenario-order: 330
# (drainedfallback) a healthy drained backend is preferred over failing open:
# node1 is set `drained` + SIGHUP (0 buckets), then the HTTP servers of node2
# and node3 (active) are stopped. Once node1 shows both down, the service
# must be in mode drained-fallback with all 1024 buckets on node1 (not fail
# open onto the two dead backends), the log must say why, and 50 new
# connections/s for 3 s must all succeed (node1 answers them).
# Needs: the base state. Leaves: the base state.

scenario_drainedfallback() {
  local nums="" ok=1 win n1 dead mode
  header "(drainedfallback) node1 drained but healthy, node2 and node3 active and failing: node1 serves, no fail-open onto dead backends"
  need_base drainedfallback || return
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  BSTATE["node1"]=drained
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  if st_wait node1 10 "b['node1']['state'] == 'drained' and b['node1']['buckets'] == 0 and svc['pending_moves'] == 0"; then
    echo "  node1 state with node1 drained: $WAIT_SUMMARY"
  else
    ok=0 nums+="node1 not drained to 0 buckets: $WAIT_SUMMARY; "
  fi
  local lines
  lines=$(wc -l <"$NH_OUT/nilb-node1.log")
  stop_backend node2 || ok=0
  stop_backend node3 || ok=0
  if st_wait node1 10 "b['node2']['health'] == 'down' and b['node3']['health'] == 'down' and svc['pending_moves'] == 0"; then
    echo "  node1 state with node2 and node3 failing: $WAIT_SUMMARY"
  else
    ok=0 nums+="node2/node3 not both down: $WAIT_SUMMARY; "
  fi
  mode=$(st get "$(state_of node1)" "svc.get('mode')")
  n1=$(st get "$(state_of node1)" "b['node1']['buckets']")
  dead=$(st get "$(state_of node1)" "b['node2']['buckets'] + b['node3']['buckets']")
  echo "  node1 log: $(log_since node1 "$lines" | grep -m 1 -E 'drained backends serve|FAIL-OPEN' | sed 's/^.*Z *//' | cut -c1-220)"
  echo "  nilb status on node1:"
  status_table node1
  stream_bg drainedfallback 54000 50 3 || ok=0
  stream_wait 30
  win=$(stream_window "$STREAM_RES" 0 1e12)
  nums+="mode ${mode:-?}, buckets on node1 (drained, up) ${n1:-?}, on the dead node2+node3 ${dead:-?} of 1024; fail-open $(st get "$(state_of node1)" "svc['fail_open']"); new connections OK $win"
  [[ $mode == drained-fallback && $n1 == 1024 && $dead == 0 ]] || ok=0
  log_has node1 "$lines" 'drained backends serve' || { ok=0; nums+="; the log does not say so"; }
  window_ok "$win" || ok=0
  leave_base
  if ((ok)); then pass drainedfallback "$nums"; else fail drainedfallback "$nums"; fi
}
