# shellcheck shell=bash
# scenario-order: 100 health
# (h6) ten config writes + SIGHUPs to every nilb within one second, each a
# different weight set (last 2:5:3): node1 must end on the last weights with a
# successful reload, every backend within one bucket of its quota and
# pending_moves 0; node2 and node3 also on the last weights; all daemons
# alive; a 300-burst fits 2:5:3. 30 connections held across the reloads are
# reported for information only (see netns-harness/README.md).
# Needs: the base state. Leaves: the base state (weights 1:1:2 restored).

scenario_h6() {
  local nums="" ok=1 t_start t_end span ok0 set i last n reloads installs
  local sets=("1 1 1" "2 1 1" "1 2 1" "1 1 2" "3 1 2" "2 3 1" "1 2 3" "4 1 1" "1 4 1" "2 5 3")
  header "(h6) ten SIGHUPs within one second, each with a different weight set"
  need_base h6 || return
  # information only: 30 keep-alive connections opened before the signals, used
  # again once the last weights are in place (a bucket that moves twice, old
  # owner -> B -> C, keeps only B as second hop: connections of the old owner
  # cannot survive that; the pacing's min_bucket_age only spaces such moves)
  hold_bg h6 --count 30 --sport-base 46500 --rounds 1 --max-seconds 30 --timeout 1 || echo "  (info hold client did not start)"
  ok0=$(st get "$(state_of node1)" "reload.get('succeeded', 0)")
  installs=$(wc -l <"$NH_OUT/nilb-node1.log")
  t_start=$(nh_now)
  for set in "${sets[@]}"; do
    # shellcheck disable=SC2086 # the set is three words on purpose
    write_config $set
    for n in "${NH_NODES[@]}"; do
      [[ -n ${NILB_PID[$n]:-} ]] && kill -HUP "${NILB_PID[$n]}" 2>/dev/null
    done
    sleep 0.05
  done
  t_end=$(nh_now)
  span=$(nh_calc "$t_end - $t_start")
  last=$(weights_ratio)
  echo "  ${#sets[@]} config writes + SIGHUP to every nilb in ${span}s; weight sets: $(printf '%s, ' "${sets[@]// /:}" | sed 's/, $//'); last $last"
  awk -v s="$span" 'BEGIN { exit !(s < 1.0) }' || { ok=0; nums+="signals took ${span}s (not within 1 s); "; }
  if st_wait node1 20 "reload.get('ok') is True and $(settled_expr)"; then
    echo "  node1 settled on $last $(nh_calc "$WAIT_AT - $t_end")s after the last SIGHUP: $WAIT_SUMMARY"
    nums+="node1 on $last (weights, buckets within 1 of quota, pending 0) $(nh_calc "$WAIT_AT - $t_end")s after the last SIGHUP; "
  else
    echo "  node1 did not end on the last weights $last: $WAIT_SUMMARY"
    nums+="node1 not on the last weights: $WAIT_SUMMARY; "
    ok=0
  fi
  reloads=$(( $(st get "$(state_of node1)" "reload.get('succeeded', 0)") - ok0 ))
  i=$(log_since node1 "$installs" | grep -c 'table installed')
  nums+="reloads applied on node1: $reloads for ${#sets[@]} signals (signals during a reload merge), $i table installs, rejected reloads since start $(st get "$(state_of node1)" "reload.get('failed', 0)"); "
  for n in node2 node3; do
    if ! st_wait "$n" 5 "reload.get('ok') is True and weights() == '$last'"; then
      nums+="$n not on the last weights ($WAIT_SUMMARY); "
      ok=0
    fi
  done
  daemons_alive || { ok=0; nums+="a daemon died; "; }
  touch "$HOLD_GO"
  hold_finish 30
  if [[ -s $HOLD_RES ]]; then
    hold_bad
    live_hops_of_bad
    echo "  info: 30 connections held across the ten reloads: $(json "$HOLD_RES" 'd["ok"]') answered by their backend afterwards, resets $(json "$HOLD_RES" 'd["resets"]'), failures $(json "$HOLD_RES" 'd["failures"]') (not part of the verdict: with min_bucket_age_ms $RB_MIN_BUCKET_AGE_MS a bucket may move twice within a few seconds, and connections of its first owner are then lost, see docs/config.md; nilb's default is 300000)"
  fi
  echo "  burst with the last weights:"
  burst_dist h6 46000 || ok=0
  nums+="split: $DIST_NUMBERS"
  leave_base
  if ((ok)); then pass h6 "$nums"; else fail h6 "$nums"; fi
}

