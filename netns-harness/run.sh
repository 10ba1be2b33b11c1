#!/usr/bin/env bash
# run.sh - end-to-end test of nilb in network namespaces (real TCP/HTTP traffic).
#
#   netns-harness/run.sh [--demo] [--nilb PATH] [--keep-logs] [--only LIST]
#                        [--xdp-mode native|generic] [--out DIR] [--plot-out DIR] [--selftest]
#                        [SCENARIO...]
#
# Must run as root. Builds a private topology (see lib.sh), starts an HTTP backend
# and `nilb run` in every node namespace, then runs the scenarios, one file each
# in scenarios/ (NAME.sh defines scenario_NAME):
#   a  300 requests with distinct source ports via the VIP; split matches weights 1:1:2
#   b  DSR: replies from the VIP reach the client straight from node2/node3 (by MAC)
#   c  with XDP attached on node1: node1's own address (port 8080 and 80) and ping work
#   d  second chance: 30 long-lived connections survive a weight change + SIGHUP;
#      fresh connections then follow the new weights
#   h1 health down: HTTP server on node3 stopped; within fall_count x interval + timeout
#      (+ margin) no new connection reaches node3, after that none fails; node3 down
#   h2 health up: server on node3 stopped, then started again; node3 answers again
#      after rise_count checks and its bucket share returns to its weight
#   h3 drain: 20 keep-alive connections on node2 exchange data for 30 s across
#      `state: drained` + SIGHUP; no new connection lands on node2; drain undone
#   h4 broken YAML + SIGHUP: rejected (state, `nilb status`), tables and traffic unchanged
#   h5 weight change (paced steps) under 50 long-lived connections: zero resets
#   h6 ten SIGHUPs within one second, each a different weight set: last one applied
#   spoof   hand-built GUE to node2 from outside the cluster and claiming node2's own
#      address: dropped and counted (tc_drop_not_cluster, tc_drop_self_unmarked),
#      no SYN-ACK on the wire; the same packets from node1's address are accepted
#   encap-check  node3's TC and XDP programs removed: node1's encapsulated check takes node3
#      out within fall x interval + timeout, 60/60 new connections succeed; back after
#      node3's nilb restarts
#   neigh  node1's neighbour entry for node3 set STALE with a wrong MAC (node3 silent,
#      health checks off): nilb re-resolves it; connections to node3 recover within 5 s
#   mtu 1500-byte wire between the nodes: 30 uploads of 100 KB whose first hop is
#      remote complete (ICMP "fragmentation needed" from the VIP), with node1's
#      forwarding on (XDP fast path) and off (slow path); the client learns the PMTU
#   udp UDP services follow the table: 300 queries per phase (drain, dead backend,
#      return) all answered by their bucket's first hop; a connected-UDP flow
#      survives a move
#   timewait a TIME_WAIT socket on the first hop does not take the packets of a
#      client's live connection (reused port) on the second hop
#   rst unknown_flow drop/local/rst: a client whose backend went offline hangs,
#      gets the stack's RST, or nilb's RST in < 1 s
#   restart fail-static: node1's nilb SIGKILLed, then stopped with --keep-dataplane
#      (an upgrade); traffic flows in the gaps, the restarted daemon adopts the
#      pinned maps, no bucket moves, 30 held connections see no reset
#   downrestart  node3 down; node1's nilb killed (-9) and restarted 3 times: node3 gets
#      no bucket before (or after) its first check, no new connection fails
#   removerestart  node3 removed from the file with 10 held connections on it; node1's
#      nilb killed and restarted: node3 still removing and second hop, 0 time-outs
#   growrestart  node1's nilb killed and restarted with a service added and web's table
#      resized, so the pinned pool grows: no XDP drop for want of a first hop, 0 resets
#   offlinecheck  node3 offline, its server stopped, active again: unknown, 0 buckets
#   drainedfallback  node1 drained and healthy, node2/node3 failing: node1 serves
#      everything (mode drained-fallback), no fail-open onto the dead ones
#   panic  panic_threshold_percent 50 with 1 of 3 healthy: spread over all; fail-open
#      left in paced steps (node1's buckets at most double per step)
#   xdpfail  node2 made a balancer by reload while a foreign XDP program holds its
#      eth0: a failed reload in state, status and metrics; role shown as running
#   clockstep  paced drains with the wall clock stepped -1 h / +1 h (restored at
#      once, also by trap): they end as without a step
#   dw  dynamic weights (cpu): node2's reported CPU rises to 95 %, its bucket share
#      falls in paced steps while the others rise, then returns; 36 held
#      connections see no reset; CSV + PNG of the shares over time
#   filters edge filters: SYN floods from an attacker namespace (a denied prefix read
#      from a list file, a source over a per-source SYN limit) while the client makes
#      300 requests; the list file changes + SIGHUP mid-flood; 300/300 succeed, the
#      floods are counted per rule and no denied SYN reaches a backend (captured)
#   nat NAT mode: TCP and UDP services on node1's own address (mode: nat, target ports),
#      node2/node3 without the VIP and ARP sysctls: 300 connections spread by weight,
#      300 UDP queries answered, every reply captured on the client from the service
#      address and none from a backend's; 30 held connections across a weight change
#      and across kill -9 + restart of node2's and node1's nilb: 0 resets; node1's own
#      port 80, its outgoing connections and ping untouched; NAT counters; the sweep
#   ecmp a router namespace running BIRD with ECMP over the 3 nodes as balancers (BGP
#      through BIRD on each), tables shared through etcd (started by the harness): 300
#      new connections spread over balancers and backends, the 3 live tables identical;
#      withdraw on no healthy backend; SIGTERM withdraws first
#   ecmp-fail a follower drained, the tables' leader killed with -9 and its BGP session
#      torn down under 30 held connections: 0 resets, a new leader, tables identical
#   ecmp-churn 100 random health and weight events under traffic: the 3 live tables
#      agree again within 1 s after each; 0 resets of 30 held connections
#   etcd-down etcd stopped for 30 s under traffic: 0 failed requests, tables unchanged,
#      following resumes once etcd answers
#   v6-cluster-http  the nodes' link made IPv6 only (no IPv4 node address), every nilb
#      with its IPv6 --node-address, IPv6 balancers and DIPs: 300 IPv6 connections to
#      the IPv6 VIP spread by weight, DSR from node2/node3 MACs, on the wire only IPv6
#      GUE and no IPv4 but client <-> IPv4 VIP
#   v6-cluster-second-chance  the same network: 30 held IPv6 connections across a
#      weight change, 0 resets, IPv6 second-chance forwards; node1's nilb killed -9
#   v6-cluster-v4vip  the same network: the IPv4 VIP carried in outer IPv6: 300
#      connections by weight, DSR, 30 held across a weight change with 0 resets
#   e  SIGTERM: every nilb exits 0 and leaves no XDP program / tc ingress filter
# Every scenario first establishes the base state (harness.sh: weights 1:1:2, every
# backend up, nilb running everywhere, node1's table settled) and leaves it behind
# (e leaves the daemons stopped; a later scenario starts them again), so any
# scenario runs alone or in any order.
# Default: all, in the order a b c d h1 h2 h3 h4 h5 h6 spoof mtu encap-check neigh udp quic timewait
# rst filters nat chain chainwalk v6-http v6-second-chance v6-cluster-http v6-cluster-second-chance
# v6-cluster-v4vip restart downrestart removerestart growrestart offlinecheck drainedfallback panic xdpfail
# clockstep ecmp ecmp-fail ecmp-churn etcd-down dw e.
# SCENARIO... run in the order given; --only LIST (comma-separated) runs a subset in
# the default order. "health" means h1,h2,h3,h4,h5,h6, "all" everything.
# Prints "PASS <scenario>: ..." or "FAIL <scenario>: ..." per scenario and a closing
# "harness: N passed, N failed"; exits 1 if anything failed.
#
# --demo      topology + one 300-request burst shown as a table + the DSR check; nothing else
# --selftest  no nilb needed: checks topology, backends, client, capture and cleanup only
# --nilb PATH nilb binary (default: <repo>/target/release/nilb)
# --keep-logs keep the run's directory (logs, pcaps, JSON); it is also kept when a scenario fails
# --out DIR   put the run's directory under DIR (default: $TMPDIR or /tmp)
# --plot-out DIR  also copy dw's dynamic-weights.csv and dynamic-weights.png to DIR
#
# Environment:
#   NILB_EXTRA_ARGS             extra words appended to every `nilb run` (word-split)
#   NILB_XDP_MODE               default for --xdp-mode (otherwise nilb's own default)
#   NILB_READY_TIMEOUT          seconds to wait for each nilb to be ready (its state
#                               carries its pid; default 30)
#   NILB_HARNESS_DEFAULTS_EXTRA YAML lines inserted under `defaults:` of the generated
#                               config (2-space indented); not table_size, health_check
#                               or rebalance, which the harness sets itself
#   NILB_HARNESS_PREFIX         namespace name prefix (default nh<pid>)
#   NILB_HARNESS_OUT            same as --out
#   NH_PY                       python3 to use (default /usr/bin/python3)
#   NH_PEER_XDP=0               no XDP_PASS on the bridge-side veth ends (reproduces the
#                               XDP_TX trap: connections through the balancer time out)
#   NH_BALANCER_FORWARDING=0    leave forwarding off on node1's eth0 (nilb's slow TC path)
#   NH_HEALTH_CHECK             the service's checker: http (default: GET /healthz on port 80),
#                               kglb (the same in kglb's `checker:` nesting), tcp, or default
#                               (no health_check key: nilb's default TCP connect)
#   NH_HEALTH_MARGIN            seconds of scheduling margin on top of the health bounds in
#                               h1/h2 (default 0.5)
#   NH_DW_RESTART=0             skip dw's restart check (by default dw also SIGKILLs and
#                               restarts node1's nilb while dynamic weights have shaped
#                               its table; the adopted table must not move)
# shellcheck disable=SC2001 # sed over multi-line text is clearer here
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"
# shellcheck source=harness.sh
source "$HERE/harness.sh"

usage() { sed -n '2,/^# shellcheck disable/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# The scenarios are the files of scenarios/: NAME.sh defines scenario_NAME
# and carries a marker line `# scenario-order: N [health] [named]` (N: the
# run order; health: one of the health group; named: run only when named).
# A file without the marker or without its function fails the run, so a
# scenario is one file and cannot be left out by accident.
ALL_SCENARIOS=() PENDING_SCENARIOS=() HEALTH_SCENARIOS=()
scenario_list() {
  local f name marker lines="" bad=0
  for f in "$HERE"/scenarios/*.sh; do
    name=$(basename "$f" .sh)
    marker=$(sed -n 's/^# scenario-order: *//p' "$f" | head -n 1)
    if [[ ! $marker =~ ^[0-9]+( +(health|named))*$ ]]; then
      echo "run.sh: scenarios/$name.sh has no valid '# scenario-order: N [health] [named]' line" >&2
      bad=1
      continue
    fi
    lines+="$marker $name"$'\n'
  done
  ((bad == 0)) || return 1
  printf '%s' "$lines" | sort -n -k1,1 -s
}
SCENARIO_LINES=$(scenario_list) || exit 2
while read -r order rest; do
  [[ -n ${order:-} ]] || continue
  read -ra words <<<"$rest"
  name=${words[-1]}
  if [[ " ${words[*]} " == *" named "* ]]; then PENDING_SCENARIOS+=("$name"); else ALL_SCENARIOS+=("$name"); fi
  [[ " ${words[*]} " == *" health "* ]] && HEALTH_SCENARIOS+=("$name")
done <<<"$SCENARIO_LINES"
unset order rest words name
for f in "$HERE"/scenarios/*.sh; do
  # shellcheck source=/dev/null
  source "$f"
done
for s in "${ALL_SCENARIOS[@]}" "${PENDING_SCENARIOS[@]}"; do
  if ! declare -F "scenario_$s" >/dev/null; then
    echo "run.sh: scenarios/$s.sh does not define scenario_$s" >&2
    exit 2
  fi
done

DEMO=0 SELFTEST=0 KEEP=0
NILB=""
ONLY=""
NAMES=()
XDP_MODE=${NILB_XDP_MODE:-}
OUTBASE=${NILB_HARNESS_OUT:-}
PLOT_OUT=""
READY_TIMEOUT=${NILB_READY_TIMEOUT:-30}
while (($#)); do
  case $1 in
    --demo) DEMO=1; shift ;;
    --selftest) SELFTEST=1; shift ;;
    --keep-logs) KEEP=1; shift ;;
    --nilb) NILB=${2:?--nilb needs a path}; shift 2 ;;
    --nilb=*) NILB=${1#*=}; shift ;;
    --only) ONLY=${2:?--only needs a list}; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --xdp-mode) XDP_MODE=${2:?}; shift 2 ;;
    --xdp-mode=*) XDP_MODE=${1#*=}; shift ;;
    --out) OUTBASE=${2:?}; shift 2 ;;
    --out=*) OUTBASE=${1#*=}; shift ;;
    --plot-out) PLOT_OUT=${2:?}; shift 2 ;;
    --plot-out=*) PLOT_OUT=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *) NAMES+=("$1"); shift ;;
  esac
done
[[ -z $PLOT_OUT || $PLOT_OUT == /* ]] || PLOT_OUT=$PWD/$PLOT_OUT

# expand_names NAME...: the scenario names with "all" and "health" expanded;
# exits 2 on an unknown name or one without a scenario_NAME function
expand_names() {
  local s
  for s in "$@"; do
    case $s in
      all) printf '%s\n' "${ALL_SCENARIOS[@]}" ;;
      health) printf '%s\n' "${HEALTH_SCENARIOS[@]}" ;;
      *)
        if [[ " ${ALL_SCENARIOS[*]} ${PENDING_SCENARIOS[*]} " != *" $s "* ]] || ! declare -F "scenario_$s" >/dev/null; then
          echo "unknown scenario: $s (known: ${ALL_SCENARIOS[*]} ${PENDING_SCENARIOS[*]}, health, all)" >&2
          return 2
        fi
        printf '%s\n' "$s"
        ;;
    esac
  done
}
RUN=()
if [[ -n $ONLY && ${#NAMES[@]} -gt 0 ]]; then
  echo "give the scenarios either with --only LIST or as arguments, not both" >&2
  exit 2
elif ((${#NAMES[@]})); then
  LIST=$(expand_names "${NAMES[@]}") || exit 2
  mapfile -t RUN <<<"$LIST"
else
  IFS=, read -ra parts <<<"${ONLY:-all}"
  LIST=$(expand_names "${parts[@]}") || exit 2
  for s in "${ALL_SCENARIOS[@]}" "${PENDING_SCENARIOS[@]}"; do
    grep -qxF "$s" <<<"$LIST" && RUN+=("$s")
  done
fi
case ${NH_HEALTH_CHECK:=http} in
  http | kglb | tcp | default) ;;
  *) echo "NH_HEALTH_CHECK must be http, kglb, tcp or default, not $NH_HEALTH_CHECK" >&2; exit 2 ;;
esac

if [[ $(id -u) != 0 ]]; then
  echo "run.sh must be run as root (it creates network namespaces)" >&2
  exit 2
fi
missing=""
for c in ip tc ethtool tcpdump nsenter timeout ping sysctl "$NH_PY"; do
  command -v "$c" >/dev/null 2>&1 || missing+=" $c"
done
if [[ -n $missing ]]; then
  echo "missing commands:$missing (Debian: iproute2 ethtool tcpdump util-linux coreutils iputils-ping procps python3)" >&2
  exit 2
fi
if ((SELFTEST == 0)); then
  NILB=${NILB:-$REPO/target/release/nilb}
  [[ $NILB == /* ]] || NILB=$PWD/$NILB
  if [[ ! -x $NILB ]]; then
    echo "FAIL setup: nilb binary not found or not executable at $NILB (cargo build --release, or --nilb PATH)"
    echo "harness: 0 passed, 1 failed"
    exit 1
  fi
fi

START=$SECONDS
NPASS=0 NFAIL=0
RESULTS=()
pass() { local s=$1; shift; echo "PASS $s: $*"; RESULTS+=("PASS $s: $*"); NPASS=$((NPASS + 1)); }
fail() { local s=$1; shift; echo "FAIL $s: $*"; RESULTS+=("FAIL $s: $*"); NFAIL=$((NFAIL + 1)); NH_KEEP_OUT=1; }
header() { echo; echo "=== $* ==="; }
# setup_failed WHY: a failed set-up ends the run
setup_failed() {
  fail setup "$1"
  echo "harness: $NPASS passed, $NFAIL failed"
  exit 1
}

# fds 7/8 keep the harness's own stdout/stderr: a trap can fire while a function's
# output is redirected to a file, and its messages must still reach the user
exec 7>&1 8>&2
on_signal() {
  echo >&7
  echo "interrupted by SIG$1; cleaning up" >&7
  NH_KEEP_OUT=1
  exit "$2"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'nh_cleanup >&7 2>&8' EXIT

nh_init "$OUTBASE" || { echo "cannot create the output directory"; exit 1; }
((KEEP)) && NH_KEEP_OUT=1
# The run uses its own copy of the binary: a rebuild of target/release/nilb while
# the harness runs must not mix versions (e.g. `nilb status` of a newer build
# reading the state file of an older running daemon).
# (ELF binaries only: a script such as selftest/fake-nilb finds its files next to itself)
NILB_SRC=$NILB
if ((SELFTEST == 0)) && [[ $(head -c 4 "$NILB_SRC" | tail -c 3) == ELF ]]; then
  NILB=$NH_OUT/nilb
  cp "$NILB_SRC" "$NILB" || setup_failed "cannot copy $NILB_SRC to $NILB"
fi
# the Python helpers (state.py, tables.py, dynweight.py) run nilb's JSON tools with it
export NH_NILB=$NILB
CFG=$NH_OUT/nilb.yaml

echo "nilb netns harness: prefix $NH_PREFIX, output $NH_OUT${NILB:+, nilb $NILB_SRC}$([[ $NILB != "$NILB_SRC" ]] && echo " (run from a copy in the output directory)")"
header "topology"
nh_build_topology || setup_failed "could not build the topology (see $NH_OUT/setup.log)"
echo "  namespaces: ${NH_CREATED_NS[*]}"
if ! start_backends || ! sanity; then
  setup_failed "backends or basic connectivity broken"
fi

if ((SELFTEST)); then
  # shellcheck source=selftest/selftest.sh
  source "$HERE/selftest/selftest.sh"
  selftest
else
  base_config
  echo "  config: $CFG (weights $(weights_ratio))"
  nilb_check || setup_failed "nilb check rejected the harness config"
  mount_pins || setup_failed "could not mount a bpffs for the pins (see $NH_OUT/setup.log)"
  header "starting nilb on every node"
  start_nilb || setup_failed "nilb did not become ready on every node"
  if ((DEMO)); then
    header "demo: 300 requests through the VIP $NH_VIP:80, each on a new connection"
    if burst_dist demo 20000 --table; then pass demo "$DIST_NUMBERS"; else fail demo "$DIST_NUMBERS"; fi
    header "demo: direct server return"
    if dsr_capture demo 21000 90; then
      pass dsr "VIP-sourced frames by source MAC: $DSR_NUMBERS"
    else
      fail dsr "expected frames from node2 and node3 MACs: $DSR_NUMBERS"
    fi
  else
    echo "  scenarios: ${RUN[*]}"
    for s in "${RUN[@]}"; do
      t=$SECONDS
      "scenario_$s"
      [[ $s == e ]] || check_daemons
      echo "  ($s: $((SECONDS - t)) s)"
    done
  fi
fi

header "summary ($((SECONDS - START)) s)"
for r in "${RESULTS[@]}"; do echo "$r"; done
if ((NFAIL)); then
  for f in "$NH_OUT"/nilb-*.log; do
    [[ -f $f ]] || continue
    echo "--- last lines of $(basename "$f")"
    log_tail "$f" 15
  done
fi
echo "harness: $NPASS passed, $NFAIL failed"
((NFAIL == 0))
