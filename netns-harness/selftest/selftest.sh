# shellcheck shell=bash
# selftest.sh - `run.sh --selftest`: the harness's own plumbing without nilb
# (topology, backends, client.py burst/hold, error counting, capture, cleanup).
# Sourced by run.sh after the topology and the backends are up.

selftest() {
  header "selftest: harness plumbing without nilb"
  local out res pcap tlog tpid frames mac2 state go hpid
  cl burst --host "${NH_NODE_IP[node2]}" --port 80 --count 50 --sport-base 20000 --max-seconds 20
  out=$OUT
  echo "  burst to node2: $out"
  if [[ $(json - 'd["by_backend"].get("node2",0)' <<<"$out") == 50 ]]; then pass burst "50/50 from node2"; else fail burst "$out"; fi
  cl burst --host "${NH_NODE_IP[node1]}" --port 8080 --count 5 --sport-base 20100 --max-seconds 20
  out=$OUT
  if [[ $(json - 'd["ok"]' <<<"$out") == 5 ]]; then pass port8080 "5/5 from node1:8080"; else fail port8080 "$out"; fi
  cl burst --host "${NH_NODE_IP[node3]}" --port 81 --count 3 --sport-base 20200 --max-seconds 10
  out=$OUT
  if [[ $(json - 'd["errors"].get("refused",0)' <<<"$out") == 3 ]]; then pass errors "refused counted: $out"; else fail errors "$out"; fi

  pcap=$NH_OUT/selftest.pcap tlog=$NH_OUT/tcpdump-selftest.log
  nh_bg "tcpdump on client" "$tlog" client timeout 30 tcpdump -i eth0 -nn -e -U --immediate-mode -Z root -c 2000 -w "$pcap" \
    "tcp and src host ${NH_NODE_IP[node2]}"
  tpid=$NH_BG_PID
  if nh_wait_until 10 grep -q 'listening on' "$tlog"; then
    client burst --host "${NH_NODE_IP[node2]}" --port 80 --count 10 --sport-base 20300 --max-seconds 20 >/dev/null
    sleep 0.3
    nh_stop "$tpid" TERM 5
    mac2=$(nh_mac node2)
    frames=$(tcpdump -nn -e -r "$pcap" 2>/dev/null | awk -v m="$mac2" '$2 == m' | wc -l)
    if ((frames >= 30)); then pass capture "$frames frames from node2 MAC $mac2"; else fail capture "$frames frames from $mac2"; fi
  else
    nh_stop "$tpid" TERM 3
    fail capture "tcpdump did not start: $(cat "$tlog")"
  fi

  state=$NH_OUT/hold-state.json go=$NH_OUT/hold.go res=$NH_OUT/hold-result.json
  nh_bg "hold client" "$NH_OUT/hold.log" client timeout 60 "$NH_PY" "$HERE/client.py" hold \
    --host "${NH_NODE_IP[node3]}" --port 80 --count 30 --sport-base 24000 --state "$state" --go "$go" \
    --go-timeout 30 --rounds 2 --interval 0.2 --out "$res"
  hpid=$NH_BG_PID
  if nh_wait_until 20 test -e "$state"; then
    touch "$go"
    nh_wait_until 20 nh_not_alive "$hpid"
  fi
  nh_stop "$hpid" TERM 3
  out=$(head -n 1 "$NH_OUT/hold.log")
  if [[ $NH_LAST_RC == 0 && $(json "$res" 'd["ok"]') == 30 ]]; then pass hold "$out"; else fail hold "exit $NH_LAST_RC: $out"; fi

  # the IPv6-only cluster network of the v6-cluster-* scenarios (lib.sh
  # nh_cluster6_on): no IPv4 address on the nodes, both VIPs reached through
  # IPv6 next hops; and back (nh_cluster6_off): the node addresses answer again
  if nh_cluster6_on && cluster6_routes 20400; then
    pass cluster6 "nodes' eth0 IPv6 only, ping6 node <-> node <-> client, both VIPs answered by node1 via IPv6 next hops"
  else
    fail cluster6 "the IPv6-only cluster network did not come up (see $NH_OUT/setup.log)"
  fi
  if nh_cluster6_off; then
    cl burst --host "${NH_NODE_IP[node3]}" --port 80 --count 3 --sport-base 20500 --max-seconds 10
    if [[ $(json - 'd["by_backend"].get("node3",0)' <<<"$OUT") == 3 ]]; then
      pass cluster6-off "IPv4 node addresses back: 3/3 from node3"
    else
      fail cluster6-off "$OUT"
    fi
  else
    fail cluster6-off "the IPv4 node addresses did not come back (see $NH_OUT/setup.log)"
  fi
}

