# shellcheck shell=bash
# scenario-order: 200
# (nat) NAT mode: services on node1's own address, backends that hold no VIP.
# For the scenario node2 and node3 lose the VIP on lo and their ARP sysctls
# (restored at the end). Services: `natweb` TCP node1:8090 -> target_port 8091
# and `natdns` UDP node1:5390 -> 5391, both `mode: nat`, weights 1:1:2; on
# every node an HTTP server bound to the node's own address:8091 and a UDP
# server bound to its own address:5391 (nothing listens on node1:8090 or on
# any VIP). Checks:
#   1. 300 new connections to node1:8090 from distinct ports spread by weight
#      (chi-square as in a), and a capture on the client sees every TCP reply
#      from 10.77.0.11:8090 and 0 packets from node2's or node3's address;
#   2. 300 UDP queries to node1:5390: all answered, from node1:5390 only;
#   3. 30 held connections across a weight change (3:1:1) + SIGHUP: 0 resets,
#      each answered by its first backend;
#   4. 30 held connections across kill -9 + restart of nilb on node2 and
#      node1 (adoption of the pinned maps, nat_flows included): 0 resets;
#   5. node1's own services are untouched: HTTP to node1:80 from the client,
#      node1 -> node2:80 outgoing, ping of node1;
#   6. the NAT counters: flows created and translated both ways on node2 and
#      node3, no collision, no full table; the sweep removes the flows of
#      closed connections (nat flows on node2 fall after the connections end).
# Needs: the base state. Leaves: the base state (VIPs and sysctls restored,
# NAT services removed, their servers stopped).

NAT_IP=${NH_NODE_IP[node1]}
NAT_PORT=8090
NAT_TARGET=8091
NAT_UDP_PORT=5390
NAT_UDP_TARGET=5391
declare -A NAT_HTTP_PID=() NAT_UDP_PID=()

# nat_services_yaml: the two NAT services, backends as web's (weights, BSTATE)
nat_services_yaml() {
  local n s b=""
  for n in "${NH_NODES[@]}"; do
    b+=$'\n'"      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: ${WEIGHT[$n]}}"
  done
  s="  - name: natweb"$'\n'"    vip: $NAT_IP"$'\n'"    port: $NAT_PORT"$'\n'"    protocol: tcp"
  s+=$'\n'"    mode: nat"$'\n'"    target_port: $NAT_TARGET"
  s+=$'\n'"    health_check: {http: {uri: /healthz}}"$'\n'"    backends:$b"
  s+=$'\n'"  - name: natdns"$'\n'"    vip: $NAT_IP"$'\n'"    port: $NAT_UDP_PORT"$'\n'"    protocol: udp"
  s+=$'\n'"    mode: nat"$'\n'"    target_port: $NAT_UDP_TARGET"
  s+=$'\n'"    health_check: {tcp: {check_port: $NAT_TARGET}}"$'\n'"    backends:$b"
  printf '%s' "$s"
}
# nat_write_config W1 W2 W3: the config with both NAT services at these weights
nat_write_config() {
  local i=0 n
  for n in "${NH_NODES[@]}"; do
    i=$((i + 1))
    WEIGHT[$n]=${!i}
  done
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  EXTRA_SERVICES=$(nat_services_yaml)
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  CLUSTER_EXTRA="  nat: {max_flows: 65536, udp_timeout_ms: 3000}"
  write_config "$@"
}
# nat_flows NODE: "flows tcp udp" in NODE's nat_flows (nilb stats --json)
nat_flows() {
  nilb_stats "$1" --json >"$NH_OUT/stats-$1-natflows.json"
  json "$NH_OUT/stats-$1-natflows.json" '"%d %d %d" % (d["nat_flows"]["flows"], d["nat_flows"]["tcp"], d["nat_flows"]["udp"])'
}
# nat_wait TIMEOUT EXPR: node1's state of service natweb
nat_wait() {
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "$2" --timeout "$1" --service natweb >"$NH_OUT/wait.out" 2>&1
  local rc=$?
  WAIT_SUMMARY=$(json "$NH_OUT/wait.out" 'd["summary"]')
  return "$rc"
}
nat_settled() {
  local n e="weights() == '$(weights_ratio)' and settled(1)"
  for n in "${NH_NODES[@]}"; do e+=" and b['$n']['health'] == 'up'"; done
  echo "$e"
}
# nat_vips_off / nat_vips_on: node2 and node3 without (with) the VIP on lo and
# the ARP sysctls DSR needs
nat_vips_off() {
  local n
  for n in node2 node3; do
    ip -n "$(nh_ns "$n")" addr del "$NH_VIP/32" dev lo 2>/dev/null
    ip netns exec "$(nh_ns "$n")" sysctl -qw net.ipv4.conf.all.arp_ignore=0 net.ipv4.conf.all.arp_announce=0
  done
}
nat_vips_on() {
  local n
  for n in node2 node3; do
    ip -n "$(nh_ns "$n")" addr replace "$NH_VIP/32" dev lo
    ip netns exec "$(nh_ns "$n")" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
  done
}
nat_servers_start() {
  local n log
  for n in "${NH_NODES[@]}"; do
    log=$NH_OUT/nat-http-$n.log
    nh_bg "nat http $n" "$log" "$n" "$NH_PY" "$HERE/backend.py" --name "$n" --port "$NAT_TARGET" \
      --bind "${NH_NODE_IP[$n]}"
    NAT_HTTP_PID[$n]=$NH_BG_PID
    nh_wait_until 10 test_listening "$log" 1 || return 1
    log=$NH_OUT/nat-udp-$n.log
    nh_bg "nat udp $n" "$log" "$n" "$NH_PY" "$HERE/flows.py" udp-serve --name "$n" --vip "${NH_NODE_IP[$n]}" \
      --port "$NAT_UDP_TARGET"
    NAT_UDP_PID[$n]=$NH_BG_PID
    nh_wait_until 10 test_listening "$log" 1 || return 1
  done
}
nat_servers_stop() {
  local n
  for n in "${!NAT_HTTP_PID[@]}"; do nh_stop "${NAT_HTTP_PID[$n]}" TERM 3; done
  for n in "${!NAT_UDP_PID[@]}"; do nh_stop "${NAT_UDP_PID[$n]}" TERM 3; done
  NAT_HTTP_PID=() NAT_UDP_PID=()
}
# nat_hold LABEL SPORT_BASE: 30 held connections to node1:8090 (hold_bg)
nat_hold() {
  hold_bg "$1" --host "$NAT_IP" --port "$NAT_PORT" --count 30 --sport-base "$2" --rounds 3 --interval 0.3 \
    --max-seconds 30
}
# nat_hold_check LABEL: after hold_finish; appends to nums, clears ok on a loss
nat_hold_check() {
  local okc resets fails rounds
  if hold_read; then
    echo "  $1: $okc/30 ok after $rounds rounds, resets $resets, failures $fails"
    nums+="$1: $okc/30 ok, $resets resets; "
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    echo "  $1: the hold client left no result"
    nums+="$1: no result; "
    ok=0
  fi
}
# nat_counter NODE NAME: counter NAME of NODE now
nat_counter() {
  save_stats "$1" "$NH_OUT/stats-$1-nat.json"
  counter "$2" "$NH_OUT/stats-$1-nat.json"
}

scenario_nat() {
  local nums="" ok=1 n res pcap tlog tpid out from_svc from_nodes other ans t0 m fw0 fw1 f0 f1
  header "(nat) NAT mode: services on node1's own address ($NAT_IP), backends without the VIP"
  need_base nat || return
  nat_vips_off
  if ! nat_servers_start; then
    nat_servers_stop
    nat_vips_on
    fail nat "the NAT servers did not start"
    return
  fi
  nat_write_config "${BASE_WEIGHTS[@]}"
  nilb_check || ok=0
  hup_all
  t0=$HUP_T
  if nat_wait 20 "$(nat_settled)"; then
    echo "  natweb installed and settled $(nh_calc "$(nh_now) - $t0")s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  natweb did not settle: $WAIT_SUMMARY"
    ok=0
  fi
  for n in node2 node3; do wait_reload "$n" 5 >/dev/null || { ok=0; echo "  $n did not reload"; }; done

  # 1. distribution and the replies' source, captured on the client
  pcap=$NH_OUT/nat.pcap tlog=$NH_OUT/tcpdump-nat.log
  nh_bg "tcpdump on client (nat)" "$tlog" client timeout 90 tcpdump -i eth0 -nn -U --immediate-mode -Z root \
    -c 50000 -w "$pcap" "not arp and not host $NH_VIP"
  tpid=$NH_BG_PID
  nh_wait_until 10 grep -q 'listening on' "$tlog" || { ok=0; echo "  tcpdump did not start"; }
  res=$NH_OUT/burst-nat.json
  cl burst --host "$NAT_IP" --port "$NAT_PORT" --count 300 --sport-base 52000 \
    --max-seconds 25 --max-consecutive-failures 10 --out "$res"
  echo "  client (TCP, $NAT_IP:$NAT_PORT): $OUT"
  echo "  weights $(weights_ratio); chi-square goodness of fit, reject at p < 0.001"
  if "$NH_PY" "$HERE/dist.py" --result "$res" --weights "$(weights_str)" >"$NH_OUT/dist-nat.txt"; then
    nums+="spread $(tail -n 1 "$NH_OUT/dist-nat.txt" | sed 's/^SUMMARY [^ ]* //'); "
  else
    ok=0
    nums+="spread REJECTED $(tail -n 1 "$NH_OUT/dist-nat.txt" | sed 's/^SUMMARY [^ ]* //'); "
  fi
  sed '$d' "$NH_OUT/dist-nat.txt"

  # 2. UDP through the NAT service
  out=$(nh_fg client timeout 30 "$NH_PY" "$HERE/flows.py" udp-burst --host "$NAT_IP" --port "$NAT_UDP_PORT" \
    --count 300 --sport-base 53000 --timeout 1.5 --out "$NH_OUT/nat-udp.json")
  echo "  UDP ($NAT_IP:$NAT_UDP_PORT): answers $(json - 'json.dumps(d["by_backend"], sort_keys=True)' <<<"$out"), lost $(json - 'd["lost"]' <<<"$out")"
  [[ $(json - 'd["lost"]' <<<"$out") == 0 ]] || ok=0
  nums+="udp lost $(json - 'd["lost"]' <<<"$out")/300; "
  sleep 0.5
  nh_stop "$tpid" TERM 5
  from_svc=$(tcpdump -nn -r "$pcap" "src host $NAT_IP and (src port $NAT_PORT or src port $NAT_UDP_PORT)" 2>/dev/null | wc -l)
  from_nodes=$(tcpdump -nn -r "$pcap" "src host ${NH_NODE_IP[node2]} or src host ${NH_NODE_IP[node3]}" 2>/dev/null | wc -l)
  other=$(tcpdump -nn -r "$pcap" "src host $NAT_IP and not (src port $NAT_PORT or src port $NAT_UDP_PORT)" 2>/dev/null | wc -l)
  echo "  client capture: $from_svc packets from $NAT_IP:$NAT_PORT/$NAT_UDP_PORT (the services), $from_nodes from node2's or node3's own address, $other from node1's other ports"
  nums+="client saw $from_svc replies from the service address, $from_nodes from backends' addresses; "
  [[ $from_svc -gt 600 && $from_nodes == 0 && $other == 0 ]] || ok=0

  # 3. weight change with 30 held connections
  if nat_hold change 54000; then
    echo "  held: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])')"
    fw0=$(nat_counter node1 tc_forward)
    nat_write_config 3 1 1
    hup_all
    nat_wait 15 "$(nat_settled)" || { echo "  natweb did not settle on 3:1:1: $WAIT_SUMMARY"; ok=0; }
    touch "$HOLD_GO"
    hold_finish 40
    fw1=$(nat_counter node1 tc_forward)
    echo "  node1 (new first hop of moved buckets) passed $((fw1 - fw0)) packets of held connections on to their backend (tc_forward)"
    [[ $((fw1 - fw0)) -gt 0 ]] || { ok=0; nums+="no second-chance forward seen; "; }
    nat_hold_check "weight change 1:1:2 -> 3:1:1"
  else
    ok=0
    nums+="weight change: hold client did not start; "
  fi
  nat_write_config "${BASE_WEIGHTS[@]}"
  hup_all
  nat_wait 15 "$(nat_settled)" || ok=0

  # 4. kill -9 and restart of node2's and node1's nilb with 30 held connections
  if nat_hold restart 55000; then
    for n in node2 node1; do
      nh_stop "${NILB_PID[$n]}" KILL 5
      sleep 1
      start_nilb_on "$n"
      if wait_ready "$n"; then
        m=$(log_since "$n" 0 | grep -c 'adopted the pinned maps')
        echo "  $n: nilb killed (-9) and started again; adopted the pinned maps: $m"
        [[ $m -ge 1 ]] || ok=0
      else
        ok=0
        echo "  $n: nilb not ready after the restart"
      fi
    done
    nat_wait 15 "$(nat_settled)" || ok=0
    touch "$HOLD_GO"
    hold_finish 40
    nat_hold_check "kill -9 + restart (node2, node1)"
  else
    ok=0
    nums+="restart: hold client did not start; "
  fi

  # 5. node1's own services: port 80 of its address, its outgoing connections, ping
  ans=$(cl burst --host "$NAT_IP" --port 80 --count 10 --sport-base 56000 --max-seconds 10 >/dev/null; json - 'd["ok"]' <<<"$OUT")
  echo "  client -> node1:80 (direct, node1's own service): $ans/10 ok"
  [[ $ans == 10 ]] || ok=0
  if nh_fg node1 timeout 5 "$NH_PY" -c "import urllib.request,sys; sys.exit(0 if b'node2' in urllib.request.urlopen('http://${NH_NODE_IP[node2]}/', timeout=3).read() else 1)"; then
    echo "  node1 -> node2:80 (outgoing): ok"
  else
    echo "  node1 -> node2:80 (outgoing): FAILED"
    ok=0
  fi
  if nh_fg client ping -c 2 -W 1 -q "$NAT_IP" >/dev/null; then echo "  ping node1: ok"; else echo "  ping node1: FAILED"; ok=0; fi
  nums+="node1:80 direct $ans/10; "

  # 6. counters and the sweep
  local c2 c3 col full
  for n in node2 node3; do
    echo "  $n NAT counters: new $(nat_counter "$n" nat_new_flow), in $(nat_counter "$n" nat_in), out $(nat_counter "$n" nat_out), collision $(nat_counter "$n" nat_drop_collision), full $(nat_counter "$n" nat_drop_table_full)"
  done
  c2=$(nat_counter node2 nat_out)
  c3=$(nat_counter node3 nat_out)
  col=$(($(nat_counter node2 nat_drop_collision) + $(nat_counter node3 nat_drop_collision) + $(nat_counter node1 nat_drop_collision)))
  full=$(($(nat_counter node2 nat_drop_table_full) + $(nat_counter node3 nat_drop_table_full)))
  [[ $c2 -gt 0 && $c3 -gt 0 && $col == 0 && $full == 0 ]] || ok=0
  nums+="nat_out node2 $c2 node3 $c3, collisions $col, full $full; "
  # the sweep: the entries of connections that ended (TIME_WAIT included) go
  # at the next sweep (every 5 s), UDP ones 3 s (udp_timeout_ms) after their
  # last packet. 12 s after the client's last packet none of its flows may
  # be left (node1's encapsulated checks keep making short-lived ones:
  # not counted).
  f0="$(nat_flows node2) / $(nat_flows node3)"
  sleep 12
  local left swept=1 line=""
  for n in node2 node3; do
    left=$(bpftool -j map dump pinned "${PIN_DIR[$n]}/nat_flows" 2>/dev/null | "$NH_PY" -c '
import json, socket, struct, sys
c = sys.argv[1]
entries = json.load(sys.stdin) or []
# with BTF, bpftool -j puts the decoded entry under "formatted"
keys = [e.get("formatted", e)["key"] for e in entries]
print(sum(1 for k in keys if socket.inet_ntoa(struct.pack("<I", k["client"])) == c))
' "$NH_CLIENT_IP")
    line+="$n: ${left:-?} flows of the client left ($(nat_flows "$n") in all); "
    if [[ $left != 0 ]]; then
      swept=0
      bpftool map dump pinned "${PIN_DIR[$n]}/nat_flows" 2>&1 | head -n 40 | sed 's/^/    /'
    fi
  done
  echo "  nat_flows (flows tcp udp) node2 / node3: $f0 at the end; 12 s later: $line"
  nums+="flows $f0 -> $line"
  ((swept)) || ok=0
  nat_servers_stop
  nat_vips_on
  leave_base
  if ((ok)); then pass nat "$nums"; else fail nat "$nums"; fi
}
