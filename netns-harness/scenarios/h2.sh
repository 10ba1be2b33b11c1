# shellcheck shell=bash
# scenario-order: 60 health
# (h2) health up: node3's server is stopped and node1 waited to show it down
# with 0 buckets (and min_bucket_age_ms to pass), then started again under a
# 50/s stream: node3 must answer a new connection within rise_count x interval
# + timeout + rebalance.min_interval (+ margin) of its listener opening, no
# request may fail, node1's table must reach pending=0 within that +
# min_bucket_age_ms (time from node1's log), node3 must end with exactly its
# quota of buckets, and a 300-burst must fit the weights.
# Needs: the base state. Leaves: the base state.

scenario_h2() {
  local bound settle_bound nums ok=1 t_listen out rc q3 b3 wait_age
  bound=$(nh_calc "($HC_RISE * $HC_INTERVAL_MS + $HC_TIMEOUT_MS + $RB_MIN_INTERVAL_MS) / 1000 + $HEALTH_MARGIN")
  settle_bound=$(nh_calc "$bound + $RB_MIN_BUCKET_AGE_MS / 1000")
  header "(h2) health: node3's server stopped, then started again; back after rise_count checks, share back to its weight"
  echo "  rise_count $HC_RISE x interval ${HC_INTERVAL_MS}ms + timeout ${HC_TIMEOUT_MS}ms + rebalance.min_interval ${RB_MIN_INTERVAL_MS}ms + ${HEALTH_MARGIN}s margin = ${bound}s"
  need_base h2 || return
  echo "  (setup) stopping node3's server; waiting until node1's state shows node3 down with 0 buckets"
  if ! stop_backend node3; then
    fail h2 "precondition: could not stop node3's backend (no 'stopped at=' in its log)"
    return
  fi
  if ! st_wait node1 10 "b['node3']['health'] == 'down' and b['node3']['buckets'] == 0"; then
    fail h2 "precondition: node1 does not show node3 down: $WAIT_SUMMARY"
    ensure_base restore >/dev/null
    return
  fi
  # buckets that moved when node3 failed may move back only min_bucket_age_ms
  # later (they had moved when the state showed node3 empty, WAIT_AT, at the latest)
  wait_age=$(nh_calc "$WAIT_AT + $RB_MIN_BUCKET_AGE_MS / 1000 + 0.5 - $(nh_now)")
  if [[ $wait_age != -* ]]; then sleep "$wait_age"; fi
  echo "  node1 state before: $WAIT_SUMMARY"
  if ! stream_bg h2 41000 50 6; then
    nh_stop "$STREAM_PID" TERM 3
    fail h2 "stream client did not start: $(tr '\n' ' ' <"$NH_OUT/stream-h2.log")"
    return
  fi
  sleep 0.5
  if ! start_backend node3 restart; then
    stream_wait 20
    fail h2 "node3's backend did not start again"
    return
  fi
  t_listen=$BACKEND_T
  stream_wait 20
  out=$("$NH_PY" "$HERE/timeline.py" up --result "$STREAM_RES" --node node3 --t0 "$t_listen" --window "$bound" \
    --log "$NH_OUT/nilb-node1.log" --log-match "backend health changed.*dip=${NH_NODE_IP[node3]} .*health=up" \
    --log "$NH_OUT/nilb-node1.log" --log-match 'table installed.*pending=0')
  rc=$?
  sed '$d' <<<"$out"
  nums=${out##*SUMMARY }
  nums=${nums#* }
  ((rc == 0)) || ok=0
  # when did node1's table reach node3's quota (pending=0)? from its log, relative to t0
  local settled_rel
  settled_rel=$(log_rel "$out" 'table installed.*pending=0')
  settled_rel=${settled_rel%s}
  nums+="; node1 logged health=up at $(log_rel "$out" 'health=up')"
  if st_wait node1 5 "b['node3']['health'] == 'up' and settled(1)"; then
    q3=$(st get "$(state_of node1)" "quotas()['node3']")
    b3=$(st get "$(state_of node1)" "b['node3']['buckets']")
    echo "  node1 state: $WAIT_SUMMARY"
    nums+="; node3 buckets $b3/$q3 (quota for weight ${WEIGHT[node3]}), pending 0 at ${settled_rel:-?}s (bound ${settle_bound}s)"
    if [[ $settled_rel == "?" ]] || awk -v s="$settled_rel" -v b="$settle_bound" 'BEGIN { exit !(s > b) }'; then
      ok=0
      nums+=" [share not back within the bound]"
    fi
  else
    echo "  node1 state did not settle with node3 up: $WAIT_SUMMARY"
    nums+="; node1 state not settled: $WAIT_SUMMARY"
    ok=0
  fi
  echo "  fresh burst (node3 back at its weight):"
  if burst_dist h2 47000; then :; else ok=0; fi
  nums+="; split: $DIST_NUMBERS"
  leave_base
  if ((ok)); then pass h2 "$nums"; else fail h2 "$nums"; fi
}

