# shellcheck shell=bash
# scenario-order: 90 health
# (h5) weight change in paced steps: 50 keep-alive connections held; the
# weights go from 1:1:2 to 1:8:1 (more than max_step_percent of the buckets,
# so it takes paced steps) + SIGHUP; the connections send a request every
# 0.25 s until node1's state shows pending_moves 0 and the new shares, then
# one final round: all 50 answer every round from their first backend, no
# reset, no failure; the `table installed` steps are printed (node1's log); a
# 300-burst fits the new weights.
# Needs: the base state. Leaves: the base state (weights 1:1:2 restored).

scenario_h5() {
  local nums="" ok=1 est old_w t_hup settle_s steps okc resets fails rounds new=(1 8 1)
  header "(h5) weight change in paced steps under 50 long-lived connections"
  need_base h5 || return
  hold_bg h5 --count 50 --sport-base 45000 --rounds 400 --interval 0.25 --max-seconds 40 --until "$NH_OUT/hold-h5.until"
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail h5 "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-h5.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  held connections established: $est/50, by backend: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])')"
  [[ $est == 50 ]] || ok=0
  old_w=$(weights_ratio)
  cp "$CFG" "$NH_OUT/nilb-before-h5.yaml"
  write_config "${new[@]}"
  echo "  new config: weights $old_w -> $(weights_ratio) (rebalance: at most ${RB_MAX_STEP_PERCENT}% of the buckets per step, steps ${RB_MIN_INTERVAL_MS}ms apart, buckets younger than ${RB_MIN_BUCKET_AGE_MS}ms stay)"
  nilb_check || ok=0
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$HOLD_STATE" --show 0 |
    sed 's/^LOOKUP/  info: nilb lookup (new config, one-step table) vs held connections (differ = moved):/'
  hup_all
  t_hup=$HUP_T
  touch "$HOLD_GO" # every connection sends a request every 0.25 s while the steps happen
  if st_wait node1 20 "$(settled_expr)"; then
    settle_s=$(nh_calc "$WAIT_AT - $t_hup")
    echo "  pending_moves 0 and shares at the new weights ${settle_s}s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  node1 did not settle on the new weights within 20 s: $WAIT_SUMMARY"
    ok=0
  fi
  steps=$(log_since node1 "${HUP_LINES[node1]}" | grep -c 'table installed')
  log_since node1 "${HUP_LINES[node1]}" | grep 'table installed' | sed 's/^.*Z *INFO *//; s/service=web key=[^ ]* //; s/^/  node1 step: /'
  touch "$HOLD_UNTIL" # one final round on every connection, then the client exits
  hold_finish 30
  if hold_read; then
    nums+="connections OK ${okc}/50 over ${rounds} rounds (last one after pending_moves=0), resets ${resets}, failures ${fails}, exit ${HOLD_RC}; $old_w -> $(weights_ratio) in ${steps} table installs, settled ${settle_s:-never}s after SIGHUP"
    [[ $okc == 50 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 && $(json "$HOLD_RES" 'd["until_seen"]') == True ]] || ok=0
  else
    nums+="hold client produced no result (exit $HOLD_RC)"
    ok=0
  fi
  echo "  second-chance counters (nilb stats):"
  second_chance_counters
  echo "  fresh burst with the new weights:"
  burst_dist h5 45100 || ok=0
  nums+="; new split: $DIST_NUMBERS"
  leave_base
  if ((ok)); then pass h5 "$nums"; else fail h5 "$nums"; fi
}

