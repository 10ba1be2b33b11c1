# shellcheck shell=bash
# scenario-order: 180
# (rst) What a client whose connection lands nowhere sees, in each
# `cluster.unknown_flow` mode. Per mode (drop, local, rst): the config gets the
# mode (SIGHUP to every nilb); four keep-alive connections that landed on node3
# are held; node3 is set offline (its buckets move at once and it is no second
# hop: the connections' packets reach a last hop that does not know them);
# then every connection sends one more request (3 s timeout). Pass: rst: 4/4
# reset in < 1 s (a RST from the VIP built by nilb's TC program); local: 4/4
# reset (the stack's RST); drop: 4/4 hang until the timeout. node3 is made
# active again between modes. Prints per mode the outcomes with their times and
# the counters that moved (tc_rst_sent, tc_decap_unknown_local,
# tc_drop_unknown_flow) summed over the nodes.
# Needs: the base state. Leaves: the base state.

# rst_counters FILE...: "name=value" of the unknown-flow counters summed over saved stats
rst_sum() {
  local name=$1 f s=0
  shift
  for f in "$@"; do s=$((s + $(counter "$name" "$f"))); done
  echo "$s"
}

scenario_rst() {
  local nums="" ok=1 mode base=48000 res kinds n t0 maxms before=() after=() c
  header "(rst) unknown_flow drop | local | rst: a client whose backend went offline hangs, or gets a RST"
  need_base rst || return
  for mode in drop local rst; do
    # shellcheck disable=SC2034 # read by write_config (harness.sh)
    UNKNOWN_FLOW=$mode
    write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
    hup_all
    for n in "${NH_NODES[@]}"; do wait_reload "$n" 5 >/dev/null || { ok=0; echo "  $n did not reload"; }; done
    res=$NH_OUT/hold-rst-$mode-result.json
    rm -f "$NH_OUT/hold-rst-$mode.go"
    nh_bg "hold client (rst $mode)" "$NH_OUT/hold-rst-$mode.log" client timeout 90 "$NH_PY" "$HERE/flows.py" tcp-hold \
      --host "$NH_VIP" --port 80 --sport-base "$base" --count 80 --want-backend node3 --want-count 4 --timeout 3 \
      --state "$NH_OUT/hold-rst-$mode-state.json" --go "$NH_OUT/hold-rst-$mode.go" --go-timeout 60 --out "$res"
    local hpid=$NH_BG_PID
    base=$((base + 100))
    nh_wait_until 30 test -e "$NH_OUT/hold-rst-$mode-state.json" || ok=0
    [[ $(json "$NH_OUT/hold-rst-$mode-state.json" 'd["established"]') == 4 ]] || { ok=0; echo "  fewer than 4 connections on node3"; }
    before=()
    for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-rst-$mode-0.json"; before+=("$NH_OUT/stats-$n-rst-$mode-0.json"); done
    # shellcheck disable=SC2034 # read by write_config (harness.sh)
    BSTATE["node3"]=offline
    write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
    hup_all
    t0=$HUP_T
    if st_wait node1 10 "b['node3']['buckets'] == 0 and b['node3']['second_hop_buckets'] == 0 and svc['pending_moves'] == 0"; then
      echo "  ($mode) node3 offline $(nh_calc "$WAIT_AT - $t0")s after SIGHUP: $WAIT_SUMMARY"
    else
      echo "  ($mode) node3 not offline: $WAIT_SUMMARY"
      ok=0
    fi
    touch "$NH_OUT/hold-rst-$mode.go"
    nh_wait_until 20 nh_not_alive "$hpid"
    nh_stop "$hpid" TERM 3
    after=()
    for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-rst-$mode-1.json"; after+=("$NH_OUT/stats-$n-rst-$mode-1.json"); done
    kinds=$(json "$res" 'json.dumps([[c["kind"], c["ms"]] for c in d["per_connection"]])')
    maxms=$(json "$res" 'max(c["ms"] for c in d["per_connection"])')
    c=""
    for n in tc_rst_sent tc_decap_unknown_local tc_drop_unknown_flow tc_drop_rst_limited; do
      c+="$n +$(($(rst_sum "$n" "${after[@]}") - $(rst_sum "$n" "${before[@]}"))) "
    done
    echo "  ($mode) after node3 went offline: [kind, ms] $kinds; counters: $c"
    case $mode in
      rst) [[ $(json "$res" 'd["reset"]') == 4 ]] && awk "BEGIN { exit !($maxms < 1000) }" || ok=0 ;;
      local) [[ $(json "$res" 'd["reset"]') == 4 ]] || ok=0 ;;
      drop) [[ $(json "$res" 'd["timeout"]') == 4 ]] || ok=0 ;;
    esac
    nums+="$mode: $(json "$res" '"%d reset, %d timed out, %d answered" % (d["reset"], d["timeout"], d["ok"])') (slowest ${maxms} ms); "
    unset "BSTATE[node3]"
    write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
    hup_all
    wait_settled 20 >/dev/null || { ok=0; echo "  node3 did not come back: $WAIT_SUMMARY"; }
  done
  leave_base
  if ((ok)); then pass rst "$nums"; else fail rst "$nums"; fi
}
