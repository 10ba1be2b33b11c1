# shellcheck shell=bash disable=SC2001 # sed over multi-line text is clearer here
# scenario-order: 30
# (c) node1's own traffic while its XDP program is attached: TCP to node1's
# address on :8080 and :80 (not the VIP) and `ping -c 3` all work, and
# `ip -d link` shows prog/xdp on node1's eth0.
# Needs and leaves: the base state (changes nothing).

scenario_c() {
  header "(c) node1's own traffic is untouched while XDP is attached"
  local link xdp ok=1 out80 out8080 okc png nums=""
  need_base c || return
  link=$(ip -n "$(nh_ns node1)" -d link show dev eth0)
  xdp=$(grep -o 'prog/xdp[a-z]* id [0-9]*' <<<"$link" | head -n 1)
  if [[ -n $xdp ]]; then
    echo "  ip -d link show eth0 on node1: $xdp"
    nums+="xdp attached ($xdp); "
  else
    echo "  ip -d link show eth0 on node1 shows no XDP program:"
    sed 's/^/    | /' <<<"$link"
    nums+="no XDP program on node1 eth0; "
    ok=0
  fi
  cl burst --host "${NH_NODE_IP[node1]}" --port 8080 --count 20 --sport-base 23000 \
    --max-seconds 20 --max-consecutive-failures 5
  out8080=$OUT
  echo "  TCP to ${NH_NODE_IP[node1]}:8080: $out8080"
  okc=$(json - 'd["by_backend"].get("node1",0)' <<<"$out8080")
  nums+="8080 ok=${okc:-0}/20; "
  [[ ${okc:-0} == 20 ]] || ok=0
  cl burst --host "${NH_NODE_IP[node1]}" --port 80 --count 20 --sport-base 23100 \
    --max-seconds 20 --max-consecutive-failures 5
  out80=$OUT
  echo "  TCP to ${NH_NODE_IP[node1]}:80 (node address, not the VIP): $out80"
  okc=$(json - 'd["by_backend"].get("node1",0)' <<<"$out80")
  nums+="80 ok=${okc:-0}/20; "
  [[ ${okc:-0} == 20 ]] || ok=0
  nh_fg client timeout 10 ping -c 3 -i 0.2 -W 1 "${NH_NODE_IP[node1]}" >"$NH_OUT/ping.txt" 2>&1
  local prc=$?
  png=$(grep 'packets transmitted' "$NH_OUT/ping.txt")
  echo "  ping -c 3 ${NH_NODE_IP[node1]}: ${png:-no output}"
  nums+="ping: ${png:-failed}"
  ((prc == 0)) || ok=0
  local n other
  for n in node2 node3; do
    other=$(ip -n "$(nh_ns "$n")" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*')
    echo "  info: $n (not a balancer) eth0 XDP: ${other:-none}"
  done
  if ((ok)); then pass c "$nums"; else fail c "$nums"; fi
}

