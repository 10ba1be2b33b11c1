# shellcheck shell=bash
# scenario-order: 120
# (mtu) packets too big for the encapsulation: the wire between the nodes is
# lowered to 1500 bytes (node eth0s and the switch ports to them; the client's
# eth0 is 1500 anyway), so a full-sized client packet (1500) no longer fits
# once GUE adds 36 + 4N bytes. 30 connections whose first hop is remote (not
# node1: `nilb lookup`) each upload 100 KB at once (`mtu.py upload`). Twice:
# with forwarding on node1's eth0 (FIB, hop cache: the XDP fast path) and off
# (nilb's slow path through TC), the client's route cache flushed before each.
# Pass: 30/30 uploads complete in both phases, 0 hung; the client learned the
# path MTU of the VIP (`ip route get`: mtu 1500 - 36 - 4N, N the most previous
# owners a picked flow's bucket lists in node1's live table: 1464 with none,
# 1452 with three);
# node1 counted ICMP replies (`xdp_icmp_too_big`), none rate-limited; in the
# slow phase the packets that fit went by the slow path (`xdp_encap_slow_path`,
# `tc_slow_path_sent`).
# GRO is turned off on the switch's port to the client for the scenario: it
# merges the client's segments, and re-segmented they carry partial TCP
# checksums that XDP (which sees bytes, not the skb's checksum state) passes on
# in GUE; the backends then drop about half of them (TcpInCsumErrors) and the
# uploads crawl through retransmissions. A real NIC delivers what was on the
# wire; the XDP_TX trap (lib.sh) concerns the ports to the nodes, not this one.
# Needs: the base state. Leaves: the base state; MTUs, node1's forwarding and
# GRO restored.

# mtu_set MTU: node eth0s and the switch ports to them
mtu_set() {
  local n rc=0
  for n in "${NH_NODES[@]}"; do
    ip -n "$(nh_ns "$n")" link set eth0 mtu "$1" || rc=1
    ip -n "$(nh_ns sw)" link set "to-$n" mtu "$1" || rc=1
  done
  return "$rc"
}

# mtu_delta BEFORE AFTER COUNTER: how much COUNTER moved (-1 if unreadable)
mtu_delta() { "$NH_PY" "$HERE/results.py" delta "$1" "$2" "$3" 2>/dev/null || echo -1; }

# mtu_phase LABEL SPORT_BASE: one round of 30 uploads; appends to nums, clears ok.
# The source ports lie above the ephemeral range (32768-60999), so no other
# connection of the client can hold one of them when the uploads bind.
mtu_phase() {
  local label=$1 base=$2 picked sports res hung okc pmtu route before after most want
  local icmp limited slow tcslow
  ip -n "$(nh_ns client)" route flush cache
  picked=$("$NH_PY" "$HERE/mtu.py" pick --nilb "$NILB" --config "$CFG" --client-ip "$NH_CLIENT_IP" \
    --vip "$NH_VIP" --not-first "${NH_NODE_IP[node1]}" --sport-base "$base" --count 30 --live "${PIN_DIR[node1]}")
  sports=$(json - '",".join(map(str, d["sports"]))' <<<"$picked")
  most=$(json - 'd["most_previous"]' <<<"$picked")
  want=$((1500 - 36 - 4 * ${most:-0}))
  echo "  $label: 30 flows with a remote first hop (nilb lookup --live): $(json - 'json.dumps(d["first_hops"])' <<<"$picked"), at most $most previous owners listed (path MTU $want expected)"
  before=$NH_OUT/stats-node1-mtu-$label-before.json
  after=$NH_OUT/stats-node1-mtu-$label-after.json
  save_stats node1 "$before"
  nh_fg client timeout 40 "$NH_PY" "$HERE/mtu.py" upload --host "$NH_VIP" --port 80 --bind "$NH_CLIENT_IP" \
    --sports "$sports" --bytes 102400 --timeout 20 --out "$NH_OUT/mtu-$label.json" >"$NH_OUT/mtu-$label.out"
  res=$(<"$NH_OUT/mtu-$label.out")
  route=$(ip -n "$(nh_ns client)" route get "$NH_VIP" 2>&1 | tr -s ' \n' ' ')
  save_stats node1 "$after"
  icmp=$(mtu_delta "$before" "$after" xdp_icmp_too_big)
  limited=$(mtu_delta "$before" "$after" xdp_drop_too_big_limited)
  slow=$(mtu_delta "$before" "$after" xdp_encap_slow_path)
  tcslow=$(mtu_delta "$before" "$after" tc_slow_path_sent)
  okc=$(json - 'd["ok"]' <<<"$res")
  hung=$(json - 'd["hung"]' <<<"$res")
  pmtu=$(grep -o 'mtu [0-9]*' <<<"$route" | awk '{ print $2 }')
  echo "  $label: uploads $res"
  echo "  $label: client: ip route get $NH_VIP: $route"
  echo "  $label: node1 counters: xdp_icmp_too_big +$icmp, xdp_drop_too_big_limited +$limited, xdp_encap_slow_path +$slow, tc_slow_path_sent +$tcslow"
  nums+="$label: ok=${okc:-?}/30 hung=${hung:-?} pmtu=${pmtu:-none} (expected $want) icmp=$icmp limited=$limited slow=$slow; "
  [[ $okc == 30 && $hung == 0 ]] || ok=0
  [[ $pmtu == "$want" ]] || ok=0
  ((icmp > 0 && limited == 0)) || ok=0
  if [[ $label == slow ]]; then
    ((slow > 0 && tcslow > 0)) || ok=0
  fi
}

scenario_mtu() {
  header "(mtu) 1500-byte wire between the nodes, client MTU 1500: 30 uploads of 100 KB with a remote first hop"
  local nums="" ok=1 fwd gro
  need_base mtu || return
  fwd=$(ip netns exec "$(nh_ns node1)" sysctl -n net.ipv4.conf.eth0.forwarding)
  gro=$(ip netns exec "$(nh_ns sw)" ethtool -k to-client | awk '/^generic-receive-offload:/ { print $2 }')
  ip netns exec "$(nh_ns sw)" ethtool -K to-client gro off
  if ! mtu_set 1500; then
    mtu_set "$NH_NODE_MTU"
    fail mtu "cannot set the MTU to 1500"
    return
  fi
  # hop cache entries checked against the old MTU expire (NILB_HOP_CACHE_NS)
  sleep 1
  nh_sysctl node1 net.ipv4.conf.eth0.forwarding=1
  mtu_phase fast 61000
  nh_sysctl node1 net.ipv4.conf.eth0.forwarding=0
  sleep 0.5
  mtu_phase slow 63000
  nh_sysctl node1 "net.ipv4.conf.eth0.forwarding=${fwd:-1}"
  ip netns exec "$(nh_ns sw)" ethtool -K to-client gro "${gro:-on}"
  ip -n "$(nh_ns client)" route flush cache
  if ! mtu_set "$NH_NODE_MTU"; then
    ok=0
    nums+="restoring MTU $NH_NODE_MTU failed; "
  fi
  sleep 0.5
  leave_base
  if ((ok)); then pass mtu "$nums"; else fail mtu "$nums"; fi
}
