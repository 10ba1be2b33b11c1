# shellcheck shell=bash
# scenario-order: 320
# (offlinecheck) leaving offline needs a fresh verdict: node3 is set
# `offline` + SIGHUP (0 buckets, not checked), its HTTP server is stopped,
# then it is set `active` again + SIGHUP. Its old "up" is stale: it must
# start unknown and, with its check failing, never get a bucket. node1's live
# table is sampled every 50 ms from the pins (tablewatch.py) from before the
# second SIGHUP until 1 s after node1 shows node3 down, and 50 new
# connections/s run through the VIP meanwhile: node3 at most 0 buckets, no
# connection fails.
# Needs: the base state. Leaves: the base state.

scenario_offlinecheck() {
  local nums="" ok=1 most first health_after win stopf=$NH_OUT/stream-offlinecheck.stop
  header "(offlinecheck) node3 offline, its server stopped, then active again by reload: it gets no bucket on a failing check"
  need_base offlinecheck || return
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  BSTATE["node3"]=offline
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  if st_wait node1 8 "b['node3']['state'] == 'offline' and b['node3']['buckets'] == 0 and svc['pending_moves'] == 0"; then
    echo "  node1 state with node3 offline: $WAIT_SUMMARY"
  else
    ok=0 nums+="node3 not offline with 0 buckets: $WAIT_SUMMARY; "
  fi
  if ! stop_backend node3; then
    ok=0 nums+="could not stop node3's backend; "
  fi
  watch_bg offlinecheck node1 || { ok=0; nums+="table watch did not start; "; }
  stream_bg offlinecheck 53000 50 8 "$stopf" || ok=0
  unset "BSTATE[node3]"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  if wait_reload node1 5; then
    health_after=$(st get "$(state_of node1)" "b['node3']['health']")
    echo "  node1 state right after the reload: node3 $(st get "$(state_of node1)" "b['node3']['state']"), health $health_after, $(st get "$(state_of node1)" "b['node3']['buckets']") buckets"
  else
    ok=0 nums+="no reload in node1's state: $WAIT_SUMMARY; "
  fi
  if st_wait node1 8 "b['node3']['health'] == 'down'"; then
    echo "  node1 shows node3 down $(nh_calc "$WAIT_AT - $HUP_T")s after SIGHUP (its first fresh check failed)"
  else
    ok=0 nums+="node3 not down within 8 s: $WAIT_SUMMARY; "
  fi
  sleep 1
  watch_stop
  touch "$stopf"
  stream_wait 30
  most=$(watch_get 'd["buckets"].get("'"${NH_NODE_IP[node3]}"'", [0, 0, 0])[1]')
  first=$(watch_get 'd["first_nonzero"].get("'"${NH_NODE_IP[node3]}"'", "never")')
  win=$(stream_window "$STREAM_RES" 0 1e12)
  nums+="node3's health right after offline -> active: ${health_after:-?}; at most ${most:-?} buckets in $(watch_get 'd["samples"]') table samples (first non-zero: $first); new connections OK $win"
  # unknown, or already down when its first fresh check came before this read:
  # never the stale "up"
  [[ ( $health_after == unknown || $health_after == down ) && $most == 0 ]] || ok=0
  window_ok "$win" || ok=0
  leave_base
  if ((ok)); then pass offlinecheck "$nums"; else fail offlinecheck "$nums"; fi
}
