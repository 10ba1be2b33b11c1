# shellcheck shell=bash
# scenario-order: 300
# (removerestart) a restart remembers backends being removed: 10 keep-alive
# connections that landed on node3 send a request every 0.3 s throughout.
# node3 is deleted from the file (with min_bucket_age_ms 15000, so it stays
# second hop of its buckets for 15 s after it owns none) + SIGHUP to every
# nilb; once node1 shows node3 `removing` with no bucket as first hop (at
# most 17 s: buckets that moved recently wait for their minimum age), node1's
# nilb is SIGKILLed and started again on the same pins. The new daemon must still know node3 as
# removing (from the pinned control_state map), keep it as second hop and in
# the cluster set, and all 10 held connections must keep answering from
# node3 for 5 s after the restart: 0 time-outs, 0 resets.
# Needs: the base state. Leaves: the base state (node3 back in the file;
# min_bucket_age_ms as before).

scenario_removerestart() {
  local nums="" ok=1 est pid okc resets fails rounds second_before second_after adm t_kill
  local age_before=$RB_MIN_BUCKET_AGE_MS
  header "(removerestart) node3 removed from the file with 10 held connections; node1's nilb killed (-9) and restarted: no held connection times out"
  if [[ -z ${PIN_DIR[node1]:-} ]]; then
    fail removerestart "no pins on a harness bpffs (mount_pins did not run)"
    return
  fi
  need_base removerestart || return
  hold_bg removerestart --count 200 --want-backend node3 --want-count 10 --sport-base 52000 --rounds 1000 \
    --interval 0.3 --max-seconds 60 --until "$NH_OUT/hold-removerestart.until"
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail removerestart "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-removerestart.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  keep-alive connections on node3: $est/10; each sends a request every 0.3 s from now on"
  [[ $est == 10 ]] || ok=0
  touch "$HOLD_GO"
  sleep 1
  # node3 leaves the file; 15 s of minimum bucket age keep it second hop
  RB_MIN_BUCKET_AGE_MS=15000
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  cfg_edit "/dip: ${NH_NODE_IP[node3]},/d"
  nilb_check || ok=0
  hup_all
  # (a backend gone from the file has no hostname after a restart: by address)
  local n3="next(x for x in svc['backends'] if x['dip'] == '${NH_NODE_IP[node3]}')"
  if st_wait node1 17 "${n3}['state'] == 'removing' and ${n3}['buckets'] == 0"; then
    second_before=$(st get "$(state_of node1)" "${n3}['second_hop_buckets']")
    echo "  node1 state $(nh_calc "$WAIT_AT - $HUP_T")s after SIGHUP: node3 removing, 0 buckets as first hop, $second_before as second hop"
  else
    ok=0 nums+="node3 not removing and empty: $WAIT_SUMMARY; "
  fi
  pid=${NILB_PID[node1]}
  t_kill=$(nh_now)
  nh_stop "$pid" KILL 5
  sleep 1
  RETIRED_LOGS=$((RETIRED_LOGS + 1))
  retire_log node1 "before-removerestart$RETIRED_LOGS"
  start_nilb_on node1
  if wait_ready node1; then
    echo "  node1's nilb killed (exit $NH_LAST_RC) and ready again $(nh_calc "$(nh_now) - $t_kill")s later; log: $(log_since node1 0 | grep -m 1 'adopted the pinned maps' | sed 's/^.*Z *INFO *//' | cut -c1-200)"
  else
    ok=0 nums+="restarted nilb not ready; "
  fi
  sleep 0.5
  local n3o="next((x for x in svc['backends'] if x['dip'] == '${NH_NODE_IP[node3]}'), None)"
  adm=$(st get "$(state_of node1)" "($n3o or {}).get('state', 'forgotten')" 2>/dev/null)
  second_after=$(st get "$(state_of node1)" "($n3o or {}).get('second_hop_buckets', 0)" 2>/dev/null)
  echo "  after the restart node1 state: node3 ${adm:-?}, second hop of ${second_after:-?} buckets"
  [[ $adm == removing && $second_after == "$second_before" && ${second_before:-0} -gt 0 ]] || ok=0
  nums+="node3 removing with ${second_before:-?} second-hop buckets before the kill, after the restart: ${adm:-?} with ${second_after:-?}; "
  sleep 5 # the held connections keep talking through the restarted daemon's tables
  touch "$HOLD_UNTIL"
  hold_finish 30
  if hold_read; then
    nums+="held on node3: ${okc}/10 OK over ${rounds} rounds across the restart, resets ${resets}, failures (time-outs) ${fails}"
    [[ $okc == 10 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 ]] || ok=0
    ((okc == 10)) || live_hops_of_bad
  else
    nums+="hold client produced no result (exit $HOLD_RC)"
    ok=0
  fi
  RB_MIN_BUCKET_AGE_MS=$age_before
  leave_base
  if ((ok)); then pass removerestart "$nums"; else fail removerestart "$nums"; fi
}
