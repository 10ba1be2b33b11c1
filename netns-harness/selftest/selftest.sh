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
}

