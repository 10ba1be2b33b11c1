# shellcheck shell=bash
# scenario-order: 370
# (ecmp) several balancers behind a router: a router namespace (10.77.0.1 on the
# switch) runs BIRD with one eBGP session per node and installs the VIP as an
# ECMP multipath route (`merge paths`, L4 hash); every node runs BIRD too and
# nilb is a balancer on all three with `routing:` (it writes its BIRD's routes
# file and runs `birdc configure`). The client's route to the VIP goes via the
# router. Checks: every balancer announces the VIP (router: 3 next hops), 300
# new connections from distinct source ports are spread over the balancers by
# the router and over the backends by weight (chi-square as in (a)), and the
# live tables of the three balancers are identical bucket for bucket (they share
# them through etcd, started by the harness: one leader, two followers). Then,
# with `withdraw_on_fail_open`, every backend's server stopped: all balancers
# withdraw (the router has no route), and announce again once they are back.
# Then
# SIGTERM to node3's nilb: the router drops node3 before nilb exits (0), and
# once node1 and node2 took node3 out as a backend (its TC program is gone), 100
# new connections succeed over node1 and node2.
# Needs: bird2 (scripts/setup.sh). Leaves: the base state (ecmp_down: routing
# removed from the config, BIRD stopped, the client's route back via node1).

# BIRD timers of the harness: short so that the kill cases finish quickly
# (deploy/ uses hold 9 s).
ECMP_HOLD=${NH_ECMP_HOLD:-3}
ECMP_ROUTER_IP=10.77.0.1
ECMP_UP=0
declare -A BIRD_PID=()
# etcd: one member in a namespace of its own on the switch, started by the
# harness; every balancer shares its tables through it (`cluster.etcd`): the
# elected leader publishes, the others follow. Its data lies on a tmpfs
# (/dev/shm) when there is one: the harness tests nilb, not etcd's
# durability, and in stop 30's CI etcd answered nobody for 1.3 s, logging
# nothing, as a WAL fsync on this machine's shared disk can make it
# (ecmp-churn's followers waited that long for the leader's publish).
ECMP_ETCD_IP=10.77.0.5
ECMP_ETCD_URL=http://$ECMP_ETCD_IP:2379
ETCD_PID=""

ECMP_ETCD_DIR=""

# ecmp_etcd_start [KEEP]: etcd in its namespace (created once), data in
# ECMP_ETCD_DIR (/dev/shm/nilb-harness-PREFIX-etcd, removed at cleanup; or
# $NH_OUT/etcd without a tmpfs), wiped first unless KEEP (a restart keeps
# what was published); its log in $NH_OUT/etcd.log, a restart's in
# etcd-restarted.log (the first one's lines stay for window-logs); waits until
# it answers
ecmp_etcd_start() {
  local et log=$NH_OUT/etcd${1:+-restarted}.log
  command -v etcd >/dev/null || { ECMP_WHY="etcd not installed (scripts/setup.sh: etcd-server)"; return 1; }
  et=$(nh_ns etcd)
  if [[ ! -e /run/netns/$et ]]; then
    nh_netns_add etcd || return 1
    nh_run ip -n "$(nh_ns sw)" link add to-etcd mtu "$NH_NODE_MTU" type veth peer name eth0 mtu "$NH_NODE_MTU" netns "$et" || return 1
    nh_run ip -n "$(nh_ns sw)" link set to-etcd master br0 || return 1
    nh_run ip -n "$(nh_ns sw)" link set to-etcd up || return 1
    nh_run ip -n "$et" addr add "$ECMP_ETCD_IP/$NH_PREFIX_LEN" dev eth0 || return 1
    nh_run ip -n "$et" link set eth0 up || return 1
    nh_run ip -n "$et" link set lo up || return 1
  fi
  [[ -n $ETCD_PID ]] && nh_alive "$ETCD_PID" && return 0
  if [[ -z $ECMP_ETCD_DIR ]]; then
    if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]]; then
      ECMP_ETCD_DIR=/dev/shm/nilb-harness-$NH_PREFIX-etcd
      NH_TMPDIRS+=("$ECMP_ETCD_DIR")
    else
      ECMP_ETCD_DIR=$NH_OUT/etcd
    fi
  fi
  [[ -n ${1:-} ]] || rm -rf "$ECMP_ETCD_DIR"
  nh_bg "etcd" "$log" etcd etcd --name nh --data-dir "$ECMP_ETCD_DIR" \
    --listen-client-urls "$ECMP_ETCD_URL" --advertise-client-urls "$ECMP_ETCD_URL" \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster nh=http://127.0.0.1:2380
  ETCD_PID=$NH_BG_PID
  if ! nh_wait_until 15 ecmp_etcd_answers; then
    ECMP_WHY="etcd does not answer on $ECMP_ETCD_URL after 15 s: $(tail -n 3 "$log" | tr '\n' ' ')"
    return 1
  fi
}

ecmp_etcd_answers() {
  ip netns exec "$(nh_ns etcd)" curl -s -m 1 -X POST "$ECMP_ETCD_URL/v3/kv/range" -d '{"key":"AA=="}' 2>/dev/null | grep -q revision
}

# ecmp_etcd_stop: etcd stopped (SIGTERM)
ecmp_etcd_stop() {
  [[ -n $ETCD_PID ]] && nh_stop "$ETCD_PID" TERM 10
  ETCD_PID=""
}

# ecmp_roles: every node's cluster role, e.g. "leader follower follower"
ecmp_roles() {
  local n out=""
  for n in "${NH_NODES[@]}"; do
    out+="${out:+ }$(st get "$(state_of "$n")" "(d.get('cluster') or {}).get('role', '-')" 2>/dev/null)"
  done
  echo "$out"
}

# ecmp_one_leader: one leader, every other node a follower, all connected
ecmp_one_leader() {
  local r
  r=$(ecmp_roles)
  [[ $(grep -o leader <<<"$r" | wc -l) == 1 && $(grep -o follower <<<"$r" | wc -l) == $((${#NH_NODES[@]} - 1)) ]]
}

# ecmp_bird_conf NODE: BIRD's config for a balancer (the same shape as
# deploy/bird-balancer.conf)
ecmp_bird_conf() {
  local n=$1 ip=${NH_NODE_IP[$1]}
  cat <<EOF
router id $ip;
log "$NH_OUT/bird-$n.log" all;
protocol device {}
protocol static nilb_vips {
  ipv4;
include "$NH_OUT/bird-routes-$ip.conf";
}
protocol bgp uplink {
  local $ip as 65001;
  neighbor $ECMP_ROUTER_IP as 65000;
  hold time $ECMP_HOLD; keepalive time 1; connect retry time 1;
  ipv4 { import none; export where proto = "nilb_vips"; };
}
EOF
}

ecmp_router_conf() {
  local n
  cat <<EOF
router id $ECMP_ROUTER_IP;
log "$NH_OUT/bird-router.log" all;
protocol device {}
protocol kernel {
  merge paths on;
  ipv4 { import none; export all; };
}
EOF
  for n in "${NH_NODES[@]}"; do
    cat <<EOF
protocol bgp $n {
  local $ECMP_ROUTER_IP as 65000;
  neighbor ${NH_NODE_IP[$n]} as 65001;
  hold time $ECMP_HOLD; keepalive time 1; connect retry time 1;
  ipv4 { import all; export none; };
}
EOF
  done
}

# ecmp_start_bird ROLE: BIRD in ROLE's namespace, in the foreground (tracked);
# a node's control socket is named by its address (nilb's `{node}`)
ecmp_start_bird() {
  local r=$1 sock=$1
  [[ $r != rt ]] && sock=${NH_NODE_IP[$r]}
  nh_bg "bird on $r" "$NH_OUT/bird-$r.out" "$r" bird -f -c "$NH_OUT/bird-$r.conf" \
    -s "$NH_OUT/bird-$sock.ctl" -P "$NH_OUT/bird-$r.pid"
  BIRD_PID[$r]=$NH_BG_PID
}

# ecmp_sessions_up: the router's BGP session to every node is Established
ecmp_sessions_up() {
  [[ $(birdc -s "$NH_OUT/bird-rt.ctl" show protocols 2>/dev/null | grep -c 'BGP .* Established') == "${#NH_NODES[@]}" ]]
}

# ecmp_routing_yaml: the `routing:` block of the config
# shellcheck disable=SC2034 # read by write_config (harness.sh)
ecmp_routing_yaml() {
  ROUTING_YAML="routing:
  bird_socket: \"$NH_OUT/bird-{node}.ctl\"
  routes_file: \"$NH_OUT/bird-routes-{node}.conf\"
  drain_file: \"$NH_OUT/drain-{node}\"
  withdraw_grace_ms: ${NH_ECMP_GRACE_MS:-1000}"
  local n b=""
  for n in "${NH_NODES[@]}"; do b+="${b:+, }${NH_NODE_IP[$n]}"; done
  BALANCERS=$b
}

# ecmp_up: router namespace, BIRD everywhere (BGP sessions established first),
# config with every node a balancer and `routing:`, SIGHUP; waits until the
# router has a next hop per node. Sets ECMP_T_ROUTES (seconds from SIGHUP to 3
# next hops: node2/node3 first need rise_count checks as new balancers).
ecmp_up() {
  local n rt
  command -v bird >/dev/null || { ECMP_WHY="bird not installed (scripts/setup.sh)"; return 1; }
  rt=$(nh_ns rt)
  if [[ ! -e /run/netns/$rt ]]; then
    nh_netns_add rt || return 1
    nh_run ip -n "$(nh_ns sw)" link add to-rt mtu "$NH_NODE_MTU" type veth peer name eth0 mtu "$NH_NODE_MTU" netns "$rt" || return 1
    nh_run ip -n "$(nh_ns sw)" link set to-rt master br0 || return 1
    nh_run ip -n "$(nh_ns sw)" link set to-rt up || return 1
    nh_run ip -n "$rt" addr add "$ECMP_ROUTER_IP/$NH_PREFIX_LEN" dev eth0 || return 1
    nh_run ip netns exec "$rt" ethtool -K eth0 tx off tso off gso off || return 1
    nh_run ip -n "$rt" link set eth0 up || return 1
    nh_sysctl rt net.ipv4.conf.all.forwarding=1 net.ipv4.conf.all.send_redirects=0 \
      net.ipv4.conf.eth0.send_redirects=0 net.ipv4.conf.all.rp_filter=0 \
      net.ipv4.conf.eth0.rp_filter=0 net.ipv4.fib_multipath_hash_policy=1 || return 1
  fi
  nh_sysctl client net.ipv4.conf.all.accept_redirects=0 net.ipv4.conf.eth0.accept_redirects=0 || return 1
  for n in "${NH_NODES[@]:1}"; do
    nh_sysctl "$n" net.ipv4.conf.eth0.forwarding=1 net.ipv4.conf.all.send_redirects=0 \
      net.ipv4.conf.eth0.send_redirects=0 || return 1
  done
  ecmp_router_conf >"$NH_OUT/bird-rt.conf"
  for n in "${NH_NODES[@]}"; do
    ecmp_bird_conf "$n" >"$NH_OUT/bird-$n.conf"
    : >"$NH_OUT/bird-routes-${NH_NODE_IP[$n]}.conf"
  done
  for n in rt "${NH_NODES[@]}"; do
    [[ -n ${BIRD_PID[$n]:-} ]] && nh_alive "${BIRD_PID[$n]}" && continue
    ecmp_start_bird "$n"
  done
  nh_run ip -n "$(nh_ns client)" route replace "$NH_VIP/32" via "$ECMP_ROUTER_IP" || return 1
  ECMP_UP=1
  if ! nh_wait_until 20 ecmp_sessions_up; then
    ECMP_WHY="the router's BGP sessions are not all Established after 20 s: $(birdc -s "$NH_OUT/bird-rt.ctl" show protocols 2>&1 | grep BGP | tr -s ' ' | paste -sd ';')"
    return 1
  fi
  ecmp_etcd_start || return 1
  ecmp_routing_yaml
  CLUSTER_EXTRA="  etcd: {endpoints: [$ECMP_ETCD_URL], prefix: /nilb/harness, lease_ttl_ms: 3000}"
  write_config "${BASE_WEIGHTS[@]}"
  hup_all
  local t0=$HUP_T
  if ! nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$rt" "$NH_VIP/32" 3 --timeout 20 >"$NH_OUT/ecmp-wait.json"; then
    ECMP_WHY="router next hops for $NH_VIP after 20 s: $(json "$NH_OUT/ecmp-wait.json" 'd["nexthops"]')"
    for n in "${NH_NODES[@]}"; do
      echo "  nilb status on $n:"
      status_table "$n" | grep -E 'routing|VIP|BIRD|BGP'
    done
    return 1
  fi
  ECMP_T_ROUTES=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
  # every balancer settled on the base weights (its own checks see all up)
  for n in "${NH_NODES[@]}"; do
    if ! st_wait "$n" 15 "reload.get('ok', True) is True and $(settled_expr)"; then
      ECMP_WHY="$n not settled: $WAIT_SUMMARY"
      return 1
    fi
  done
  if ! nh_wait_until 10 ecmp_one_leader; then
    ECMP_WHY="cluster roles after 10 s: $(ecmp_roles) (want one leader, the others followers)"
    return 1
  fi
}

# ecmp_down: routing out of the config (each nilb withdraws), BIRD stopped,
# client route back via node1, node2/node3 forwarding off again
ecmp_down() {
  local n
  ((ECMP_UP)) || return 0
  leave_base
  for n in rt "${NH_NODES[@]}"; do
    [[ -n ${BIRD_PID[$n]:-} ]] && nh_stop "${BIRD_PID[$n]}" TERM 5
    unset "BIRD_PID[$n]"
  done
  ecmp_etcd_stop
  ip -n "$(nh_ns client)" route replace "$NH_VIP/32" via "${NH_NODE_IP[node1]}" >>"$NH_OUT/setup.log" 2>&1
  for n in "${NH_NODES[@]:1}"; do
    nh_sysctl "$n" net.ipv4.conf.eth0.forwarding=0
  done
  ECMP_UP=0
}

# ecmp_tables LABEL: dump every balancer's live table; ECMP_AGREE = SUMMARY line, status 0 if equal
ecmp_tables() {
  local n dumps=()
  for n in "${NH_NODES[@]}"; do
    dump_tables "$n" "$NH_OUT/tables-$1-$n.json" >/dev/null || return 1
    dumps+=("$NH_OUT/tables-$1-$n.json")
  done
  ECMP_AGREE=$("$NH_PY" "$HERE/ecmp.py" agree "${dumps[@]}")
  [[ $ECMP_AGREE == *"SUMMARY PASS"* ]]
}

# ecmp_applies: BIRD reconfigurations (ok + failed) of every node's nilb, e.g. "1 1 1"
ecmp_applies() {
  local n out=""
  for n in "${NH_NODES[@]}"; do
    out+="${out:+ }$(st get "$(state_of "$n")" "sum(d['routing']['bird']['applies'])" 2>/dev/null)"
  done
  echo "$out"
}

scenario_ecmp() {
  local ok=1 nums="" n shares pairs=()
  header "(ecmp) 3 balancers behind a BIRD router with ECMP: 300 new connections via $NH_VIP:80"
  need_base ecmp || return
  if ! ecmp_up; then
    fail ecmp "set-up: $ECMP_WHY"
    ecmp_down
    return
  fi
  echo "  router next hops for $NH_VIP: $("$NH_PY" "$HERE/ecmp.py" nexthops "$(nh_ns rt)" "$NH_VIP/32") (${ECMP_T_ROUTES}s after SIGHUP)"
  nums+="routes on the router ${ECMP_T_ROUTES}s after the config"
  for n in "${NH_NODES[@]}"; do
    grep -h 'VIP announced\|BIRD reconfigured' "$NH_OUT/nilb-$n.log" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 2 | sed "s/^/    $n | /"
  done
  status_table node2 | grep -E 'routing|VIP|BIRD|BGP'
  for n in "${NH_NODES[@]}"; do save_stats "$n" "$NH_OUT/stats-$n-ecmp0.json"; done
  burst_dist ecmp 21000 || ok=0
  nums+="; backends: $DIST_NUMBERS"
  for n in "${NH_NODES[@]}"; do
    save_stats "$n" "$NH_OUT/stats-$n-ecmp1.json"
    pairs+=("$NH_OUT/stats-$n-ecmp0.json,$NH_OUT/stats-$n-ecmp1.json")
  done
  shares=$("$NH_PY" "$HERE/ecmp.py" balancer-shares "${pairs[@]}")
  echo "  packets balanced per balancer (node1 node2 node3): $shares"
  nums+="; packets per balancer $shares"
  # every balancer took part (the router spread the flows)
  if [[ $shares =~ (^|[[:space:]])0\( ]]; then
    ok=0
    nums+=" (a balancer got nothing)"
  fi
  echo "  cluster roles (node1 node2 node3): $(ecmp_roles)"
  status_table node2 | grep -E 'cluster|revision'
  nums+="; roles $(ecmp_roles | tr ' ' '/')"
  if ecmp_tables ecmp; then
    nums+="; tables: ${ECMP_AGREE#SUMMARY PASS }"
  else
    ok=0
    # shellcheck disable=SC2001 # a prefix on every line
    echo "$ECMP_AGREE" | sed 's/^/  /'
    nums+="; tables DIFFER: ${ECMP_AGREE##*SUMMARY }"
  fi
  # no healthy backend, withdraw_on_fail_open: every balancer withdraws the VIP
  # (the router has no route: clients get "unreachable" from it at once rather
  # than a fail-open guess), and announces it again when the backends return
  local t_none t_back
  local applies0 applies1
  applies0=$(ecmp_applies)
  ROUTING_YAML+=$'\n  withdraw_on_fail_open: true'
  write_config "${BASE_WEIGHTS[@]}"
  hup_all
  for n in "${NH_NODES[@]}"; do wait_reload "$n" 5 || ok=0; done
  sleep 1
  applies1=$(ecmp_applies)
  # changing a decision setting must not re-announce (no flap): BIRD untouched
  echo "  SIGHUP with withdraw_on_fail_open added: BIRD reconfigurations per node $applies0 -> $applies1"
  [[ $applies0 == "$applies1" ]] || { ok=0; nums+="; the reload re-announced ($applies0 -> $applies1)"; }
  t0=$(nh_now)
  for n in "${NH_NODES[@]}"; do stop_backend "$n"; done
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$(nh_ns rt)" "$NH_VIP/32" 0 --timeout 10 >"$NH_OUT/ecmp-wait.json"; then
    t_none=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
  else
    t_none="never"
    ok=0
  fi
  t0=$(nh_now)
  for n in "${NH_NODES[@]}"; do start_backend "$n" ecmp || ok=0; done
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$(nh_ns rt)" "$NH_VIP/32" 3 --timeout 15 >"$NH_OUT/ecmp-wait.json"; then
    t_back=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
  else
    t_back="never"
    ok=0
  fi
  echo "  withdraw_on_fail_open: every backend stopped -> router without a route after ${t_none}s; backends back -> 3 next hops after ${t_back}s"
  nums+="; no healthy backend (withdraw_on_fail_open): withdrawn everywhere ${t_none}s, back ${t_back}s"
  for n in "${NH_NODES[@]}"; do
    st_wait "$n" 15 "$(settled_expr)" || echo "  $n did not settle after the backends came back: $WAIT_SUMMARY"
  done

  # SIGTERM: node3 withdraws first, forwards for withdraw_grace_ms, then exits 0
  local t0 t_route t_exit
  t0=$(nh_now)
  kill -TERM "${NILB_PID[node3]}"
  if nh_local "$NH_PY" "$HERE/ecmp.py" wait-nexthops "$(nh_ns rt)" "$NH_VIP/32" 2 --timeout 10 >"$NH_OUT/ecmp-wait.json"; then
    t_route=$(nh_calc "$(json "$NH_OUT/ecmp-wait.json" 'd["at"]') - $t0")
  else
    t_route="never"
    ok=0
  fi
  nh_stop "${NILB_PID[node3]}" TERM 10
  t_exit=$(nh_calc "$(nh_now) - $t0")
  [[ $NH_LAST_RC == 0 ]] || ok=0
  echo "  SIGTERM to node3's nilb: router dropped node3 after ${t_route}s, nilb exited $NH_LAST_RC after ${t_exit}s (grace ${NH_ECMP_GRACE_MS:-1000} ms)"
  # node3 is a backend too: with its TC program gone the other balancers take
  # it out through their encapsulated checks (about 1.3 s); new connections
  # are judged after that (what stopping a backend costs is (e)'s and h1's
  # business, not routing's)
  for n in node1 node2; do
    st_wait "$n" 10 "b['node3']['buckets'] == 0" || echo "  $n still gives node3 buckets: $WAIT_SUMMARY"
  done
  cl burst --host "$NH_VIP" --port 80 --count 100 --sport-base 23000 --max-seconds 25 --max-consecutive-failures 10 \
    --out "$NH_OUT/burst-ecmp-term.json"
  echo "  100 new connections after: $OUT"
  [[ $(json - 'd["ok"]' <<<"$OUT") == 100 ]] || ok=0
  nums+="; SIGTERM: withdrawn ${t_route}s, exit $NH_LAST_RC at ${t_exit}s, then $(json - 'd["ok"]' <<<"$OUT")/100 new connections ok"
  ecmp_down
  if ((ok)); then pass ecmp "$nums"; else fail ecmp "$nums"; fi
}
