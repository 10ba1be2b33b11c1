# shellcheck shell=bash
# (ecmp-fail) the set-up of (ecmp) (router with ECMP over 3 balancers, BIRD on
# every node, `routing:` in the config); 30 keep-alive connections held (a
# request each every 0.3 s) and a stream of 20 new connections/s throughout.
# 1. node1 drained as a balancer: its drain file (`routing.drain_file`) is
#    created; nilb withdraws the VIP, the router drops node1's next hop.
# 2. node2's nilb killed with -9 (its data plane keeps forwarding, its BIRD
#    keeps announcing: fail-static), then its BGP session torn down (its BIRD
#    stopped): the router drops node2's next hop.
# Pass: the router ends with node3 only; every held connection answers every
# round (0 resets, 0 failures); no new connection fails. Printed: the time from
# the drain file to the router's change, from the kill to the router's change
# (none expected before the BGP session goes), and from the session's end.
# Leaves: the base state (ecmp_down; node2's nilb started again).

scenario_ecmp-fail() {
  local ok=1 nums="" rt t0 t1 okc resets fails rounds est stream_out
  header "(ecmp-fail) drain one balancer, kill -9 another + tear down its BGP session, under held and new connections"
  need_base ecmp-fail || return
  if ! ecmp_up; then
    fail ecmp-fail "set-up: $ECMP_WHY"
    ecmp_down
    return
  fi
  rt=$(nh_ns rt)
  echo "  router next hops: $("$NH_PY" "$HERE/ecmp.py" nexthops "$rt" "$NH_VIP/32")"
  hold_bg ecmpfail --count 30 --sport-base 44000 --rounds 200 --interval 0.3 --max-seconds 60 --until "$NH_OUT/ecmpfail.until"
  HOLD_UNTIL=$NH_OUT/ecmpfail.until
  est=$(json "$HOLD_STATE" 'd["established"]' 2>/dev/null)
  echo "  held connections opened: ${est:-0}/30"
  [[ ${est:-0} == 30 ]] || ok=0
  touch "$HOLD_GO"
  stream_bg ecmpfail 45000 20 40 "$NH_OUT/ecmpfail.stop" || ok=0
  sleep 1

  # 1. drain node1
  t0=$(nh_now)
  touch "$NH_OUT/drain-${NH_NODE_IP[node1]}"
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$rt" "$NH_VIP/32" 2 --timeout 10 >"$NH_OUT/ecmp-wait.json"; then
    t1=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
    echo "  drain: router dropped node1 ${t1}s after the drain file: $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]')"
    nums+="drain -> route withdrawn ${t1}s"
  else
    ok=0
    nums+="drain: router still has $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]') after 10 s"
  fi
  status_table node1 | grep -E 'routing|VIP'
  sleep 2

  # 2. kill -9 node2's nilb: fail-static, the route stays while BIRD runs
  t0=$(nh_now)
  nh_stop "${NILB_PID[node2]}" KILL 5
  echo "  node2's nilb killed (exit $NH_LAST_RC); eth0: $(attach_info node2)"
  sleep 2
  echo "  router 2 s after the kill (node2's BIRD still up, fail-static): $("$NH_PY" "$HERE/ecmp.py" nexthops "$rt" "$NH_VIP/32")"
  nums+="; after kill -9 the route stays (fail-static) while BGP is up: $("$NH_PY" "$HERE/ecmp.py" nexthops "$rt" "$NH_VIP/32" | wc -w) next hops"
  t0=$(nh_now)
  nh_stop "${BIRD_PID[node2]}" KILL 5
  unset "BIRD_PID[node2]"
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$rt" "$NH_VIP/32" 1 --timeout $((ECMP_HOLD + 5)) >"$NH_OUT/ecmp-wait.json"; then
    t1=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
    echo "  node2's BIRD killed: router dropped node2 ${t1}s later (hold time ${ECMP_HOLD}s): $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]')"
    nums+="; node2's BGP session gone -> route withdrawn ${t1}s (hold ${ECMP_HOLD}s)"
  else
    ok=0
    nums+="; node2 still a next hop $((ECMP_HOLD + 5)) s after its BIRD died"
  fi
  sleep 3
  touch "$HOLD_UNTIL" "$NH_OUT/ecmpfail.stop"
  hold_finish 30
  stream_wait 20
  if hold_read; then
    nums+="; held: ${okc}/30 ok over ${rounds} rounds, resets ${resets}, failures ${fails}"
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    ok=0
    nums+="; hold client left no result"
  fi
  stream_out=$(json "$STREAM_RES" '"%d/%d ok" % (d["ok"], d["sent"])')
  nums+="; new connections ${stream_out}"
  [[ $(json "$STREAM_RES" 'd["ok"] == d["sent"] and d["sent"] > 0') == True ]] || ok=0
  rm -f "$NH_OUT/drain-${NH_NODE_IP[node1]}"
  ecmp_down
  if ((ok)); then pass ecmp-fail "$nums"; else fail ecmp-fail "$nums"; fi
}
