# shellcheck shell=bash
# scenario-order: 390
# (ecmp-churn) the set-up of (ecmp) (router with ECMP over 3 balancers that share
# their tables through etcd: one leader computes, two follow); 30 keep-alive
# connections held (a request each every 0.3 s) and 20 new connections/s
# throughout, while 100 random events change the tables: a backend's health
# check failing or passing again (its /healthz answers 503 while a file exists;
# the connections it serves stay up; at most one backend sick at a time) or new
# weights (1-3 each, config rewritten + SIGHUP everywhere), one every ~0.8 s
# (fixed seed). A watcher reads the three live tables at once in rounds
# (`nilb tables --json`, ecmp.py watch-agree): a follower is behind while its
# table (first and second hop of every bucket) differs from the leader's, from
# the start of the first round that shows it different to the end of the round
# that shows it equal again.
# Pass: no follower is behind for more than 1 s (the maximum printed; on a
# failure the balancers' and etcd's log lines of that window, and which buckets
# differed from the leader's after 0.5 s), none is at the end (the intervals in
# which two tables differ are printed too: they run together when changes come
# faster than one follower's delay); held
# connections 30/30 with 0 resets and 0 failures; no new connection fails; the
# roles at the end are those of the start. Leaves: the base state (ecmp_down, backends healthy).

scenario_ecmp-churn() {
  local ok=1 nums="" i ev n sick="" w1 w2 w3 okc resets fails rounds est res maxd
  local events=${NH_CHURN_EVENTS:-100}
  header "(ecmp-churn) $events random health and weight events under traffic: tables agree on every balancer"
  need_base ecmp-churn || return
  if ! "$NH_PY" "$HERE/ecmp.py" check; then
    fail ecmp-churn "set-up: the watcher's version rules fail their check"
    return
  fi
  if ! ecmp_up; then
    fail ecmp-churn "set-up: $ECMP_WHY"
    ecmp_down
    return
  fi
  local roles leader_ix=-1 k=0 r
  roles=$(ecmp_roles)
  echo "  cluster roles (node1 node2 node3): $roles"
  for r in $roles; do
    [[ $r == leader ]] && leader_ix=$k
    k=$((k + 1))
  done
  if ((leader_ix < 0)); then
    fail ecmp-churn "set-up: no leader among the balancers ($roles)"
    ecmp_down
    return
  fi
  hold_bg churn --count 30 --sport-base 46000 --rounds 400 --interval 0.3 --max-seconds 140 --until "$NH_OUT/churn.until"
  HOLD_UNTIL=$NH_OUT/churn.until
  est=$(json "$HOLD_STATE" 'd["established"]' 2>/dev/null)
  echo "  held connections opened: ${est:-0}/30"
  [[ ${est:-0} == 30 ]] || ok=0
  touch "$HOLD_GO"
  stream_bg churn 47000 20 130 "$NH_OUT/churn.stop" || ok=0
  rm -f "$NH_OUT/churn-watch.stop"
  nh_bg "agreement watcher" "$NH_OUT/churn-watch.log" client "$NH_PY" "$HERE/ecmp.py" watch-agree --nilb "$NILB" \
    --stop-file "$NH_OUT/churn-watch.stop" --out "$NH_OUT/churn-watch.json" --max-seconds 160 --leader "$leader_ix" \
    "${PIN_DIR[node1]}" "${PIN_DIR[node2]}" "${PIN_DIR[node3]}"
  local watch_pid=$NH_BG_PID
  RANDOM=16
  local nh=0 nw=0 t0
  t0=$(nh_now)
  for ((i = 1; i <= events; i++)); do
    ev=$((RANDOM % 2))
    if ((ev == 0)); then
      nh=$((nh + 1))
      if [[ -n $sick ]]; then
        rm -f "$NH_OUT/sick-$sick"
        sick=""
      else
        n=${NH_NODES[$((RANDOM % ${#NH_NODES[@]}))]}
        touch "$NH_OUT/sick-$n"
        sick=$n
      fi
    else
      nw=$((nw + 1))
      w1=$((RANDOM % 3 + 1)) w2=$((RANDOM % 3 + 1)) w3=$((RANDOM % 3 + 1))
      write_config "$w1" "$w2" "$w3"
      for n in "${NH_NODES[@]}"; do kill -HUP "${NILB_PID[$n]}"; done
    fi
    sleep 0.8
  done
  rm -f "$NH_OUT"/sick-node*
  write_config "${BASE_WEIGHTS[@]}"
  for n in "${NH_NODES[@]}"; do kill -HUP "${NILB_PID[$n]}"; done
  echo "  $events events in $(nh_calc "$(nh_now) - $t0") s: $nh health, $nw weight"
  # the last changes settle (paced steps), then the watcher stops
  for n in "${NH_NODES[@]}"; do
    st_wait "$n" 20 "$(settled_expr)" || echo "  $n did not settle: $WAIT_SUMMARY"
  done
  sleep 1
  touch "$NH_OUT/churn-watch.stop" "$HOLD_UNTIL" "$NH_OUT/churn.stop"
  nh_wait_until 10 nh_not_alive "$watch_pid"
  nh_stop "$watch_pid" TERM 3
  hold_finish 30
  stream_wait 30
  res=$NH_OUT/churn-watch.json
  if [[ -s $res ]]; then
    maxd=$(json "$res" 'd["max_behind_s"]')
    echo "  agreement: $(json "$res" '"%d rounds (slowest %.0f ms), the leader (node%d) showed %d tables, a follower differed from it %d times, longest %.3f s (%s), still at the end: %s; intervals in which two tables differ: %d, longest %.3f s" % (d["rounds"], d["round_ms_max"], d["leader"] + 1, d["leader_tables"], d["behind"], d["max_behind_s"], "node%d" % (d["worst"]["node"] + 1) if d["worst"] else "-", d["behind_open_at_end"], d["disagreements"], d["max_disagree_s"])')"
    nums+="every follower had the leader's table within ${maxd} s ($(json "$res" 'd["leader_tables"]') tables of the leader, $(json "$res" 'd["rounds"]') rounds)"
    if [[ $(json "$res" 'd["max_behind_s"] <= 1.0 and d["behind_open_at_end"] is None and d["leader_tables"] > 1') != True ]]; then
      ok=0
      # what the balancers and etcd logged while one was behind longest
      if [[ $(json "$res" 'd["worst"] is not None') == True ]]; then
        echo "  logs around the longest (from 1 s before to 0.5 s after):"
        "$NH_PY" "$HERE/ecmp.py" window-logs "$(json "$res" 'd["worst"]["from_unix"]')" "$(json "$res" 'd["worst"]["to_unix"]')" \
          "$NH_OUT"/nilb-node{1,2,3}.log "$NH_OUT/etcd.log" | head -n 60 | sed 's/^/    | /'
      fi
      # what the tables held while a follower was behind (dumped after 0.5 s)
      json "$res" '"\n".join("t=%s s: %s" % (x["t"], json.dumps(x["vs_leader"])) for x in d["dumps"])' | sed 's/^/    dump: /'
    fi
  else
    ok=0
    nums+="the agreement watcher left no result"
  fi
  if hold_read; then
    nums+="; held: ${okc}/30 ok over ${rounds} rounds, resets ${resets}, failures ${fails}"
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    ok=0
    nums+="; hold client left no result"
  fi
  nums+="; new connections $(json "$STREAM_RES" '"%d/%d ok" % (d["ok"], d["sent"])')"
  [[ $(json "$STREAM_RES" 'd["ok"] == d["sent"] and d["sent"] > 0') == True ]] || ok=0
  # the watcher measured against the leader of the start: it must still lead
  local roles_end
  roles_end=$(ecmp_roles)
  nums+="; roles at the end $(tr ' ' '/' <<<"$roles_end")"
  [[ $roles_end == "$roles" ]] || ok=0
  ecmp_down
  if ((ok)); then pass ecmp-churn "$nums"; else fail ecmp-churn "$nums"; fi
}
