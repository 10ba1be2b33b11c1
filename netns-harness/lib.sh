# shellcheck shell=bash disable=SC2034 # globals here are used by run.sh
# lib.sh - topology and process helpers for the nilb netns harness.
# Source it from bash (run.sh does); it only defines variables and functions.
#
# Topology (all in namespaces named "<prefix>-<role>", nothing in the root netns):
#
#   client (10.77.0.2/24, eth0 mtu 1500)          route 10.77.0.100/32 via 10.77.0.11
#        |  veth                                   
#   switch: bridge br0 + to-client to-node1 to-node2 to-node3 (all mtu 1600, GRO on,
#           XDP_PASS attached - see xdp_pass.py for why)
#        |  veth (eth0 mtu 1600 in each node)
#   node1 10.77.0.11 (balancer)   node2 10.77.0.12   node3 10.77.0.13
#   every node: VIP 10.77.0.100/32 on lo, arp_ignore=1, arp_announce=2, rp_filter=0
#   node1 (balancer): eth0 forwarding=1 (XDP fast path), send_redirects=0
#
# Interface names never carry the prefix (they live in this run's own namespaces),
# so they cannot collide with another run; namespace names are unique per run.
# Cleanup (nh_cleanup) kills only the processes this run started (by pid, plus
# whatever is left inside this run's own namespaces), deletes only the
# namespaces this run created and unmounts only the bpffs it mounted
# (nh_mount_bpffs, under the run's output directory).

NH_VIP=10.77.0.100
NH_CLIENT_IP=10.77.0.2
NH_PREFIX_LEN=24
# IPv6 (dual stack on the same link; the cluster network stays IPv4): an
# IPv6 VIP on every node's lo, the client routes it via node1.
NH_VIP6=2001:db8:77:ff::80
NH_CLIENT_IP6=2001:db8:77::2
NH_PREFIX_LEN6=64
declare -A NH_NODE_IP6=([node1]=2001:db8:77::11 [node2]=2001:db8:77::12 [node3]=2001:db8:77::13)
NH_NODES=(node1 node2 node3)
declare -A NH_NODE_IP=([node1]=10.77.0.11 [node2]=10.77.0.12 [node3]=10.77.0.13)
declare -A NH_MAC_SET=([client]=02:77:00:00:00:02 [node1]=02:77:00:00:00:11
                       [node2]=02:77:00:00:00:12 [node3]=02:77:00:00:00:13)
NH_CLIENT_MTU=1500
NH_NODE_MTU=1600          # client MTU + 40 bytes of GUE fits
if [[ -z ${NH_PY:-} ]]; then
  # Debian's own python3 first: stdlib only is needed, and it starts fastest
  if [[ -x /usr/bin/python3 ]]; then NH_PY=/usr/bin/python3; else NH_PY=$(command -v python3 || echo python3); fi
fi
NH_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

NH_PREFIX=""              # set by nh_init
NH_OUT=""                 # per-run output dir (logs, pcaps, JSON)
NH_CREATED_NS=()          # namespaces this run created (only these are deleted)
NH_MOUNTS=()              # bpffs mounts this run made (only these are unmounted)
NH_TMPDIRS=()             # directories this run made outside NH_OUT (removed at cleanup)
NH_NS_INODES=()           # inodes of those namespaces (for nilb lock files)
declare -A NH_PID_DESC=() # pid -> description of every live process this run started
NH_STARTED=0              # how many processes were started in total
NH_CLEANED=0
NH_KEEP_OUT=0             # keep $NH_OUT after cleanup
NH_LAST_RC=0

nh_say() { printf '%s\n' "$*"; }
nh_info() { printf '  %s\n' "$*"; }
nh_warn() { printf '  WARNING: %s\n' "$*"; }

# nh_init [OUTDIR]: choose a unique prefix and create the output directory.
nh_init() {
  local base=${NILB_HARNESS_PREFIX:-nh$$} cand i
  base=${base:0:10}
  cand=$base
  for ((i = 0; i < 20; i++)); do
    if ! compgen -G "/run/netns/${cand}-*" >/dev/null; then
      break
    fi
    cand="${base:0:6}$((RANDOM % 10000))"
  done
  if compgen -G "/run/netns/${cand}-*" >/dev/null; then
    echo "cannot find an unused namespace prefix" >&2
    return 1
  fi
  NH_PREFIX=$cand
  if [[ -n ${1:-} ]]; then
    mkdir -p "$1" || return 1
    NH_OUT=$(mktemp -d "$1/run-$NH_PREFIX.XXXXXX") || return 1
  else
    NH_OUT=$(mktemp -d "${TMPDIR:-/tmp}/nilb-harness-$NH_PREFIX.XXXXXX") || return 1
  fi
}

nh_ns() { printf '%s-%s' "$NH_PREFIX" "$1"; }

# nh_run CMD...: run a setup command, log its output, report failure loudly.
nh_run() {
  if ! "$@" >>"$NH_OUT/setup.log" 2>&1; then
    printf '  setup command failed: %s\n' "$*"
    tail -n 3 "$NH_OUT/setup.log" | sed 's/^/    | /'
    return 1
  fi
}

# nh_netns_add ROLE: create namespace <prefix>-ROLE and remember it.
nh_netns_add() {
  local ns
  ns=$(nh_ns "$1")
  if [[ -e /run/netns/$ns ]]; then
    echo "  namespace $ns already exists (not ours); refusing to touch it"
    return 1
  fi
  nh_run ip netns add "$ns" || return 1
  NH_CREATED_NS+=("$ns")
  # nilb's per-namespace lock file is named after this inode; a daemon the
  # harness kills with -9 leaves it behind (see nh_cleanup)
  NH_NS_INODES+=("$(stat -L -c %i "/run/netns/$ns" 2>/dev/null)")
  nh_run ip -n "$ns" link set lo up || return 1
  # no IPv6 chatter (DAD, router solicitations) in captures
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 >>"$NH_OUT/setup.log" 2>&1 || true
}

# nh_sysctl ROLE KEY=VALUE...
nh_sysctl() {
  local ns
  ns=$(nh_ns "$1")
  shift
  nh_run ip netns exec "$ns" sysctl -qw "$@"
}

nh_build_topology() {
  local sw cl n ns ip peer r
  for r in sw client "${NH_NODES[@]}"; do
    nh_netns_add "$r" || return 1
  done
  sw=$(nh_ns sw)
  cl=$(nh_ns client)

  nh_run ip -n "$sw" link add br0 type bridge stp_state 0 forward_delay 0 || return 1

  # client: its own end 1500, bridge-side end 1600
  nh_run ip -n "$sw" link add to-client mtu "$NH_NODE_MTU" type veth peer name eth0 \
    address "${NH_MAC_SET[client]}" mtu "$NH_CLIENT_MTU" netns "$cl" || return 1
  for n in "${NH_NODES[@]}"; do
    ns=$(nh_ns "$n")
    # defaults first so eth0 inherits them, then explicit per-device values
    nh_sysctl "$n" net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
      net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
      net.ipv4.conf.default.arp_ignore=1 net.ipv4.conf.default.arp_announce=2 || return 1
    nh_run ip -n "$sw" link add "to-$n" mtu "$NH_NODE_MTU" type veth peer name eth0 \
      address "${NH_MAC_SET[$n]}" mtu "$NH_NODE_MTU" netns "$ns" || return 1
    nh_sysctl "$n" net.ipv4.conf.eth0.rp_filter=0 net.ipv4.conf.lo.rp_filter=0 \
      net.ipv4.conf.eth0.arp_ignore=1 net.ipv4.conf.eth0.arp_announce=2 || return 1
  done

  for peer in to-client "${NH_NODES[@]/#/to-}"; do
    nh_run ip -n "$sw" link set "$peer" master br0 || return 1
    # XDP_TX out of a veth needs the peer's NAPI running: GRO on (and XDP_PASS below)
    nh_run ip netns exec "$sw" ethtool -K "$peer" gro on || return 1
    nh_run ip -n "$sw" link set "$peer" up || return 1
  done
  # GRO on the peer alone is not enough for XDP_TX out of a veth on 6.18: with
  # GRO only, XDP_TX frames wait in the peer's queue until other traffic kicks
  # the peer's NAPI (connections time out). An XDP program on the
  # peer makes veth kick it at once, so every bridge-side end gets XDP_PASS.
  # NH_PEER_XDP=0 skips this (to reproduce the problem).
  if [[ ${NH_PEER_XDP:-1} == 1 ]]; then
    nh_run ip netns exec "$sw" "$NH_PY" "$NH_HERE/xdp_pass.py" to-client "${NH_NODES[@]/#/to-}" || return 1
  fi
  nh_run ip -n "$sw" link set br0 mtu "$NH_NODE_MTU" || return 1
  nh_run ip -n "$sw" link set br0 up || return 1

  # client
  nh_sysctl client net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    net.ipv4.conf.eth0.rp_filter=0 || return 1
  nh_run ip -n "$cl" addr add "$NH_CLIENT_IP/$NH_PREFIX_LEN" dev eth0 || return 1
  nh_run ip netns exec "$cl" ethtool -K eth0 tx off tso off gso off || return 1
  nh_run ip -n "$cl" link set eth0 up || return 1
  nh_run ip -n "$cl" route add "$NH_VIP/32" via "${NH_NODE_IP[node1]}" || return 1
  nh_sysctl client net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0 \
    net.ipv6.conf.lo.disable_ipv6=0 || return 1
  nh_run ip -n "$cl" addr add "$NH_CLIENT_IP6/$NH_PREFIX_LEN6" dev eth0 nodad || return 1
  nh_run ip -n "$cl" route add "$NH_VIP6/128" via "${NH_NODE_IP6[node1]}" || return 1

  # nodes
  for n in "${NH_NODES[@]}"; do
    ns=$(nh_ns "$n")
    ip=${NH_NODE_IP[$n]}
    nh_run ip -n "$ns" addr add "$ip/$NH_PREFIX_LEN" dev eth0 || return 1
    nh_run ip -n "$ns" addr add "$NH_VIP/32" dev lo || return 1
    nh_sysctl "$n" net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0 \
      net.ipv6.conf.lo.disable_ipv6=0 || return 1
    nh_run ip -n "$ns" addr add "${NH_NODE_IP6[$n]}/$NH_PREFIX_LEN6" dev eth0 nodad || return 1
    nh_run ip -n "$ns" addr add "$NH_VIP6/128" dev lo nodad || return 1
    nh_run ip netns exec "$ns" ethtool -K eth0 tx off tso off gso off || return 1
    nh_run ip -n "$ns" link set eth0 up || return 1
  done
  # The balancer's XDP fast path needs forwarding on its ingress interface:
  # bpf_fib_lookup answers FWD_DISABLED otherwise and nilb falls back to its
  # slower TC path (it warns). NH_BALANCER_FORWARDING=0 tests that slow path.
  if [[ ${NH_BALANCER_FORWARDING:-1} == 1 ]]; then
    nh_sysctl node1 net.ipv4.conf.eth0.forwarding=1 net.ipv4.conf.all.send_redirects=0 \
      net.ipv4.conf.eth0.send_redirects=0 || return 1
  fi

  # verify the GRO setting really took (it is the one that silently breaks XDP_TX)
  for peer in to-client "${NH_NODES[@]/#/to-}"; do
    if ! ip netns exec "$sw" ethtool -k "$peer" 2>/dev/null | grep -q '^generic-receive-offload: on'; then
      echo "  GRO is not on for $sw/$peer"
      return 1
    fi
    if [[ ${NH_PEER_XDP:-1} == 1 ]] && ! ip -n "$sw" -d link show dev "$peer" | grep -q 'prog/xdp'; then
      echo "  no XDP_PASS program on $sw/$peer"
      return 1
    fi
  done
}

# ------------------------------------------------------------------ IPv6-only cluster network
#
# nh_cluster6_on turns the nodes' link into an IPv6-only cluster network in
# place (the v6-cluster-* scenarios; nh_cluster6_off undoes it):
#
#   client   10.77.0.2/24 and 2001:db8:77::2/64 (unchanged)
#            route 10.77.0.100/32 via inet6 2001:db8:77::11 (an IPv4 route with an
#            IPv6 next hop, resolved by NDP), 2001:db8:77:ff::80/128 via 2001:db8:77::11
#   node1..3 eth0: 2001:db8:77::1N/64 only - the IPv4 address is removed, so no IPv4
#            packet can have a node as its source or destination; the VIPs stay on lo;
#            route 10.77.0.2/32 via inet6 2001:db8:77::2 (the DSR replies of IPv4 VIPs);
#            accept_ra 0; node1: IPv6 forwarding on eth0 (bpf_fib_lookup for IPv6 says
#            FWD_DISABLED without it, like IPv4)
#
# Every IPv4 packet left on the wire is then between the client and the IPv4 VIP;
# GUE, health checks, second chance and NDP are IPv6. The daemons must not run
# while it switches (their node addresses change).
NH_CLUSTER6_TOPO=0        # 1 while the nodes' link is IPv6 only (nh_cluster6_on)

nh_cluster6_on() {
  local n m ns cl
  cl=$(nh_ns client)
  for n in "${NH_NODES[@]}"; do
    ns=$(nh_ns "$n")
    nh_sysctl "$n" net.ipv6.conf.eth0.accept_ra=0 net.ipv6.conf.default.accept_ra=0 || return 1
    nh_run ip -n "$ns" addr del "${NH_NODE_IP[$n]}/$NH_PREFIX_LEN" dev eth0 || return 1
    nh_run ip -n "$ns" route add "$NH_CLIENT_IP/32" via inet6 "$NH_CLIENT_IP6" dev eth0 || return 1
    nh_run ip -n "$ns" -4 neigh flush dev eth0 || return 1
  done
  NH_CLUSTER6_TOPO=1
  if [[ ${NH_BALANCER_FORWARDING:-1} == 1 ]]; then
    nh_sysctl node1 net.ipv6.conf.eth0.forwarding=1 || return 1
  fi
  nh_run ip -n "$cl" route replace "$NH_VIP/32" via inet6 "${NH_NODE_IP6[node1]}" dev eth0 || return 1
  nh_run ip -n "$cl" -4 neigh flush dev eth0 || return 1
  # every node and the client reach each other over IPv6 (this also fills the
  # neighbour tables, so the balancer's first packets take the fast path)
  for n in "${NH_NODES[@]}"; do
    if ! nh_wait_until 5 nh_fg client ping -6 -q -c 1 -W 1 "${NH_NODE_IP6[$n]}" >/dev/null; then
      echo "  client cannot ping6 $n (${NH_NODE_IP6[$n]}) on the IPv6-only cluster network"
      return 1
    fi
    for m in "${NH_NODES[@]}"; do
      [[ $n == "$m" ]] && continue
      if ! nh_wait_until 5 nh_fg "$n" ping -6 -q -c 1 -W 1 "${NH_NODE_IP6[$m]}" >/dev/null; then
        echo "  $n cannot ping6 $m (${NH_NODE_IP6[$m]}) on the IPv6-only cluster network"
        return 1
      fi
    done
    if ! nh_fg "$n" ping -6 -q -c 1 -W 1 "$NH_CLIENT_IP6" >/dev/null; then
      echo "  $n cannot ping6 the client ($NH_CLIENT_IP6)"
      return 1
    fi
  done
  for n in "${NH_NODES[@]}"; do
    if [[ -n $(ip -n "$(nh_ns "$n")" -4 addr show dev eth0) ]]; then
      echo "  $n's eth0 still has an IPv4 address"
      return 1
    fi
  done
}

# nh_cluster6_off: the dual-stack link of nh_build_topology again (IPv4 node
# addresses back, the IPv4 routes via the nodes' IPv4 addresses, node1's IPv6
# forwarding off); pings over IPv4 fill the ARP tables again
nh_cluster6_off() {
  local n ns cl
  cl=$(nh_ns client)
  for n in "${NH_NODES[@]}"; do
    ns=$(nh_ns "$n")
    nh_run ip -n "$ns" addr replace "${NH_NODE_IP[$n]}/$NH_PREFIX_LEN" dev eth0 || return 1
    nh_run ip -n "$ns" route del "$NH_CLIENT_IP/32" via inet6 "$NH_CLIENT_IP6" dev eth0 || return 1
  done
  nh_sysctl node1 net.ipv6.conf.eth0.forwarding=0 || return 1
  nh_run ip -n "$cl" route replace "$NH_VIP/32" via "${NH_NODE_IP[node1]}" dev eth0 || return 1
  NH_CLUSTER6_TOPO=0
  for n in "${NH_NODES[@]}"; do
    if ! nh_wait_until 5 nh_fg client ping -q -c 1 -W 1 "${NH_NODE_IP[$n]}" >/dev/null; then
      echo "  client cannot ping $n (${NH_NODE_IP[$n]}) after the IPv4 addresses came back"
      return 1
    fi
    nh_fg "$n" ping -q -c 1 -W 1 "$NH_CLIENT_IP" >/dev/null
    [[ $n == node1 ]] || nh_fg node1 ping -q -c 1 -W 1 "${NH_NODE_IP[$n]}" >/dev/null
  done
}

# nh_mount_bpffs DIR: mount a bpffs of our own at DIR in the root mount
# namespace, for pins that must outlive a daemon (`ip netns exec` gives each
# command its own mount namespace, which dies with it; mounts that exist when
# the command starts are copied into it). Remembered for nh_cleanup.
nh_mount_bpffs() {
  mkdir -p "$1" || return 1
  nh_run mount -t bpf bpf "$1" || return 1
  NH_MOUNTS+=("$1")
}

# nh_mac ROLE: MAC address of eth0 in that namespace (read from ip link).
nh_mac() {
  ip -n "$(nh_ns "$1")" -o link show dev eth0 2>/dev/null |
    sed -n 's#.*link/ether \([0-9a-f:]*\).*#\1#p'
}

# nh_alive PID: true while the process exists and is not a zombie.
nh_alive() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $st && $st != Z ]]
}

# nh_wait_until SECONDS CMD...: poll CMD every 0.1 s, bounded by count and time.
nh_wait_until() {
  local secs=$1 i tries end
  shift
  tries=$((secs * 10))
  end=$((SECONDS + secs + 1))
  for ((i = 0; i < tries && SECONDS <= end; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  "$@"
}

# nh_bg DESC LOGFILE ROLE CMD...: start CMD in namespace ROLE in the background.
# `ip netns exec` execs the command, so $! is the command's own pid.
# Sets NH_BG_PID.
nh_bg() {
  local desc=$1 log=$2 ns
  ns=$(nh_ns "$3")
  shift 3
  ip netns exec "$ns" "$@" </dev/null >"$log" 2>&1 7>&- 8>&- &
  NH_BG_PID=$!
  NH_PID_DESC[$NH_BG_PID]=$desc
  NH_STARTED=$((NH_STARTED + 1))
}

# nh_fg ROLE CMD...: run CMD in namespace ROLE, output to our stdout, and wait
# for it in a way that a trapped INT/TERM interrupts (cleanup then kills it).
# Returns CMD's exit status.
nh_fg() {
  local ns pid rc
  ns=$(nh_ns "$1")
  shift
  ip netns exec "$ns" "$@" </dev/null 7>&- 8>&- &
  pid=$!
  NH_PID_DESC[$pid]="$1 in $ns"
  NH_STARTED=$((NH_STARTED + 1))
  wait "$pid"
  rc=$?
  unset "NH_PID_DESC[$pid]"
  return "$rc"
}

# nh_local CMD...: like nh_fg, but in the harness's own namespace (helpers that
# only read files, e.g. state.py wait): a trapped INT/TERM interrupts the wait.
nh_local() {
  local pid rc
  "$@" </dev/null 7>&- 8>&- &
  pid=$!
  NH_PID_DESC[$pid]="$1"
  NH_STARTED=$((NH_STARTED + 1))
  wait "$pid"
  rc=$?
  unset "NH_PID_DESC[$pid]"
  return "$rc"
}

# nh_now: wall-clock time in seconds with microseconds (same clock as Python's time.time())
nh_now() { local t=$EPOCHREALTIME; printf '%s' "${t/,/.}"; }

# nh_calc EXPR: floating-point arithmetic (awk), 3 decimals
nh_calc() { awk "BEGIN { printf \"%.3f\", $* }"; }

nh_not_alive() { ! nh_alive "$1"; }

# nh_stop PID SIGNAL TIMEOUT: signal a process we started, wait (bounded) for it
# to exit, SIGKILL it if it does not; reap it. Sets NH_LAST_RC to its exit
# status (128+n for a signal, 255 if it had to be killed or was not our child).
# (stderr off: bash reports a background job killed by a signal, e.g.
# "line N: PID Killed ...", whenever it notices; the caller prints the status)
nh_stop() { nh_stop_ "$@" 2>/dev/null; }
nh_stop_() {
  local pid=$1 sig=$2 secs=$3
  NH_LAST_RC=255
  if nh_alive "$pid"; then
    kill "-$sig" "$pid" 2>/dev/null
    if ! nh_wait_until "$secs" nh_not_alive "$pid"; then
      echo "  ${NH_PID_DESC[$pid]:-pid $pid} did not exit within ${secs}s after SIG$sig; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null
      nh_wait_until 5 nh_not_alive "$pid"
      wait "$pid" 2>/dev/null
      unset "NH_PID_DESC[$pid]"
      NH_LAST_RC=255
      return 1
    fi
  fi
  wait "$pid" 2>/dev/null
  NH_LAST_RC=$?
  unset "NH_PID_DESC[$pid]"
  return 0
}

# nh_cleanup: stop our processes, delete our namespaces, verify nothing is left.
# Safe to call more than once (EXIT after INT/TERM).
nh_cleanup() {
  [[ $NH_CLEANED == 1 ]] && return 0
  NH_CLEANED=1
  local pid ns left p i
  for pid in "${!NH_PID_DESC[@]}"; do
    if nh_alive "$pid"; then
      nh_stop "$pid" TERM 10
    fi
  done
  # anything else still running inside our own namespaces (e.g. children of
  # the above); these namespaces were created by this run, so it is ours
  for ns in "${NH_CREATED_NS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -TERM "$p" 2>/dev/null
    done
  done
  for ns in "${NH_CREATED_NS[@]}"; do
    for ((i = 0; i < 30; i++)); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
      sleep 0.1
    done
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null
    done
  done
  for ns in "${NH_CREATED_NS[@]}"; do
    ip netns del "$ns" 2>/dev/null
  done
  # lock files of daemons in our namespaces (all stopped by now)
  local ino
  for ino in "${NH_NS_INODES[@]}"; do
    [[ $ino =~ ^[0-9]+$ ]] && rm -f -- /run/nilb/"$ino"-*.lock
  done
  left=""
  for ns in "${NH_CREATED_NS[@]}"; do
    [[ -e /run/netns/$ns ]] && left+=" $ns"
  done
  if [[ -n $left ]]; then
    echo "cleanup: namespaces left behind:$left"
  else
    echo "cleanup: removed ${#NH_CREATED_NS[@]} namespaces (prefix $NH_PREFIX), started ${NH_STARTED} processes, all stopped"
  fi
  # our directories outside NH_OUT (e.g. etcd's data on /dev/shm), once the
  # processes that wrote them are gone
  local d
  for d in "${NH_TMPDIRS[@]}"; do
    rm -rf -- "$d"
  done
  # our bpffs mounts, after every process that could hold pins in them is gone
  local m mleft=""
  for m in "${NH_MOUNTS[@]}"; do
    if mountpoint -q "$m"; then
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
      mountpoint -q "$m" && mleft+=" $m"
    fi
  done
  if ((${#NH_MOUNTS[@]})); then
    if [[ -n $mleft ]]; then
      echo "cleanup: bpffs still mounted:$mleft"
    else
      echo "cleanup: unmounted ${#NH_MOUNTS[@]} bpffs (pins of this run)"
    fi
  fi
  if [[ -n $NH_OUT && -d $NH_OUT ]]; then
    if [[ $NH_KEEP_OUT == 1 ]]; then
      echo "cleanup: logs kept in $NH_OUT"
    else
      rm -rf -- "$NH_OUT"
    fi
  fi
}
