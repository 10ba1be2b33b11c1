# shellcheck shell=bash
# scenario-order: 280
# (restart) fail-static restarts of node1's nilb (the balancer), two cycles:
# kill (SIGKILL) and upgrade (SIGTERM to a daemon started with
# --keep-dataplane). 30 keep-alive connections send a request every 0.3 s
# across both gaps. Each cycle: node1's whole live table is dumped from the
# pins (`nilb tables --json`, tables.py) and the held flows looked up (`nilb
# lookup --live --json`); 20 new connections/s run from 0.5 s before the signal
# until 1 s after the new daemon is ready; XDP and TC must stay attached with
# no daemon; 3 s gap; `nilb run` again on the same pins must adopt them (its
# log says so), its table must equal the one before bucket for bucket (first
# hop, second hop, move time) at ready and once its state is settled, the
# held flows' hops unchanged, counters carried over, every new connection and
# every held one answered.
# Needs: the base state. Leaves: the base state (node1's nilb running
# without --keep-dataplane).

# held_hops FILE: "sport bucket first-hop second-hop" of every held connection
# (HOLD_STATE) in node1's live table, from its pins (`nilb lookup --live --json`
# through lookup.py; works with no daemon)
held_hops() {
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$HOLD_STATE" --live "${PIN_DIR[node1]}" \
    --hops >"$1" 2>/dev/null
}

# stream_window RESULT T_FROM T_TO: "ok/started" of the stream's requests started
# in [T_FROM, T_TO), plus the errors by kind if any
stream_window() { "$NH_PY" "$HERE/results.py" window "$1" "$2" "$3" 2>/dev/null || echo "?/?"; }
window_ok() { [[ $1 =~ ^([0-9]+)/([0-9]+)$ && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" && ${BASH_REMATCH[2]} -gt 0 ]]; }

# restart_cycle kill|upgrade SPORT_BASE: stop node1's nilb (SIGKILL, or SIGTERM of a
# daemon started with --keep-dataplane), ~3 s with no daemon under a stream of new
# connections, start it again on the same pins; compare the live tables. Sets
# CYCLE_OK and CYCLE_NUMBERS.
restart_cycle() {
  local mode=$1 base=$2 pid=${NILB_PID[node1]} pin=${PIN_DIR[node1]} rc t_stop t_start t_ready
  local stop=$NH_OUT/stream-restart-$1.stop tb=$NH_OUT/tables-$1-before.json ta=$NH_OUT/tables-$1-ready.json
  local tl=$NH_OUT/tables-$1-later.json link filt cmp1 cmp2 gap before after enc hop_moved adopted newpid cont
  CYCLE_OK=1 CYCLE_NUMBERS="$mode: "
  if [[ $mode == kill ]]; then
    echo "  -- SIGKILL to node1's nilb (pid $pid): a crash"
  else
    echo "  -- SIGTERM to node1's nilb (pid $pid, started with --keep-dataplane): an upgrade"
  fi
  if ! dump_tables node1 "$tb" >"$NH_OUT/tables.out" 2>&1; then
    CYCLE_OK=0 CYCLE_NUMBERS+="cannot read the live table: $(head -c 200 "$NH_OUT/tables.out")"
    return 1
  fi
  echo "  node1 live table before (nilb tables --json --pin-dir $pin): $(<"$NH_OUT/tables.out")"
  held_hops "$NH_OUT/hops-$mode-before.txt"
  save_stats node1 "$NH_OUT/stats-node1-$mode-before.json"
  if ! stream_bg "restart-$mode" "$base" 20 20 "$stop"; then
    CYCLE_OK=0 CYCLE_NUMBERS+="stream client did not start; "
  fi
  sleep 0.5
  t_stop=$(nh_now)
  if [[ $mode == kill ]]; then
    nh_stop "$pid" KILL 5
  else
    nh_stop "$pid" TERM 15
  fi
  rc=$NH_LAST_RC
  link=$(ip -n "$(nh_ns node1)" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1)
  filt=$(tc -n "$(nh_ns node1)" filter show dev eth0 ingress 2>/dev/null | grep -c .)
  echo "  nilb exited with status $rc $(nh_calc "$(nh_now) - $t_stop")s after the signal; node1 eth0 now: xdp ${link:-none}, tc ingress filter lines $filt"
  if [[ $mode == kill ]]; then
    [[ $rc == 137 ]] || { CYCLE_OK=0; CYCLE_NUMBERS+="exit status $rc (not 137); "; }
  else
    [[ $rc == 0 ]] || { CYCLE_OK=0; CYCLE_NUMBERS+="exit status $rc (not 0); "; }
    if log_has node1 0 'data plane kept'; then
      echo "  its log: $(log_since node1 0 | grep -m 1 'data plane kept' | sed 's/^.*Z *INFO *//' | cut -c1-150)"
    else
      CYCLE_OK=0 CYCLE_NUMBERS+="no 'data plane kept' in its log; "
    fi
  fi
  if [[ -n $link && $filt -gt 0 ]]; then
    CYCLE_NUMBERS+="XDP and TC stayed attached; "
  else
    CYCLE_OK=0 CYCLE_NUMBERS+="data plane NOT attached after exit (xdp ${link:-none}, tc lines $filt); "
  fi
  sleep 3 # the gap: no control plane on node1, the orphaned data plane forwards
  save_stats node1 "$NH_OUT/stats-node1-$mode-gap.json"
  enc=0
  local c
  for c in xdp_encap_tx xdp_encap_local xdp_encap_slow_path; do
    enc=$((enc + $(counter "$c" "$NH_OUT/stats-node1-$mode-gap.json") - $(counter "$c" "$NH_OUT/stats-node1-$mode-before.json")))
  done
  mv -f "$NH_OUT/nilb-node1.log" "$NH_OUT/nilb-node1.before-$mode.log"
  t_start=$(nh_now)
  if [[ $mode == kill ]]; then
    start_nilb_on node1 --keep-dataplane # so that the upgrade cycle can stop it keeping the data plane
  else
    start_nilb_on node1
  fi
  newpid=${NILB_PID[node1]}
  echo "  started nilb on node1 again after a $(nh_calc "$t_start - $t_stop")s gap (pid $newpid): nilb ${NILB_ARGS[*]}"
  if ! wait_ready node1; then
    touch "$stop"
    stream_wait 30
    CYCLE_OK=0 CYCLE_NUMBERS+="restarted nilb not ready"
    return 1
  fi
  t_ready=$(nh_now)
  adopted=$(log_since node1 0 | grep -m 1 'adopted the pinned maps' | sed 's/^.*Z *INFO *//' | cut -c1-140)
  if [[ -n $adopted ]]; then
    echo "  ready $(nh_calc "$t_ready - $t_start")s after start; log: $adopted"
  else
    echo "  ready $(nh_calc "$t_ready - $t_start")s after start, but its log does not say it adopted the pinned maps:"
    log_tail "$NH_OUT/nilb-node1.log" 8
    CYCLE_OK=0 CYCLE_NUMBERS+="NOT adopted; "
  fi
  dump_tables node1 "$ta" >/dev/null 2>&1
  cmp1=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$tb" "$ta")
  echo "  live table at ready vs before the stop: ${cmp1##*SUMMARY }"
  # once the health checks have answered and the state file is the new daemon's
  if ! st_wait node1 8 "d.get('pid') == $newpid and $(settled_expr)"; then
    echo "  node1's state did not settle within 8 s after the restart: $WAIT_SUMMARY"
    CYCLE_OK=0 CYCLE_NUMBERS+="state not settled after restart; "
  fi
  sleep 1
  dump_tables node1 "$tl" >/dev/null 2>&1
  cmp2=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$tb" "$tl")
  echo "  live table $(nh_calc "$(nh_now) - $t_ready")s after ready (health checks answered) vs before the stop: ${cmp2##*SUMMARY }"
  grep -v '^SUMMARY' <<<"$cmp2" | head -n 5 | sed 's/^/    /'
  [[ $cmp1 == *"SUMMARY PASS"* && $cmp2 == *"SUMMARY PASS"* ]] || CYCLE_OK=0
  # counters live in the pinned maps too: the new daemon continues them
  save_stats node1 "$NH_OUT/stats-node1-$mode-after.json"
  cont=$(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-after.json")
  if ((cont >= $(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-gap.json") && cont > 0)); then
    CYCLE_NUMBERS+="counters carried over (xdp_encap_tx $(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-before.json") before, $cont after); "
  else
    CYCLE_OK=0 CYCLE_NUMBERS+="counters NOT carried over (xdp_encap_tx $(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-gap.json") in the gap, $cont after); "
  fi
  held_hops "$NH_OUT/hops-$mode-after.txt"
  hop_moved=$(diff "$NH_OUT/hops-$mode-before.txt" "$NH_OUT/hops-$mode-after.txt" | grep -c '^>')
  [[ $hop_moved == 0 ]] || CYCLE_OK=0
  touch "$stop"
  stream_wait 30
  before=$(stream_window "$STREAM_RES" 0 "$t_stop")
  gap=$(stream_window "$STREAM_RES" "$t_stop" "$t_ready")
  after=$(stream_window "$STREAM_RES" "$t_ready" 1e12)
  echo "  new connections (20/s): before the signal $before, from the signal until the new daemon was ready $gap, after $after; node1 encapsulated $enc packets during the gap"
  window_ok "$gap" && window_ok "$after" && window_ok "$before" || CYCLE_OK=0
  CYCLE_NUMBERS+="exit $rc, gap $(nh_calc "$t_ready - $t_stop")s: new connections OK $gap in the gap ($after after), encapsulated in the gap $enc; adopted $([[ -n $adopted ]] && echo yes || echo NO); "
  CYCLE_NUMBERS+="buckets compared $(sed -n 's/.* buckets=\([0-9]*\).*/\1/p' <<<"$cmp1"), moved $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$cmp1") at ready / $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$cmp2") later (second hops changed $(sed -n 's/.*second_changed=\([0-9]*\).*/\1/p' <<<"$cmp2"), move times changed $(sed -n 's/.*age_changed=\([0-9]*\).*/\1/p' <<<"$cmp2"), chains changed $(sed -n 's/.*chain_changed=\([0-9]*\).*/\1/p' <<<"$cmp1") at ready / $(sed -n 's/.*chain_changed=\([0-9]*\).*/\1/p' <<<"$cmp2") later of $(sed -n 's/.*chain_entries=\([0-9]*\).*/\1/p' <<<"$cmp1") previous-owner entries); held flows with other hops (nilb lookup --live) $hop_moved/$(wc -l <"$NH_OUT/hops-$mode-before.txt")"
  [[ $CYCLE_OK == 1 ]]
}

scenario_restart() {
  local nums="" ok=1 est okc resets fails rounds
  header "(restart) fail-static: node1's nilb crashes (SIGKILL) and is upgraded (SIGTERM + --keep-dataplane)"
  if [[ -z ${PIN_DIR[node1]:-} ]]; then
    fail restart "no pins on a harness bpffs (mount_pins did not run)"
    return
  fi
  need_base restart || return
  hold_bg restart --count 30 --sport-base 47000 --rounds 1000 --interval 0.3 --max-seconds 60 --until "$NH_OUT/hold-restart.until"
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail restart "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-restart.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  held connections established: $est/30, by backend: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])'); each sends a request every 0.3 s from now on"
  [[ $est == 30 ]] || ok=0
  touch "$HOLD_GO"
  restart_cycle kill 50000 || ok=0
  nums+="$CYCLE_NUMBERS; "
  if nh_alive "${NILB_PID[node1]}" && [[ ${NILB_KEEP[node1]} == 1 ]]; then
    restart_cycle upgrade 50400 || ok=0
    nums+="$CYCLE_NUMBERS; "
  else
    ok=0
    nums+="upgrade: skipped (node1's nilb not running with --keep-dataplane); "
  fi
  touch "$HOLD_UNTIL"
  hold_finish 30
  if hold_read; then
    nums+="held connections OK ${okc}/30 over ${rounds} rounds across both gaps, resets ${resets}, failures ${fails}"
    [[ $okc == 30 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 ]] || ok=0
  else
    nums+="hold client produced no result (exit $HOLD_RC)"
    ok=0
  fi
  daemons_alive || { ok=0; nums+="; a daemon is not running"; }
  leave_base
  if ((ok)); then pass restart "$nums"; else fail restart "$nums"; fi
}

