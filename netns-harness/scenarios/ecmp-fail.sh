# shellcheck shell=bash
# scenario-order: 380
# (ecmp-fail) the set-up of (ecmp) (router with ECMP over 3 balancers that share
# their tables through etcd, BIRD on every node, `routing:` in the config); 30
# keep-alive connections held (a request each every 0.3 s) and a stream of 20 new
# connections/s throughout.
# 1. a follower (of the tables' leader) drained as a balancer: its drain file
#    (`routing.drain_file`) is created; nilb withdraws the VIP, the router drops
#    its next hop.
# 2. the leader's nilb killed with -9 (its data plane keeps forwarding, its BIRD
#    keeps announcing: fail-static), then its BGP session torn down (its BIRD
#    stopped): the router drops its next hop; once its lease runs out another
#    balancer becomes leader, starting from the published tables.
# Pass: the router ends with one next hop; a new leader is elected; the three
# live tables (the killed balancer's included) are still identical; every held
# connection answers every round (0 resets, 0 failures); no new connection
# fails. Printed: the time from the drain file to the router's change, from the
# kill to the router's change (none expected before the BGP session goes), from
# the session's end, and from the kill to the new leader.
# Leaves: the base state (ecmp_down; the killed nilb started again).

scenario_ecmp-fail() {
  local ok=1 nums="" rt t0 t1 okc resets fails rounds est stream_out n lead="" drn="" tk
  header "(ecmp-fail) drain one balancer, kill -9 another + tear down its BGP session, under held and new connections"
  need_base ecmp-fail || return
  if ! ecmp_up; then
    fail ecmp-fail "set-up: $ECMP_WHY"
    ecmp_down
    return
  fi
  rt=$(nh_ns rt)
  echo "  router next hops: $("$NH_PY" "$HERE/ecmp.py" nexthops "$rt" "$NH_VIP/32")"
  for n in "${NH_NODES[@]}"; do
    case $(st get "$(state_of "$n")" "d['cluster']['role']" 2>/dev/null) in
      leader) lead=$n ;;
      follower) [[ -z $drn ]] && drn=$n ;;
    esac
  done
  echo "  cluster roles (node1 node2 node3): $(ecmp_roles): draining $drn (follower), killing $lead (leader)"
  hold_bg ecmpfail --count 30 --sport-base 44000 --rounds 200 --interval 0.3 --max-seconds 60 --until "$NH_OUT/ecmpfail.until"
  HOLD_UNTIL=$NH_OUT/ecmpfail.until
  est=$(json "$HOLD_STATE" 'd["established"]' 2>/dev/null)
  echo "  held connections opened: ${est:-0}/30"
  [[ ${est:-0} == 30 ]] || ok=0
  touch "$HOLD_GO"
  stream_bg ecmpfail 45000 20 40 "$NH_OUT/ecmpfail.stop" || ok=0
  sleep 1

  # 1. drain a follower
  t0=$(nh_now)
  touch "$NH_OUT/drain-${NH_NODE_IP[$drn]}"
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$rt" "$NH_VIP/32" 2 --timeout 10 >"$NH_OUT/ecmp-wait.json"; then
    t1=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
    echo "  drain: router dropped $drn ${t1}s after the drain file: $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]')"
    nums+="drain -> route withdrawn ${t1}s"
  else
    ok=0
    nums+="drain: router still has $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]') after 10 s"
  fi
  status_table "$drn" | grep -E 'routing|VIP'
  sleep 2

  # 2. kill -9 the leader's nilb: fail-static, the route stays while BIRD runs
  t0=$(nh_now)
  tk=$t0
  nh_stop "${NILB_PID[$lead]}" KILL 5
  echo "  $lead's nilb killed (exit $NH_LAST_RC); eth0: $(attach_info "$lead")"
  sleep 2
  echo "  router 2 s after the kill ($lead's BIRD still up, fail-static): $("$NH_PY" "$HERE/ecmp.py" nexthops "$rt" "$NH_VIP/32")"
  nums+="; after kill -9 the route stays (fail-static) while BGP is up: $("$NH_PY" "$HERE/ecmp.py" nexthops "$rt" "$NH_VIP/32" | wc -w) next hops"
  t0=$(nh_now)
  nh_stop "${BIRD_PID[$lead]}" KILL 5
  unset "BIRD_PID[$lead]"
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$rt" "$NH_VIP/32" 1 --timeout $((ECMP_HOLD + 5)) >"$NH_OUT/ecmp-wait.json"; then
    t1=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
    echo "  $lead's BIRD killed: router dropped $lead ${t1}s later (hold time ${ECMP_HOLD}s): $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]')"
    nums+="; the leader's BGP session gone -> route withdrawn ${t1}s (hold ${ECMP_HOLD}s)"
  else
    ok=0
    nums+="; $lead still a next hop $((ECMP_HOLD + 5)) s after its BIRD died"
  fi
  # a new leader among the others once the killed one's lease ran out
  local others=() new=""
  for n in "${NH_NODES[@]}"; do [[ $n != "$lead" ]] && others+=("$n"); done
  ecmp_new_leader() {
    local m
    for m in "${others[@]}"; do
      [[ $(st get "$(state_of "$m")" "d['cluster']['role']" 2>/dev/null) == leader ]] && { new=$m; return 0; }
    done
    return 1
  }
  if nh_wait_until 10 ecmp_new_leader; then
    echo "  new leader $new $(nh_calc "$(nh_now) - $tk") s after the kill (lease 3 s)"
    nums+="; new leader $new $(nh_calc "$(nh_now) - $tk")s after the kill"
  else
    ok=0
    nums+="; no new leader 10 s after the kill"
  fi
  sleep 2
  if ecmp_tables ecmpfail; then
    nums+="; tables after the leader change: ${ECMP_AGREE#SUMMARY PASS }"
  else
    ok=0
    echo "$ECMP_AGREE" | sed 's/^/  /'
    nums+="; tables DIFFER after the leader change: ${ECMP_AGREE##*SUMMARY }"
  fi
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
  rm -f "$NH_OUT/drain-${NH_NODE_IP[$drn]}"
  ecmp_down
  if ((ok)); then pass ecmp-fail "$nums"; else fail ecmp-fail "$nums"; fi
}
