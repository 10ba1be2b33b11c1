# shellcheck shell=bash
# scenario-order: 210
# (chain) Connections that outlive several moves of their bucket (issue 20):
# nginx on every node (port 8081, service `chain` beside `web`), wrk in the
# client namespace with 100 keep-alive connections (a request every
# NH_CHAIN_DELAY_MS per connection), and 20 weight changes of `chain` one
# second apart (the heavy backend rotates: 3:1:1, 1:3:1, 1:1:3, ...) with
# min_bucket_age_ms 2000, SIGHUP to every nilb each time. Twice in the same
# run: with `rebalance.previous_owners: 1` (the baseline: a bucket remembers
# one previous owner) and with 3. A connection is stalled when nginx logged
# no request of it in the last 3 s of the run (wrk keeps a connection whose
# packets are dropped open: `unknown_flow: drop`). Printed per phase: stalled
# connections, connections seen, requests, tc_drop_unknown_flow summed over
# the nodes, node1's chain lengths. Pass: 0 stalled with 3 previous owners.
# Then long-lived streams: 30 held keep-alive connections to `web` (port 80,
# backend.py) sending a request every second while the heavy backend of `web`
# rotates (3:1:1, 1:3:1, ...) every ~1.5 s, until each connection's bucket
# moved 5 times (node1's live table looked up after every change; at most 36
# changes), with previous_owners 1 (baseline) and 3. Printed per N: moves per
# connection, ok / resets / failures of the held connections. Pass also needs,
# with 3: at least 20 of the 30 buckets moved 5 times or more, and 0 resets,
# 0 failures, every connection answered by the backend it opened on.
# The balancer lists as many hops as its data plane holds: with a data plane
# that lists one previous owner, the N=3 phase behaves like N=1 after the
# second hop.
# nginx is started afresh per phase (stalled connections of the first phase
# keep server sockets that would answer reused client ports).
# Needs: the base state, wrk and nginx (scripts/setup.sh). Leaves: the base
# state (nginx stopped, `chain` removed).

CHAIN_PORT=8081

# chain_service W1 W2 W3: the `chain` service as an EXTRA_SERVICES item
chain_service() {
  local i=0 n w
  EXTRA_SERVICES="  - name: chain
    vip: $NH_VIP
    port: $CHAIN_PORT
    protocol: tcp
    health_check: {tcp: {check_port: $CHAIN_PORT}}
    backends:"
  for n in "${NH_NODES[@]}"; do
    i=$((i + 1))
    w=${!i}
    EXTRA_SERVICES+="
      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: $w}"
  done
}

# chain_nginx_start NODE: nginx on NODE's port 8081 (its own prefix, pid and
# logs under $NH_OUT/nginx-NODE); sets NH_BG_PID
chain_nginx_start() {
  local n=$1 dir=$NH_OUT/nginx-$1
  mkdir -p "$dir/tmp"
  cat >"$dir/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  log_format chain '\$msec \$remote_addr \$remote_port \$connection_requests';
  server {
    listen $CHAIN_PORT;
    keepalive_timeout 300s;
    keepalive_requests 10000000;
    access_log $dir/access.log chain buffer=64k flush=1s;
    location / { return 200 "$n\n"; }
  }
}
NGINX
  nh_bg "nginx $n" "$dir/stdout.log" "$n" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
}

chain_drops() {
  local f s=0
  for f in "$@"; do s=$((s + $(counter tc_drop_unknown_flow "$f"))); done
  echo "$s"
}

# chain_phase N: one run of wrk through 20 weight changes with
# previous_owners N; sets CHAIN_STALLED and appends to nums
chain_phase() {
  local prev=$1 k t0 tend w res before=() after=() n lens wpid delay=${NH_CHAIN_DELAY_MS:-50} pids=()
  local weights=("3 1 1" "1 3 1" "1 1 3")
  CHAIN_STALLED=""
  # nginx afresh per phase: the previous phase's stalled connections still
  # hold server sockets that would answer this phase's reused client ports.
  for n in "${NH_NODES[@]}"; do
    rm -f "$NH_OUT/nginx-$n/access.log" "$NH_OUT/nginx-$n/nginx.pid"
    chain_nginx_start "$n"
    pids+=("$NH_BG_PID")
  done
  if ! nh_wait_until 10 test -s "$NH_OUT/nginx-node3/nginx.pid"; then
    echo "  (N=$prev) nginx did not start: $(tail -n 3 "$NH_OUT/nginx-node3/error.log" 2>/dev/null | tr '\n' ' ')"
  fi
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  RB_PREVIOUS_OWNERS=$prev
  # A fresh table for the phase: `chain` removed, then added with 1:1:1.
  EXTRA_SERVICES=""
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  for n in "${NH_NODES[@]}"; do wait_reload "$n" 5 >/dev/null || echo "  (N=$prev) $n did not reload"; done
  chain_service 1 1 1
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  if ! nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" \
    "settled(1) and all(x['health'] == 'up' for x in svc['backends']) and svc.get('previous_owners') == $prev" \
    --service chain --timeout 15 >"$NH_OUT/chain-wait.out" 2>&1; then
    echo "  (N=$prev) service chain not settled and up on node1 within 15 s: $(tr '\n' ' ' <"$NH_OUT/chain-wait.out")"
    return 1
  fi
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-chain$prev-0.json"; before+=("$NH_OUT/stats-$n-chain$prev-0.json"); done
  printf 'function delay()\n  return %d\nend\n' "$delay" >"$NH_OUT/chain-delay.lua"
  t0=$(nh_now)
  nh_bg "wrk (chain N=$prev)" "$NH_OUT/wrk-chain$prev.log" client \
    wrk -t2 -c100 -d28s --timeout 30s -s "$NH_OUT/chain-delay.lua" "http://$NH_VIP:$CHAIN_PORT/"
  wpid=$NH_BG_PID
  sleep 2
  # Changes while wrk runs only (on a loaded machine 20 reloads can take
  # longer than wrk's 28 s: the later ones would be measured by nothing).
  local changes=0
  for ((k = 0; k < 20; k++)); do
    nh_not_alive "$wpid" && break
    w=${weights[k % 3]}
    # shellcheck disable=SC2086 # three weights
    chain_service $w
    write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
    hup_all
    changes=$((k + 1))
    sleep 1
  done
  if ! nh_wait_until 15 nh_not_alive "$wpid"; then echo "  (N=$prev) wrk still running; stopping it"; fi
  nh_stop "$wpid" TERM 3
  # The stall window ends with wrk's 28 s, not with this loop: a
  # connection is stalled when it had no request in wrk's last 3 s.
  tend=$(nh_calc "$t0 + 28")
  echo "  (N=$prev) $changes weight changes during wrk's 28 s"
  local few=0
  if ((changes < 10)); then
    echo "  (N=$prev) fewer than 10 weight changes while wrk ran: the machine is too loaded for this phase"
    few=1
  fi
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-chain$prev-1.json"; after+=("$NH_OUT/stats-$n-chain$prev-1.json"); done
  for n in "${pids[@]}"; do nh_stop "$n" QUIT 5; done # QUIT: nginx writes its buffered log
  res=$("$NH_PY" "$HERE/chain.py" stalled --client "${NH_CLIENT_IP:-10.77.0.2}" --since "$t0" --end "$tend" --quiet 3 \
    "$NH_OUT"/nginx-node*/access.log)
  lens=$(st get "$(state_of node1)" "svc.get('chain_lengths')" --service chain 2>/dev/null)
  CHAIN_STALLED=$(json - 'd["stalled"]' <<<"$res")
  echo "  (N=$prev) wrk: $(grep -E 'requests in|Socket errors' "$NH_OUT/wrk-chain$prev.log" | tr -s ' ' | tr '\n' ';')"
  echo "  (N=$prev) connections: $res"
  echo "  (N=$prev) tc_drop_unknown_flow +$(($(chain_drops "${after[@]}") - $(chain_drops "${before[@]}"))) over the nodes; node1's buckets by previous owners listed: $lens"
  nums+="previous_owners $prev: stalled $CHAIN_STALLED of $(json - 'd["connections"]' <<<"$res") in $changes changes, tc_drop_unknown_flow +$(($(chain_drops "${after[@]}") - $(chain_drops "${before[@]}"))); "
  return $few
}

# chain_streams N SPORT_BASE: 30 held connections sending every second through
# 5 moves of their bucket with previous_owners N; sets STREAMS_OK (1: all
# answered, none reset or failed, and at least 20 buckets moved 5 times) and
# appends to nums
chain_streams() {
  local prev=$1 base=$2 k w sp first okc resets fails rounds done5=0 changes=0 dist
  local weights=("3 1 1" "1 3 1" "1 1 3") until=$NH_OUT/hold-streams$1.until
  local -A last=() moves=()
  STREAMS_OK=0
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  RB_PREVIOUS_OWNERS=$prev
  EXTRA_SERVICES=""
  write_config "${BASE_WEIGHTS[@]}"
  hup_all
  wait_reload node1 5 >/dev/null || echo "  (streams N=$prev) node1 did not reload"
  if ! nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "settled(1) and svc.get('previous_owners') == $prev"     --timeout 15 >"$NH_OUT/streams-wait.out" 2>&1; then
    echo "  (streams N=$prev) web not settled with previous_owners $prev: $(tr '\n' ' ' <"$NH_OUT/streams-wait.out")"
    return 1
  fi
  hold_bg "streams$prev" --count 30 --sport-base "$base" --rounds 100000 --interval 1 --timeout 2 \
    --max-seconds 110 --until "$until"
  if [[ ! -s $HOLD_STATE ]]; then
    echo "  (streams N=$prev) the hold client did not open its connections"
    hold_finish 5
    return 1
  fi
  while read -r sp _ first _; do last[$sp]=$first moves[$sp]=0; done < <(
    "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$HOLD_STATE" --live "${PIN_DIR[node1]}" --hops 2>/dev/null)
  touch "$HOLD_GO"
  for ((k = 0; k < 36 && done5 < ${#last[@]}; k++)); do
    w=${weights[k % 3]}
    # shellcheck disable=SC2086 # three weights
    write_config $w
    hup_all
    changes=$((changes + 1))
    sleep 1.2
    done5=0
    while read -r sp _ first _; do
      [[ -n ${last[$sp]:-} ]] || continue
      if [[ $first != "${last[$sp]}" ]]; then
        moves[$sp]=$((moves[$sp] + 1))
        last[$sp]=$first
      fi
      ((moves[$sp] >= 5)) && done5=$((done5 + 1))
    done < <("$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$HOLD_STATE" --live "${PIN_DIR[node1]}" \
      --hops 2>/dev/null)
  done
  touch "$until"
  hold_finish 40
  dist=$(for sp in "${!moves[@]}"; do echo "${moves[$sp]}"; done | sort -n | uniq -c | awk '{ printf "%s%sx%d", (NR > 1 ? ", " : ""), $1, $2 }')
  if ! hold_read; then
    echo "  (streams N=$prev) the hold client left no result"
    nums+="streams previous_owners $prev: no result; "
    return 1
  fi
  echo "  (streams N=$prev) $changes weight changes; moves of the 30 buckets (connections x moves): $dist; 5 or more: $done5"
  echo "  (streams N=$prev) held connections: ok $okc of 30 over $rounds rounds, resets $resets, failures $fails"
  nums+="streams previous_owners $prev: $done5/30 buckets moved >= 5 times in $changes changes, held ok $okc/30, resets $resets, failures $fails; "
  [[ $okc == 30 && $resets == 0 && $fails == 0 && $done5 -ge 20 ]] && STREAMS_OK=1
  return 0
}

scenario_chain() {
  local nums="" ok=1 n s1 s3
  header "(chain) 100 keep-alive connections (wrk -> nginx) through 20 weight changes 1 s apart: previous_owners 1 vs 3"
  for n in wrk nginx; do
    if ! command -v "$n" >/dev/null; then
      fail chain "$n is not installed (scripts/setup.sh installs it)"
      return
    fi
  done
  need_base chain || return
  chain_phase 1 || ok=0
  s1=$CHAIN_STALLED
  chain_phase 3 || ok=0
  s3=$CHAIN_STALLED
  chain_streams 1 62000 || ok=0
  chain_streams 3 62100 || ok=0
  ((STREAMS_OK)) || ok=0
  EXTRA_SERVICES=""
  leave_base
  [[ $s3 == 0 && -n $s1 ]] || ok=0
  if ((ok)); then pass chain "$nums"; else fail chain "$nums"; fi
}
