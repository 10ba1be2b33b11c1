# shellcheck shell=bash
# scenario-order: 290
# (downrestart) a restart remembers who is down: node3's HTTP server is
# stopped until node1 shows node3 down with 0 buckets; then, three times,
# node1's nilb is SIGKILLed and started again on the same pins. From before
# the kill until 1 s after node3's first check by the new daemon, node1's
# live table is sampled every 50 ms from the pins (tablewatch.py) and 20 new
# connections/s run through the VIP. node3 must own 0 buckets in every
# sample (its verdict comes back from the pinned control_state map; an
# unknown backend gains nothing anyway), the table must not move, and no new
# connection may fail (node3 has no server: one that reached it would be
# refused).
# Needs: the base state. Leaves: the base state (node3's server started
# again, node1's nilb running without --keep-dataplane).

scenario_downrestart() {
  local nums="" ok=1 i rc pid newpid t_kill t_ready t_check most first moved win cmp
  local tb=$NH_OUT/tables-downrestart-before.json ta stopf
  header "(downrestart) node3 down; node1's nilb killed (-9) and restarted 3 times: node3 gets no bucket before (or after) its first check"
  if [[ -z ${PIN_DIR[node1]:-} ]]; then
    fail downrestart "no pins on a harness bpffs (mount_pins did not run)"
    return
  fi
  need_base downrestart || return
  if ! stop_backend node3; then
    fail downrestart "could not stop node3's backend"
    leave_base
    return
  fi
  if st_wait node1 10 "b['node3']['health'] == 'down' and b['node3']['buckets'] == 0 and svc['pending_moves'] == 0"; then
    echo "  node1 state with node3's server stopped: $WAIT_SUMMARY"
  else
    ok=0 nums+="node3 not down with 0 buckets before the restarts: $WAIT_SUMMARY; "
  fi
  dump_tables node1 "$tb" >/dev/null 2>&1
  for i in 1 2 3; do
    pid=${NILB_PID[node1]}
    stopf=$NH_OUT/stream-downrestart-$i.stop
    stream_bg "downrestart-$i" $((51000 + 400 * i)) 20 30 "$stopf" || ok=0
    if ! watch_bg "downrestart-$i" node1; then
      ok=0 nums+="restart $i: table watch did not start; "
    fi
    sleep 0.3
    t_kill=$(nh_now)
    nh_stop "$pid" KILL 5
    rc=$NH_LAST_RC
    [[ $rc == 137 ]] || { ok=0; nums+="restart $i: exit $rc (not 137); "; }
    sleep 1
    RETIRED_LOGS=$((RETIRED_LOGS + 1))
    retire_log node1 "before-downrestart$i"
    start_nilb_on node1
    newpid=${NILB_PID[node1]}
    if ! wait_ready node1; then
      touch "$stopf"
      stream_wait 30
      watch_stop
      fail downrestart "${nums}restart $i: nilb not ready again"
      leave_base
      return
    fi
    t_ready=$(nh_now)
    # node3's first check by the new daemon: its state then carries the
    # check's error (a restored verdict has none)
    if st_wait node1 5 "d.get('pid') == $newpid and bool(b['node3'].get('last_error'))"; then
      t_check=$WAIT_AT
    else
      t_check=""
      ok=0 nums+="restart $i: no check of node3 within 5 s ($WAIT_SUMMARY); "
    fi
    sleep 1
    watch_stop
    touch "$stopf"
    stream_wait 30
    most=$(watch_get 'd["buckets"].get("'"${NH_NODE_IP[node3]}"'", [0, 0, 0])[1]')
    first=$(watch_get 'd["first_nonzero"].get("'"${NH_NODE_IP[node3]}"'", "never")')
    ta=$NH_OUT/tables-downrestart-$i.json
    dump_tables node1 "$ta" >/dev/null 2>&1
    cmp=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$tb" "$ta")
    moved=$(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$cmp")
    win=$(stream_window "$STREAM_RES" 0 1e12)
    echo "  restart $i: killed (exit $rc), ready $(nh_calc "$t_ready - $t_kill")s after the kill, node3's first check $([[ -n $t_check ]] && nh_calc "$t_check - $t_ready")s after ready; table samples $(watch_get 'd["samples"]'): node3 at most ${most:-?} buckets (first non-zero: $first); buckets moved ${moved:-?}; new connections OK $win"
    nums+="restart $i: node3 max ${most:-?} buckets in $(watch_get 'd["samples"]') samples (first check $([[ -n $t_check ]] && nh_calc "$t_check - $t_ready")s after ready), moved ${moved:-?}, new connections $win; "
    [[ $most == 0 && $moved == 0 ]] || ok=0
    window_ok "$win" || ok=0
  done
  echo "  nilb status on node1:"
  status_table node1
  leave_base
  if ((ok)); then pass downrestart "$nums"; else fail downrestart "$nums"; fi
}
