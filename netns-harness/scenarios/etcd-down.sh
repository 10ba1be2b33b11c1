# shellcheck shell=bash
# scenario-order: 400
# (etcd-down) the set-up of (ecmp) (3 balancers sharing their tables through
# etcd); 30 keep-alive connections held and 20 new connections/s throughout.
# etcd is stopped for 30 s (NH_ETCD_DOWN_S): every balancer keeps forwarding
# with the tables it has (`nilb status`: NOT CONNECTED); the live tables of
# every balancer are dumped before and after and must not differ in any
# bucket (hops, previous owners, move times). etcd is started again (same
# data): the time from its first answer until every balancer is connected
# again with one leader is printed; then new weights (SIGHUP everywhere) must reach every balancer's
# table (following resumed).
# Pass: 0 failed requests (held and new), tables unchanged during the outage,
# following resumes within 10 s and the new weights agree everywhere.
# Leaves: the base state (ecmp_down).

scenario_etcd-down() {
  local ok=1 nums="" n okc resets fails rounds est t0 t_back down=${NH_ETCD_DOWN_S:-30} cmp
  header "(etcd-down) etcd stopped for ${down} s under traffic: forwarding and tables unchanged, following resumes"
  need_base etcd-down || return
  if ! ecmp_up; then
    fail etcd-down "set-up: $ECMP_WHY"
    ecmp_down
    return
  fi
  echo "  cluster roles (node1 node2 node3): $(ecmp_roles)"
  hold_bg etcddown --count 30 --sport-base 48000 --rounds 400 --interval 0.3 --max-seconds 120 --until "$NH_OUT/etcddown.until"
  HOLD_UNTIL=$NH_OUT/etcddown.until
  est=$(json "$HOLD_STATE" 'd["established"]' 2>/dev/null)
  echo "  held connections opened: ${est:-0}/30"
  [[ ${est:-0} == 30 ]] || ok=0
  touch "$HOLD_GO"
  stream_bg etcddown 49000 20 $((down + 40)) "$NH_OUT/etcddown.stop" || ok=0
  sleep 1
  for n in "${NH_NODES[@]}"; do dump_tables "$n" "$NH_OUT/tables-etcddown-before-$n.json" >/dev/null || ok=0; done
  ecmp_etcd_stop
  echo "  etcd stopped (exit $NH_LAST_RC)"
  sleep 5
  status_table node1 | grep -E 'cluster|etcd'
  local disconnected=0
  for n in "${NH_NODES[@]}"; do
    [[ $(st get "$(state_of "$n")" "d['cluster']['connected']" 2>/dev/null) == False ]] && disconnected=$((disconnected + 1))
  done
  echo "  balancers that show etcd NOT CONNECTED 5 s into the outage: $disconnected/3"
  [[ $disconnected == 3 ]] || ok=0
  sleep $((down - 5))
  cmp=""
  for n in "${NH_NODES[@]}"; do
    dump_tables "$n" "$NH_OUT/tables-etcddown-after-$n.json" >/dev/null || ok=0
    local line
    line=$("$NH_PY" "$HERE/tables.py" compare "$NH_OUT/tables-etcddown-before-$n.json" "$NH_OUT/tables-etcddown-after-$n.json" | tail -n 1)
    echo "  $n tables over the outage: $line"
    [[ $line == *"SUMMARY PASS"* ]] || ok=0
    cmp+="${cmp:+,}$(sed -n 's/.*SUMMARY \([A-Z]*\).* moved=\([0-9]*\).*/\1 moved=\2/p' <<<"$line")"
  done
  nums+="tables over ${down} s without etcd: $cmp"
  t0=$(nh_now)
  if ! ecmp_etcd_start keep; then
    ok=0
    nums+="; etcd did not start again: $ECMP_WHY"
  fi
  # (etcd itself takes 1-5 s to start; timed from its first answer)
  local t_etcd
  t_etcd=$(nh_calc "$(nh_now) - $t0")
  t0=$(nh_now)
  if nh_wait_until 15 ecmp_all_connected_one_leader; then
    t_back=$(nh_calc "$(nh_now) - $t0")
    echo "  etcd back (it answered ${t_etcd} s after its start): every balancer connected with one leader ${t_back} s after its first answer ($(ecmp_roles))"
    nums+="; following again ${t_back} s after etcd answered (etcd's own start ${t_etcd} s)"
  else
    ok=0
    nums+="; not all connected with one leader 15 s after etcd restarted ($(ecmp_roles))"
  fi
  # following resumed: new weights reach every balancer
  write_config 2 1 1
  hup_all
  if nh_wait_until 15 ecmp_tables_agree_on_weights; then
    nums+="; new weights 2:1:1 agree everywhere $(nh_calc "$(nh_now) - $HUP_T") s after SIGHUP"
  else
    ok=0
    nums+="; new weights did not reach every balancer ($ECMP_AGREE)"
  fi
  touch "$HOLD_UNTIL" "$NH_OUT/etcddown.stop"
  hold_finish 30
  stream_wait 30
  if hold_read; then
    nums+="; held: ${okc}/30 ok over ${rounds} rounds, resets ${resets}, failures ${fails}"
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    ok=0
    nums+="; hold client left no result"
  fi
  nums+="; new connections $(json "$STREAM_RES" '"%d/%d ok" % (d["ok"], d["sent"])')"
  [[ $(json "$STREAM_RES" 'd["ok"] == d["sent"] and d["sent"] > 0') == True ]] || ok=0
  ecmp_down
  if ((ok)); then pass etcd-down "$nums"; else fail etcd-down "$nums"; fi
}

# every balancer connected to etcd, one leader
ecmp_all_connected_one_leader() {
  local n
  for n in "${NH_NODES[@]}"; do
    [[ $(st get "$(state_of "$n")" "d['cluster']['connected']" 2>/dev/null) == True ]] || return 1
  done
  ecmp_one_leader
}

# the three tables agree and node1's shares follow weights 2:1:1 (256 of 1024 a share)
ecmp_tables_agree_on_weights() {
  ecmp_tables etcddown-w || return 1
  [[ $(json "$NH_OUT/tables-etcddown-w-node1.json" 'sum(1 for s in d["services"] for b in s["buckets"] if b["first_hop"] == "10.77.0.11")') == 512 ]]
}
