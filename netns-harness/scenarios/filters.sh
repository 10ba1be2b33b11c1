# shellcheck shell=bash
# scenario-order: 190
# (filters) edge filters under a flood: an attacker namespace on the switch
# (10.77.0.3) sends two bounded SYN floods to the VIP (flood.py, raw socket,
# forged sources): one from 203.0.113.0/25, which a global deny rule reads
# from a list file, one from 198.51.100.7, over web's per-source SYN limit.
# Meanwhile the client makes 300 requests at 50/s (each a new connection)
# and its own address is under a dry-run deny rule; mid-flood and mid-stream
# the list file is rewritten (the same addresses in other prefixes, plus one
# more) and every nilb gets SIGHUP. tcpdump on every node's eth0 records the GUE that reaches
# the backends. Pass: 300/300 requests succeed; the deny rule counts exactly
# the denied flood and none of it reaches a backend (0 GUE packets with such
# an inner source on any node), before, during and after the swap; the SYN
# limit drops part of its flood, counted, and exactly the rest reaches the
# backends; node1 reloaded ok onto the other filter generation; the dry-run
# rule counted the client's packets and dropped none; `nilb filters` lists
# 198.51.100.7 as the source the limit dropped most; `nilb lookup` (config
# and live) names the rule that decides a denied source. Then a bad list file
# + SIGHUP: the reload is refused naming the file, line and reason, and 200
# more SYNs from the denied prefix are still dropped and counted.
# Needs: the base state. Leaves: the base state (the attacker namespace is
# deleted).

FL_ATTACKER_IP=10.77.0.3
FL_DENIED=203.0.113.0/25
FL_LIMITED=198.51.100.7

# fl_attacker_up: the attacker namespace, its veth on the switch, a route to the VIP via node1
fl_attacker_up() {
  local sw at
  sw=$(nh_ns sw)
  nh_netns_add attacker || return 1
  at=$(nh_ns attacker)
  nh_run ip -n "$sw" link add to-attacker mtu "$NH_NODE_MTU" type veth peer name eth0 \
    address 02:77:00:00:00:03 mtu "$NH_CLIENT_MTU" netns "$at" || return 1
  nh_run ip -n "$sw" link set to-attacker master br0 || return 1
  nh_run ip -n "$sw" link set to-attacker up || return 1
  nh_sysctl attacker net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 || return 1
  nh_run ip -n "$at" addr add "$FL_ATTACKER_IP/$NH_PREFIX_LEN" dev eth0 || return 1
  nh_run ip netns exec "$at" ethtool -K eth0 tx off tso off gso off || return 1
  nh_run ip -n "$at" link set eth0 up || return 1
  nh_run ip -n "$at" route add "$NH_VIP/32" via "${NH_NODE_IP[node1]}" || return 1
  nh_wait_until 5 nh_fg attacker ping -q -c 1 -W 1 "${NH_NODE_IP[node1]}" >/dev/null
}

# fl_attacker_down: delete the attacker namespace (its veth goes with it)
fl_attacker_down() {
  ip netns pids "$(nh_ns attacker)" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  ip netns del "$(nh_ns attacker)" 2>/dev/null
}

# fl_rule FILE NAME: packets a filter rule dropped, from a saved `nilb stats --json`
fl_rule() { json "$1" "sum(r['packets'] for r in d['filters'] if r['name'] == '$2')" || echo -999999; }

# fl_list LINES...: write the deny list file atomically
fl_list() { printf '%s\n' "$@" >"$NH_OUT/filters-deny.txt.tmp" && mv -f "$NH_OUT/filters-deny.txt.tmp" "$NH_OUT/filters-deny.txt"; }

scenario_filters() {
  local nums="" ok=1 n pcaps=() tcpdump_pids=() before after gen0 gen1 fa fb sa sb da db
  local cap leak_denied got_limited client_ok dry top lookup_cfg lookup_live drops
  header "(filters) SYN floods from a denied prefix and over a per-source limit, 300 requests, a list swapped by SIGHUP mid-flood"
  need_base filters || return
  if ! fl_attacker_up; then
    fl_attacker_down
    fail filters "could not set up the attacker namespace (see $NH_OUT/setup.log)"
    return
  fi
  fl_list "# attackers (the harness's threat list)" "$FL_DENIED"
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  FILTERS_YAML="filters:
  rate_limit_sources: 4096
  deny:
    - {name: attackers, files: [filters-deny.txt]}
    - {name: client-trial, prefixes: [$NH_CLIENT_IP/32], dry_run: true}"
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  WEB_FILTERS_YAML="      rate_limit:
        - {name: syn-per-source, per: address, syns_per_second: 300, burst_syns: 300}"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  nilb_check || ok=0
  hup_all
  if wait_reload node1 10 "reload.get('ok') is True and (d.get('filters') or {}).get('generation') is not None"; then
    gen0=$(st get "$(state_of node1)" "d['filters']['generation']")
    echo "  node1 loaded the filters: generation $gen0; $(st get "$(state_of node1)" "'; '.join(r['name'] + ' ' + r['kind'] + ' ' + ', '.join(r['sources']) for r in d['filters']['rules'])")"
  else
    echo "  node1 did not load the filters: $WAIT_SUMMARY"
    ok=0
  fi
  # the GUE that reaches each node (the backends), from the first packet on,
  # and TCP to the VIP (a SYN the backend's XDP decapsulated before the tap)
  for n in "${NH_NODES[@]}"; do
    nh_bg "tcpdump on $n" "$NH_OUT/tcpdump-filters-$n.log" "$n" timeout 90 tcpdump -i eth0 -nn -U --immediate-mode \
      -Z root -s 128 -B 8192 -c 2000000 -w "$NH_OUT/filters-$n.pcap" "udp dst port 19523 or (tcp and dst host $NH_VIP)"
    tcpdump_pids+=("$NH_BG_PID")
    pcaps+=("$NH_OUT/filters-$n.pcap")
  done
  for n in "${NH_NODES[@]}"; do
    nh_wait_until 10 grep -q 'listening on' "$NH_OUT/tcpdump-filters-$n.log" || { echo "  tcpdump on $n did not start"; ok=0; }
  done
  save_stats node1 "$NH_OUT/stats-node1-filters0.json"
  # two bounded floods (count and time) from the attacker, 2000 SYN/s each
  rm -f "$NH_OUT/flood-"{a,b}.started
  nh_bg "flood (denied)" "$NH_OUT/flood-a.json" attacker timeout 40 "$NH_PY" "$HERE/flood.py" --dst "$NH_VIP" --port 80 \
    --src "$FL_DENIED" --count 16000 --rate 2000 --max-seconds 20 --sport-base 20000 --started "$NH_OUT/flood-a.started"
  fa=$NH_BG_PID
  nh_bg "flood (limited)" "$NH_OUT/flood-b.json" attacker timeout 40 "$NH_PY" "$HERE/flood.py" --dst "$NH_VIP" --port 80 \
    --src "$FL_LIMITED/32" --count 16000 --rate 2000 --max-seconds 20 --sport-base 40000 --started "$NH_OUT/flood-b.started"
  fb=$NH_BG_PID
  nh_wait_until 10 test -e "$NH_OUT/flood-a.started" && nh_wait_until 10 test -e "$NH_OUT/flood-b.started" || ok=0
  sleep 1
  # the legitimate client: 300 requests at 50/s (each on a new connection), across the swap
  nh_bg "stream (filters)" "$NH_OUT/stream-filters.log" client timeout 60 "$NH_PY" "$HERE/client.py" stream --host "$NH_VIP" \
    --port 80 --rate 50 --duration 6 --count 300 --sport-base 50000 --timeout 1 --started "$NH_OUT/stream-filters.started" \
    --out "$NH_OUT/stream-filters.json"
  local stream_pid=$NH_BG_PID
  nh_wait_until 10 test -e "$NH_OUT/stream-filters.started" || ok=0
  sleep 2.5
  # mid-flood, mid-stream: the list file changes (the denied addresses now in
  # two /26, one prefix more) and every nilb gets SIGHUP
  fl_list "# attackers, rewritten during the flood" "203.0.113.0/26" "203.0.113.64/26" "192.0.2.0/24"
  hup_all
  if wait_reload node1 10 "reload.get('ok') is True and d['filters']['generation'] != $gen0"; then
    gen1=$(st get "$(state_of node1)" "d['filters']['generation']")
    echo "  SIGHUP with the changed list: node1 flipped to filter generation $gen1 $(nh_calc "$WAIT_AT - $HUP_T")s after the signal; $(st get "$(state_of node1)" "'; '.join(r['name'] + ': ' + ', '.join(r['sources']) for r in d['filters']['rules'] if r['name'] == 'attackers')")"
  else
    echo "  node1 did not reload onto a new filter generation: $WAIT_SUMMARY"
    ok=0
  fi
  nh_wait_until 60 nh_not_alive "$stream_pid"
  nh_stop "$stream_pid" TERM 3
  nh_wait_until 30 nh_not_alive "$fa"
  nh_stop "$fa" TERM 3
  nh_wait_until 30 nh_not_alive "$fb"
  nh_stop "$fb" TERM 3
  sleep 0.5
  save_stats node1 "$NH_OUT/stats-node1-filters1.json"
  for n in "${tcpdump_pids[@]}"; do nh_stop "$n" TERM 5; done
  before=$NH_OUT/stats-node1-filters0.json after=$NH_OUT/stats-node1-filters1.json
  sa=$(json "$NH_OUT/flood-a.json" 'd["sent"]') sb=$(json "$NH_OUT/flood-b.json" 'd["sent"]')
  da=$(( $(fl_rule "$after" attackers) - $(fl_rule "$before" attackers) ))
  db=$(( $(fl_rule "$after" syn-per-source) - $(fl_rule "$before" syn-per-source) ))
  dry=$(( $(fl_rule "$after" client-trial) - $(fl_rule "$before" client-trial) ))
  cap=$("$NH_PY" "$HERE/gue_sources.py" --prefix "$FL_DENIED" --prefix "$FL_LIMITED/32" --prefix "$NH_CLIENT_IP/32" --syn-only "${pcaps[@]}")
  leak_denied=$(json - "d['by_prefix']['$FL_DENIED']['gue'] + d['by_prefix']['$FL_DENIED']['plain']" <<<"$cap")
  # (GUE, or already decapsulated: the backends' XDP takes SYNs out of GUE
  # before tcpdump's tap sees them)
  got_limited=$(json - "d['by_prefix']['$FL_LIMITED/32']['gue'] + d['by_prefix']['$FL_LIMITED/32']['plain']" <<<"$cap")
  client_ok=$(json "$NH_OUT/stream-filters.json" 'd["ok"]')
  drops=$(for n in "${NH_NODES[@]}"; do sed -n 's/^\([0-9]*\) packets\{0,1\} dropped by kernel.*/\1/p' "$NH_OUT/tcpdump-filters-$n.log"; done | awk '{ s += $1; n++ } END { if (n == 3) print s }')
  echo "  floods: denied $FL_DENIED sent ${sa:-?} ($(json "$NH_OUT/flood-a.json" 'd["seconds"]')s), limited $FL_LIMITED sent ${sb:-?} ($(json "$NH_OUT/flood-b.json" 'd["seconds"]')s)"
  echo "  node1 rule counters (delta): attackers $da, syn-per-source $db, client-trial (dry run) $dry"
  echo "  node1 counters: $(counters_matching node1 'filter|rate_limit')"
  echo "  SYNs captured at the backends (GUE on every node's eth0; tcpdump kernel drops: ${drops:-?}): $(json - 'json.dumps(d["by_prefix"])' <<<"$cap")"
  echo "  client: $(head -n 1 "$NH_OUT/stream-filters.log")"
  echo "  client requests before the SIGHUP $("$NH_PY" "$HERE/results.py" window "$NH_OUT/stream-filters.json" 0 "$HUP_T"), after it $("$NH_PY" "$HERE/results.py" window "$NH_OUT/stream-filters.json" "$HUP_T" 9999999999) (ok/started)"
  nums+="client ${client_ok:-?}/300 OK ($("$NH_PY" "$HERE/results.py" window "$NH_OUT/stream-filters.json" 0 "$HUP_T") before the SIGHUP, $("$NH_PY" "$HERE/results.py" window "$NH_OUT/stream-filters.json" "$HUP_T" 9999999999) after); denied flood: sent ${sa:-?}, counted by rule attackers $da, reached a backend $leak_denied; "
  nums+="limited flood: sent ${sb:-?}, dropped by syn-per-source $db, reached a backend $got_limited (expected $(( ${sb:-0} - db ))); "
  [[ $client_ok == 300 ]] || ok=0
  [[ -n $sa && $sa -gt 0 && $da == "$sa" && $leak_denied == 0 ]] || ok=0
  [[ -n $sb && $db -gt 0 && $got_limited == $(( sb - db )) ]] || ok=0
  [[ ${drops:-1} == 0 ]] || { ok=0; nums+="tcpdump dropped packets: the capture is incomplete; "; }
  nums+="list swapped by SIGHUP mid-flood: generation ${gen0:-?} -> ${gen1:-?}; "
  [[ -n ${gen1:-} ]] || ok=0
  # dry run: the client's packets counted, none dropped
  nums+="dry run on the client: counted $dry, dropped 0 (300/300 answered)"
  [[ $dry -ge 300 && $client_ok == 300 ]] || ok=0
  # the source the limit hit most, and which rule decides a denied source
  top=$(timeout 10 "$NILB" filters --pin-dir "${PIN_DIR[node1]}" --top 3 --json 2>&1)
  echo "  nilb filters --top 3: $(json - 'json.dumps(d["top_sources"])' <<<"$top")"
  [[ $(json - 'd["top_sources"][0]["source"] + " " + d["top_sources"][0]["rule"]' <<<"$top") == "$FL_LIMITED syn-per-source" ]] || { ok=0; nums+="; top source not $FL_LIMITED"; }
  lookup_cfg=$(timeout 20 "$NILB" lookup --config "$CFG" 203.0.113.5:1234 "$NH_VIP:80" tcp --json 2>&1)
  lookup_live=$(timeout 20 "$NILB" lookup --config "$CFG" 203.0.113.5:1234 "$NH_VIP:80" tcp --json --live --pin-dir "${PIN_DIR[node1]}" 2>&1)
  echo "  nilb lookup 203.0.113.5: config: $(json - 'd["filters"]["outcome"]' <<<"$lookup_cfg"); live: $(json - 'd["filters"]["outcome"]' <<<"$lookup_live")"
  [[ $(json - 'd["filters"]["outcome"]' <<<"$lookup_cfg") == *"attackers"* && $(json - 'd["filters"]["outcome"]' <<<"$lookup_live") == *"attackers"* ]] || ok=0
  # a bad list file: the reload is refused (file, line, reason) and the lists in force stay
  fl_list "203.0.113.0/25" "203.0.113.300"
  hup_all
  if wait_reload node1 10 "reload.get('ok') is False"; then
    local err
    err=$(st get "$(state_of node1)" "reload['error']")
    echo "  bad list file + SIGHUP: refused: $err"
    [[ $err == *"filters-deny.txt: line 2: \`203.0.113.300\`"* ]] || { ok=0; nums+="; the refusal does not name the file and line"; }
  else
    echo "  bad list file + SIGHUP: node1 did not refuse it: $WAIT_SUMMARY"
    ok=0
  fi
  save_stats node1 "$NH_OUT/stats-node1-filters2.json"
  nh_fg attacker timeout 20 "$NH_PY" "$HERE/flood.py" --dst "$NH_VIP" --port 80 --src "$FL_DENIED" --count 200 --rate 1000 \
    --max-seconds 5 >"$NH_OUT/flood-c.json"
  sleep 0.3
  save_stats node1 "$NH_OUT/stats-node1-filters3.json"
  local kept
  kept=$(( $(fl_rule "$NH_OUT/stats-node1-filters3.json" attackers) - $(fl_rule "$NH_OUT/stats-node1-filters2.json" attackers) ))
  echo "  after the refused reload, 200 more SYNs from $FL_DENIED: $kept counted by rule attackers (the lists in force stayed)"
  nums+="; bad list file refused with file and line, lists kept (200 more denied SYNs counted: $kept)"
  [[ $kept == 200 ]] || ok=0
  fl_attacker_down
  leave_base
  if ((ok)); then pass filters "$nums"; else fail filters "$nums"; fi
}
