# shellcheck shell=bash
# scenario-order: 160
# (quic) QUIC-LB with a real QUIC stack: examples/quic_server (quinn, issuing
# QUIC-LB connection IDs with nilb's library, server IDs from nilb's own file) on
# every node, bound to VIP:443, and examples/quic_client in the client namespace;
# a service `quic` (UDP 443, weights as web, quic_lb plaintext, server IDs assigned
# from the addresses, no health check). Phases:
#  (a) 120 short downloads from 120 source ports: every one completes, spread
#      over the backends by weight (node3, weight 2, gets the most, each node some);
#  (b) 6 paced 3 MB downloads whose client rebinds its socket (a new port) twice
#      mid-transfer: every one completes on the server it started on; then the same
#      with quic_lb removed from the service: downloads fail (the failure QUIC-LB
#      prevents);
#  (c) 9 paced downloads while the weights change (3:1:1) and node3 is drained,
#      with pacing off (buckets move at once): 0 failed;
#  (d) 3 paced downloads with rebinds while node1's nilb is killed (SIGKILL) and
#      restarted on its pins: every one completes.
# Prints node1's xdp_quic_* counters per phase. Needs: the base state and the
# example binaries next to nilb (cargo build --release --examples). Leaves: the
# base state (service removed, servers stopped, node1's nilb restarted normally).

QUIC_PORT=443
declare -A QUIC_PID=()
QUIC_LB_YAML="{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}"
QUIC_ON=1

# quic_bin NAME: path of an example binary (next to the nilb binary given, else
# in the repository's target/release/examples)
quic_bin() {
  local d
  for d in "$(dirname "$NILB_SRC")/examples" "$REPO/target/release/examples"; do
    [[ -x $d/$1 ]] && { echo "$d/$1"; return 0; }
  done
  return 1
}
quic_services_yaml() {
  local n s
  s="  - name: quic"$'\n'"    vip: $NH_VIP"$'\n'"    port: $QUIC_PORT"$'\n'"    protocol: udp"
  s+=$'\n'"    health_check: {none: {}}"
  ((QUIC_ON)) && s+=$'\n'"    quic_lb: $QUIC_LB_YAML"
  s+=$'\n'"    backends:"
  for n in "${NH_NODES[@]}"; do
    s+=$'\n'"      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: ${WEIGHT[$n]}${BSTATE[$n]:+, state: ${BSTATE[$n]}}}"
  done
  printf '%s' "$s"
}
quic_write_config() {
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  EXTRA_SERVICES=$(quic_services_yaml)
  write_config "$@"
}
# quic_start NODE: the QUIC server on NODE (its server ID from nilb's file)
quic_start() {
  local log=$NH_OUT/quic-$1-$SECONDS.log
  nh_bg "quic server $1" "$log" "$1" "$QUIC_SERVER" --listen "$NH_VIP:$QUIC_PORT" --name "$1" \
    --nilb-config "$CFG" --service quic --dip "${NH_NODE_IP[$1]}"
  QUIC_PID[$1]=$NH_BG_PID
  nh_wait_until 10 grep -q 'listening on' "$log" && echo "  $1: $(grep -m 1 'listening on' "$log")"
}
quic_stop() { [[ -n ${QUIC_PID[$1]:-} ]] && nh_stop "${QUIC_PID[$1]}" TERM 3; unset "QUIC_PID[$1]"; }
# quic_client OUT ARGS...: the client in the client namespace, JSON into OUT
quic_client() {
  local out=$1
  shift
  nh_fg client timeout 120 "$QUIC_CLIENT" --server "$NH_VIP:$QUIC_PORT" "$@" >"$out" 2>"$out.err"
}
quic_client_bg() {
  local out=$1
  shift
  # (stderr apart: stdout is the JSON document)
  # shellcheck disable=SC2016 # expanded by the inner bash
  nh_bg "quic client" "$out" client bash -c 'exec timeout 120 "$@" 2>"$0"' "$out.err" \
    "$QUIC_CLIENT" --server "$NH_VIP:$QUIC_PORT" "$@"
  QUIC_CLIENT_PID=$NH_BG_PID
}
# quic_summary FILE: "complete/count, failed F, by server {...}, errors {...}"
quic_summary() {
  json "$1" '"%d/%d complete, %d failed, rebinds %d, by server %s, errors %s" % (d["complete"], d["count"], d["failed"], d["rebinds"], json.dumps(d["by_server"], sort_keys=True), json.dumps(d["errors"])[:200])'
}
quic_counters() { counters_matching node1 'xdp_quic'; }
# quic_wait_table TIMEOUT EXPR: node1's state of service quic
quic_wait() {
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "$2" --timeout "$1" --service quic >"$NH_OUT/wait.out" 2>&1
  local rc=$?
  WAIT_SUMMARY=$(json "$NH_OUT/wait.out" 'd["summary"]')
  return "$rc"
}

scenario_quic() {
  local nums="" ok=1 n res c1 c2 f t0 pid
  header "(quic) QUIC-LB with quinn: spread by weight, rebinding clients, weight change + drain, kill -9 of nilb"
  need_base quic || return
  if ! QUIC_SERVER=$(quic_bin quic_server) || ! QUIC_CLIENT=$(quic_bin quic_client); then
    fail quic "examples/quic_server and quic_client not built (cargo build --release --examples)"
    return
  fi
  QUIC_ON=1
  quic_write_config "${BASE_WEIGHTS[@]}"
  nilb_check || ok=0
  "$NILB" check --config "$CFG" 2>&1 | grep -E 'quic_lb|server_id' | sed 's/^/  check: /'
  hup_all
  for n in "${NH_NODES[@]}"; do wait_reload "$n" 5 >/dev/null || { ok=0; echo "  $n did not reload"; }; done
  if quic_wait 15 "settled(1)"; then echo "  service quic installed: $WAIT_SUMMARY"; else echo "  service quic not settled: $WAIT_SUMMARY"; ok=0; fi
  for n in "${NH_NODES[@]}"; do quic_start "$n" || { ok=0; nums+="quic server on $n did not start; "; }; done

  # (a) spread by weight
  res=$NH_OUT/quic-a.json
  quic_client "$res" --count 120 --concurrency 8 --bytes 20000 --sport-base 47000 --timeout-s 20
  echo "  (a) 120 downloads: $(quic_summary "$res"); node1 $(quic_counters)"
  c1=$(json "$res" 'd["complete"]')
  f=$(json "$res" 'int(d["by_server"].get("node3", 0) > max(d["by_server"].get("node1", 0), d["by_server"].get("node2", 0)) and min(d["by_server"].get("node1", 0), d["by_server"].get("node2", 0), d["by_server"].get("node3", 0)) > 0)')
  [[ $c1 == 120 && $f == 1 ]] || ok=0
  nums+="(a) $(json "$res" '"%d/120 complete, by server %s" % (d["complete"], json.dumps(d["by_server"], sort_keys=True))') (weights $(weights_ratio)); "

  # (b) rebinding clients, quic_lb on, then off
  res=$NH_OUT/quic-b-on.json
  quic_client "$res" --count 6 --concurrency 6 --bytes 3000000 --rate-kbit 8000 --rebind-after 1000000 --rebinds 2 --sport-base 48000 --timeout-s 30
  echo "  (b) quic_lb on, 6 downloads with 2 rebinds each: $(quic_summary "$res"); node1 $(quic_counters)"
  for n in "${NH_NODES[@]}"; do
    grep -h '"served"' "$NH_OUT"/quic-"$n"-*.log 2>/dev/null | tail -n 6 | grep -v '"migrations":0' | head -n 2 | sed "s/^/    $n: /"
  done
  c1=$(json "$res" 'd["complete"]')
  [[ $c1 == 6 && $(json "$res" 'd["rebinds"]') -ge 12 ]] || ok=0
  QUIC_ON=0
  quic_write_config "${BASE_WEIGHTS[@]}"
  hup_all
  wait_reload node1 5 >/dev/null || { ok=0; echo "  node1 did not reload"; }
  res=$NH_OUT/quic-b-off.json
  quic_client "$res" --count 6 --concurrency 6 --bytes 3000000 --rate-kbit 8000 --rebind-after 1000000 --rebinds 2 --sport-base 48100 --timeout-s 30 --idle-timeout-ms 3000
  echo "  (b) quic_lb OFF, the same downloads: $(quic_summary "$res")"
  c2=$(json "$res" 'd["failed"]')
  [[ ${c2:-0} -gt 0 ]] || ok=0
  nums+="(b) rebinding: quic_lb on $c1/6 complete, off ${c2:-?}/6 failed; "
  QUIC_ON=1
  quic_write_config "${BASE_WEIGHTS[@]}"
  hup_all
  wait_reload node1 5 >/dev/null || { ok=0; echo "  node1 did not reload"; }

  # (c) weight change and drain during transfers, buckets move at once
  res=$NH_OUT/quic-c.json
  quic_client_bg "$res" --count 9 --concurrency 9 --bytes 4000000 --rate-kbit 6000 --sport-base 49000 --timeout-s 40
  sleep 1.5
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  RB_MAX_STEP_PERCENT=100
  quic_write_config 3 1 1
  hup_all
  sleep 1.5
  BSTATE["node3"]=drained
  quic_write_config 3 1 1
  hup_all
  if quic_wait 10 "b['node3']['buckets'] == 0 and svc['pending_moves'] == 0"; then
    echo "  (c) weights 3:1:1 and node3 drained during the downloads: $WAIT_SUMMARY"
  else
    echo "  (c) table did not follow: $WAIT_SUMMARY"; ok=0
  fi
  nh_wait_until 60 nh_not_alive "$QUIC_CLIENT_PID"
  nh_stop "$QUIC_CLIENT_PID" TERM 2
  echo "  (c) 9 downloads across the changes: $(quic_summary "$res"); node1 $(quic_counters)"
  c1=$(json "$res" 'd["failed"]')
  [[ $c1 == 0 && $(json "$res" 'd["complete"]') == 9 ]] || ok=0
  nums+="(c) weight change + drain: $(json "$res" 'd["complete"]')/9 complete, ${c1:-?} failed; "
  unset "BSTATE[node3]"
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  RB_MAX_STEP_PERCENT=$RB_BASE_MAX_STEP_PERCENT
  quic_write_config "${BASE_WEIGHTS[@]}"
  hup_all
  quic_wait 15 "settled(1)" || { echo "  not settled after (c): $WAIT_SUMMARY"; ok=0; }

  # (d) kill -9 and restart of node1's nilb during transfers
  res=$NH_OUT/quic-d.json
  quic_client_bg "$res" --count 3 --concurrency 3 --bytes 6000000 --rate-kbit 6000 --rebind-after 1500000 --rebinds 3 --sport-base 49500 --timeout-s 40
  sleep 1.5
  pid=${NILB_PID[node1]}
  nh_stop "$pid" KILL 5
  t0=$(nh_now)
  echo "  (d) SIGKILL to node1's nilb (pid $pid, exit status $NH_LAST_RC)"
  sleep 2
  retire_log node1 "quic-killed"
  start_nilb_on node1
  if wait_ready node1; then
    echo "  (d) nilb on node1 restarted and ready $(nh_calc "$(nh_now) - $t0")s after the kill: $(log_since node1 0 | grep -m 1 -o 'adopted the pinned maps' || echo 'not adopted')"
  else
    ok=0
  fi
  nh_wait_until 60 nh_not_alive "$QUIC_CLIENT_PID"
  nh_stop "$QUIC_CLIENT_PID" TERM 2
  echo "  (d) 3 downloads (3 rebinds each) across the kill and restart: $(quic_summary "$res"); node1 $(quic_counters)"
  c1=$(json "$res" 'd["complete"]')
  [[ $c1 == 3 ]] || ok=0
  nums+="(d) kill -9 + restart: ${c1:-?}/3 complete"

  for n in "${NH_NODES[@]}"; do quic_stop "$n"; done
  leave_base
  if ((ok)); then pass quic "$nums"; else fail quic "$nums"; fi
}
