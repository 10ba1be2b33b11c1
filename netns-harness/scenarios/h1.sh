# shellcheck shell=bash
# scenario-order: 50 health
# (h1) health down: a stream of 50 new connections/s from 1 s before until 5 s
# after SIGTERM to node3's backend.py (t0 = its listener closed); no request
# started after t0 + fall_count x interval + timeout (+ NH_HEALTH_MARGIN) may
# reach node3 or fail, none may fail before; node1's state then shows node3
# down with 0 buckets, settled, no fail-open. The times node1 logged the health
# change and the table install are printed (from its log: the tools keep no
# history).
# Needs: the base state. Leaves: the base state (node3's server started again,
# node3 back at its quota).

scenario_h1() {
  local win base nums ok=1 t_sig t_close out rc
  base=$(nh_calc "($HC_FALL * $HC_INTERVAL_MS + $HC_TIMEOUT_MS) / 1000")
  win=$(nh_calc "$base + $HEALTH_MARGIN")
  header "(h1) health: stop the HTTP server on node3; gone from new connections within ${base}s (+${HEALTH_MARGIN}s margin)"
  echo "  checker: $NH_HEALTH_CHECK; fall_count $HC_FALL x interval ${HC_INTERVAL_MS}ms + timeout ${HC_TIMEOUT_MS}ms = ${base}s"
  need_base h1 || return
  if ! stream_bg h1 40000 50 6; then
    nh_stop "$STREAM_PID" TERM 3
    fail h1 "stream client did not start: $(tr '\n' ' ' <"$NH_OUT/stream-h1.log")"
    return
  fi
  sleep 1
  t_sig=$(nh_now)
  if ! stop_backend node3; then
    fail h1 "could not stop node3's backend (no 'stopped at=' in its log)"
    stream_wait 20
    return
  fi
  t_close=$BACKEND_T
  echo "  SIGTERM to node3's backend at t_sig; listening socket closed $(nh_calc "$t_close - $t_sig")s later (t0)"
  stream_wait 20
  out=$("$NH_PY" "$HERE/timeline.py" down --result "$STREAM_RES" --node node3 --t0 "$t_close" --window "$win" --t-signal "$t_sig" \
    --log "$NH_OUT/nilb-node1.log" --log-match "backend health changed.*dip=${NH_NODE_IP[node3]} .*health=down" \
    --log "$NH_OUT/nilb-node1.log" --log-match 'table installed.*reason="?health')
  rc=$?
  sed '$d' <<<"$out"
  nums=${out##*SUMMARY }
  nums="${nums#* } (t0 = listener closed, $(nh_calc "$t_close - $t_sig")s after SIGTERM)"
  ((rc == 0)) || ok=0
  nums+="; node1 logged health=down at $(log_rel "$out" 'health=down'), its table install at $(log_rel "$out" 'table installed')"
  if st_wait node1 5 "b['node3']['health'] == 'down' and b['node3']['buckets'] == 0 and settled(1) and not svc['fail_open']"; then
    echo "  node1 state: $WAIT_SUMMARY"
    nums+="; node1 state: node3 health=down buckets=0 2nd_hop=$(st get "$(state_of node1)" "b['node3']['second_hop_buckets']")"
  else
    echo "  node1 state does not show node3 down with 0 buckets: $WAIT_SUMMARY"
    nums+="; node1 state: node3 not down/empty ($WAIT_SUMMARY)"
    ok=0
  fi
  echo "  nilb status on node1:"
  status_table node1
  leave_base # node3's server started again, node3 back at its quota
  if ((ok)); then pass h1 "$nums"; else fail h1 "$nums"; fi
}

