# shellcheck shell=bash
# scenario-order: 340
# (panic) the panic threshold and the paced exit from fail-open. Pacing for
# this scenario: one step per second, 5 % of the buckets per step.
# 1. `panic_threshold_percent: 50`; node2's and node3's HTTP servers are
#    stopped: node1 alone holds 1/4 of the weight (< 50 %), so the service
#    panics and keeps every active backend by weight (node1 256, node2 256,
#    node3 512 of 1024) instead of node1 taking all 1024.
# 2. node1's server is stopped too (fail-open), the threshold set to 0, then
#    node1's server is started again. node1's live table is sampled every
#    50 ms (tablewatch.py): leaving fail-open, node1 must at most double its
#    buckets per step (256 -> 512 -> 1024, steps >= 1 s apart) rather than
#    take all 1024 at once.
# Needs: the base state. Leaves: the base state.

scenario_panic() {
  local nums="" ok=1 mode shares first series steps t_up
  local interval_before=$RB_MIN_INTERVAL_MS
  header "(panic) panic_threshold_percent 50: node2 and node3 fail, the service panics; then fail-open is left in paced steps"
  need_base panic || return
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  RB_MIN_INTERVAL_MS=1000 RB_MAX_STEP_PERCENT=5
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  cfg_edit 's/^    protocol: tcp$/    protocol: tcp\n    panic_threshold_percent: 50/'
  nilb_check || ok=0
  hup_all
  wait_reload node1 5 "reload.get('ok') is True" || { ok=0; nums+="reload not applied: $WAIT_SUMMARY; "; }
  stop_backend node2 || ok=0
  stop_backend node3 || ok=0
  if st_wait node1 10 "b['node2']['health'] == 'down' and b['node3']['health'] == 'down' and svc.get('mode') == 'panic'"; then
    echo "  node1 state: $WAIT_SUMMARY"
  else
    ok=0 nums+="no panic with node2 and node3 down: $WAIT_SUMMARY; "
  fi
  mode=$(st get "$(state_of node1)" "svc.get('mode')")
  shares=$(st get "$(state_of node1)" "'%d/%d/%d' % (b['node1']['buckets'], b['node2']['buckets'], b['node3']['buckets'])")
  echo "  nilb status on node1:"
  status_table node1
  nums+="1 of 3 healthy (25 % of the weight, threshold 50 %): mode ${mode:-?}, buckets node1/node2/node3 ${shares:-?} (without a threshold node1 would hold 1024); "
  [[ $mode == panic && $shares == 256/256/512 ]] || ok=0

  # 2. fail-open, then node1 recovers
  stop_backend node1 || ok=0
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  if st_wait node1 10 "reload.get('ok') is True and b['node1']['health'] == 'down' and svc['fail_open']"; then
    echo "  node1 state, every server stopped: $WAIT_SUMMARY"
  else
    ok=0 nums+="no fail-open with every server stopped: $WAIT_SUMMARY; "
  fi
  watch_bg panic node1 || { ok=0; nums+="table watch did not start; "; }
  start_backend node1 panic || ok=0
  t_up=$BACKEND_T
  if st_wait node1 15 "b['node1']['health'] == 'up' and not svc.get('exiting') and b['node1']['buckets'] == 1024"; then
    echo "  node1 back up and alone in the table $(nh_calc "$WAIT_AT - $t_up")s after its server listened"
  else
    ok=0 nums+="node1 did not take the table back: $WAIT_SUMMARY; "
  fi
  sleep 0.5
  watch_stop
  # node1's bucket counts over time, from the last fail-open value on
  series=$(watch_get '" -> ".join("%s@%.1fs" % (s.get("'"${NH_NODE_IP[node1]}"'", 0), t) for t, s in d["series"])')
  steps=$(watch_get '(lambda v: sum(1 for a, b in zip(v, v[1:]) if b != a))([s.get("'"${NH_NODE_IP[node1]}"'", 0) for t, s in d["series"]])')
  first=$(watch_get '(lambda v: max(b / a for a, b in zip(v, v[1:]) if a > 0) if len(v) > 1 else 0)([s.get("'"${NH_NODE_IP[node1]}"'", 0) for t, s in d["series"]])')
  echo "  node1's buckets in node1's live table: $series"
  nums+="leaving fail-open, node1's buckets: $series ($steps steps, largest growth x${first:-?} per step; before this change all 1024 at once)"
  [[ ${steps:-0} -ge 2 ]] || ok=0
  awk "BEGIN { exit !(${first:-9} <= 2.0) }" || ok=0
  RB_MIN_INTERVAL_MS=$interval_before
  leave_base
  if ((ok)); then pass panic "$nums"; else fail panic "$nums"; fi
}
