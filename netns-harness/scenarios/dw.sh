# shellcheck shell=bash
# scenario-order: 410
# (dw) dynamic weights from CPU load. A metrics server in every node's namespace
# (dynweight.py serve, 0.0.0.0:9101) serves nilb_host_cpu_utilization_ratio
# from a load model (0.1 + cost x the node's share of node1's first-hop
# buckets, read from node1's state at each scrape). Config: weights
# 100:100:100, dynamic_weight {source: cpu, interval 1 s, deadband 4}, and
# rebalance.max_step_percent 5. 36 keep-alive connections send a request every
# 0.25 s throughout. node2 "runs hot" (reads 95 % at its share), then returns
# to normal; the verdict (dynweight.py analyze) is taken from node1's `table
# installed` log lines (step sizes: a history no tool keeps) and a CSV of
# node1's state sampled every 0.5 s. With NH_DW_RESTART=1 (default) node1's
# nilb is also SIGKILLed and restarted while node2 is hot: the adopted table
# must not move.
# Needs: the base state. Leaves: the base state (weights and pacing from
# before, no dynamic weights; node1's nilb restarted without --keep-dataplane).

DW_PORT=9101            # the harness's CPU metrics endpoint in every node (nilb's own is 127.0.0.1:9700)
DW_DEADBAND=4           # deadband_percent of the dw config (percentage points of CPU)
DW_MAX_STEP=5           # rebalance.max_step_percent during dw

# dw_control NODE2_COST: write the load model (dynweight.py): every node idle 10 %
# plus 0.9 x its bucket share (40 % with a third of the buckets); node2's cost as given
dw_control() {
  local tmp=$NH_OUT/dw-control.json.tmp
  printf '{"nodes": {"node1": {"idle": 0.1, "cost": 0.9}, "node2": {"idle": 0.1, "cost": %s}, "node3": {"idle": 0.1, "cost": 0.9}}}\n' \
    "$1" >"$tmp" && mv -f "$tmp" "$NH_OUT/dw-control.json"
}
# dw_wait LABEL [--need-change]: bounded wait until node1's shares (changed and then)
# stayed put for 3 s with no pending moves (the controller is inside its deadband)
dw_wait() {
  local out
  out=$(nh_local "$NH_PY" "$HERE/dynweight.py" wait --state "$(state_of node1)" --quiet 3 --timeout 30 "${@:2}")
  local rc=$?
  echo "  $1: $(json - 'd["summary"]' <<<"$out") ($(json - '"settled" if d["ok"] else "NOT settled"' <<<"$out") after $(json - 'd["elapsed_s"]' <<<"$out") s, 3 s of them without a change)"
  return "$rc"
}

# dw_restart (NH_DW_RESTART=1): SIGKILL node1's nilb while dynamic weights have
# shaped its table, start it again on the same pins; the table must not move
# (adoption promises that). Sets DWR_NUMBERS.
dw_restart() {
  local pin=${PIN_DIR[node1]:-} b=$NH_OUT/tables-dw-before.json r=$NH_OUT/tables-dw-ready.json
  local l=$NH_OUT/tables-dw-later.json c1 c2 t_ready
  DWR_NUMBERS="restart under dynamic weights: "
  if [[ -z $pin ]]; then
    DWR_NUMBERS+="no pins on a harness bpffs"
    return 1
  fi
  dump_tables node1 "$b" >/dev/null 2>&1
  nh_stop "${NILB_PID[node1]}" KILL 5
  mv -f "$NH_OUT/nilb-node1.log" "$NH_OUT/nilb-node1.before-dw.log"
  start_nilb_on node1
  if ! wait_ready node1; then
    DWR_NUMBERS+="restarted nilb not ready"
    return 1
  fi
  t_ready=$(nh_now)
  dump_tables node1 "$r" >/dev/null 2>&1
  c1=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$b" "$r" | tail -n 1)
  sleep 5
  dump_tables node1 "$l" >/dev/null 2>&1
  c2=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$b" "$l" | tail -n 1)
  echo "  SIGKILL + restart of node1's nilb with the table shaped by dynamic weights (node2 hot):"
  echo "    live table at ready vs before: ${c1#SUMMARY }"
  echo "    live table $(nh_calc "$(nh_now) - $t_ready")s after ready vs before: ${c2#SUMMARY }"
  log_since node1 0 | grep 'table installed' | head -n 6 | sed 's/^.*Z *INFO *table installed *//; s/service=web key=[^ ]* //; s/^/    node1 after the restart: /'
  DWR_NUMBERS+="moved $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$c1") at ready, $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$c2") within 5 s (move times changed $(sed -n 's/.*age_changed=\([0-9]*\).*/\1/p' <<<"$c2"))"
  [[ $c1 == "SUMMARY PASS"* && $c2 == "SUMMARY PASS"* ]]
}

scenario_dw() {
  local nums="" ok=1 n m est t0 t_hot t_hot_end logs=() t_cool t_end share2 cost2 spid okc resets fails rounds verdict
  local old_w=() old_step=$RB_MAX_STEP_PERCENT phase=$NH_OUT/dw-phase csv=$NH_OUT/dynamic-weights.csv png=$NH_OUT/dynamic-weights.png
  header "(dw) dynamic weights from CPU load: node2 runs hot, its share falls in paced steps, then returns"
  need_base dw || return
  dw_control 0.9
  declare -A DW_PID=()
  for n in "${NH_NODES[@]}"; do
    nh_bg "cpu metrics on $n" "$NH_OUT/cpu-metrics-$n.log" "$n" "$NH_PY" "$HERE/dynweight.py" serve --node "$n" \
      --port "$DW_PORT" --control "$NH_OUT/dw-control.json" --state "$(state_of node1)"
    DW_PID[$n]=$NH_BG_PID
  done
  for n in "${NH_NODES[@]}"; do
    if ! nh_wait_until 10 grep -q 'listening on' "$NH_OUT/cpu-metrics-$n.log"; then
      fail dw "the CPU metrics server on $n did not start: $(tr '\n' ' ' <"$NH_OUT/cpu-metrics-$n.log")"
      for m in "${NH_NODES[@]}"; do nh_stop "${DW_PID[$m]}" TERM 3; done
      return
    fi
  done
  for n in "${NH_NODES[@]}"; do old_w+=("${WEIGHT[$n]}"); done
  cp "$CFG" "$NH_OUT/nilb-before-dw.yaml"
  RB_MAX_STEP_PERCENT=$DW_MAX_STEP
  DW_YAML="{source: cpu, metrics_port: $DW_PORT, interval_ms: 1000, deadband_percent: $DW_DEADBAND}"
  write_config 100 100 100
  echo "  load model: each node serves nilb_host_cpu_utilization_ratio = 0.1 + cost x (its share of node1's buckets) on :$DW_PORT/metrics, cost 0.9 (40 % at a third)"
  echo "  config: weights $(weights_ratio), dynamic_weight: $DW_YAML; rebalance: {min_interval_ms: $RB_MIN_INTERVAL_MS, max_step_percent: $RB_MAX_STEP_PERCENT, min_bucket_age_ms: $RB_MIN_BUCKET_AGE_MS}"
  if ! nilb_check; then
    ok=0
    nums+="nilb check rejected the dw config; "
  else
    hup_all
    if st_wait node1 20 "$(settled_expr) and all(x.get('load') is not None for x in b.values())"; then
      echo "  node1 on the new config with load readings: $WAIT_SUMMARY"
    else
      echo "  node1 did not settle on $(weights_ratio) with load readings within 20 s: $WAIT_SUMMARY"
      nums+="not settled with load readings before the test; "
      ok=0
    fi
  fi
  if ((ok)); then
    hold_bg dw --count 36 --sport-base 49000 --rounds 1000 --interval 0.25 --max-seconds 90 --until "$NH_OUT/hold-dw.until"
    est=$(json "$HOLD_STATE" 'd["established"]' 2>/dev/null)
    echo "  held connections established: ${est:-0}/36, by backend: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])'); each sends a request every 0.25 s from now on"
    [[ $est == 36 ]] || ok=0
    touch "$HOLD_GO"
    echo "all at 40 %" >"$phase"
    t0=$(nh_now)
    rm -f "$NH_OUT/dw-sample.stop"
    nh_bg "dw sampler" "$NH_OUT/dw-sampler.log" node1 "$NH_PY" "$HERE/dynweight.py" sample --state "$(state_of node1)" \
      --control "$NH_OUT/dw-control.json" --phase-file "$phase" --out "$csv" --t0 "$t0" --interval 0.5 \
      --stop-file "$NH_OUT/dw-sample.stop" --max-seconds 120
    spid=$NH_BG_PID
    sleep 2
    share2=$(st get "$(state_of node1)" "b['node2']['buckets'] / svc['table_size']")
    cost2=$(nh_calc "(0.95 - 0.1) / $share2")
    dw_control "$cost2"
    echo "node2 at 95 %" >"$phase"
    t_hot=$(nh_now)
    echo "  +$(nh_calc "$t_hot - $t0")s node2 runs hot: cost $cost2 per unit of share, i.e. 95 % at its share of $(nh_calc "100 * $share2")%"
    dw_wait "node2 hot" --need-change || { ok=0; nums+="shares did not settle while node2 was hot; "; }
    t_hot_end=$(nh_now)
    logs=()
    if [[ ${NH_DW_RESTART:-1} == 1 ]]; then
      echo "restart" >"$phase"
      dw_restart || ok=0
      nums+="$DWR_NUMBERS; "
      logs=(--log "$NH_OUT/nilb-node1.before-dw.log")
      echo "node2 at 95 %" >"$phase"
      dw_wait "node2 hot, after the restart" || { ok=0; nums+="shares did not settle after the restart; "; }
    fi
    dw_control 0.9
    echo "node2 back to normal" >"$phase"
    t_cool=$(nh_now)
    echo "  +$(nh_calc "$t_cool - $t0")s node2 back to normal (cost 0.9)"
    dw_wait "node2 normal" --need-change || { ok=0; nums+="shares did not settle after node2 recovered; "; }
    t_end=$(nh_now)
    sleep 1
    touch "$NH_OUT/dw-sample.stop"
    nh_wait_until 5 nh_not_alive "$spid"
    nh_stop "$spid" TERM 3
    touch "$HOLD_UNTIL"
    hold_finish 30
    "$NH_PY" "$HERE/dynweight.py" analyze --csv "$csv" --log "$NH_OUT/nilb-node1.log" "${logs[@]}" --t0 "$t0" \
      --control-hot <(printf '{"nodes": {"node1": {"idle": 0.1, "cost": 0.9}, "node2": {"idle": 0.1, "cost": %s}, "node3": {"idle": 0.1, "cost": 0.9}}}' "$cost2") \
      --t-hot "$t_hot" --t-hot-end "$t_hot_end" --t-cool "$t_cool" --t-end "$t_end" --table-size 1024 --max-step-percent "$RB_MAX_STEP_PERCENT" \
      --deadband-percent "$DW_DEADBAND" --weights "$(weights_ratio)" --min-weight 10 >"$NH_OUT/dw-verdict.txt"
    sed '$d' "$NH_OUT/dw-verdict.txt"
    echo "  info: node1's load scrapes that failed so far (state file load_errors): $(st get "$(state_of node1)" "' '.join('%s=%s' % (n, x.get('load_errors')) for n, x in b.items())")"
    verdict=$(tail -n 1 "$NH_OUT/dw-verdict.txt")
    [[ $verdict == "SUMMARY PASS"* ]] || ok=0
    nums+="${verdict#SUMMARY * }; "
    if hold_read; then
      nums+="held connections OK ${okc}/36 over ${rounds} rounds, resets ${resets}, failures ${fails}"
      [[ $okc == 36 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 ]] || ok=0
    else
      nums+="hold client produced no result (exit $HOLD_RC)"
      ok=0
    fi
    "$NH_PY" "$HERE/dynweight.py" plot --csv "$csv" --out "$png" \
      --title "nilb dynamic weights (source: cpu, interval 1 s, deadband $DW_DEADBAND %, steps of at most $RB_MAX_STEP_PERCENT % of the buckets): bucket shares on the balancer" \
      --mark "$(nh_calc "$t_hot - $t0"):node2 at 95 %" --mark "$(nh_calc "$t_cool - $t0"):node2 back to normal" |
      sed 's/^/  /'
    echo "  samples: $csv ($(($(wc -l <"$csv") - 1)) rows)$([[ -s $png ]] && echo ", plot: $png")"
    if [[ -n $PLOT_OUT ]]; then
      if mkdir -p "$PLOT_OUT" && cp "$csv" "$PLOT_OUT/" && { [[ ! -s $png ]] || cp "$png" "$PLOT_OUT/"; }; then
        echo "  copied to $PLOT_OUT/"
      else
        echo "  could not copy the CSV/PNG to $PLOT_OUT"
      fi
    fi
  fi
  # back to the weights and pacing from before, without dynamic weights
  DW_YAML=""
  RB_MAX_STEP_PERCENT=$old_step
  write_config "${old_w[@]}"
  hup_all
  if st_wait node1 20 "reload.get('ok') is True and $(settled_expr)"; then
    echo "  restored weights $(weights_ratio) without dynamic weights: $WAIT_SUMMARY"
  else
    echo "  node1 did not settle on $(weights_ratio) after dynamic weights were removed: $WAIT_SUMMARY"
    nums+="; restoring the weights did not settle"
    ok=0
  fi
  for n in "${NH_NODES[@]}"; do nh_stop "${DW_PID[$n]}" TERM 3; done
  leave_base
  if ((ok)); then pass dw "$nums"; else fail dw "$nums"; fi
}

