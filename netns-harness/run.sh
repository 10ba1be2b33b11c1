#!/usr/bin/env bash
# run.sh - end-to-end test of nilb in network namespaces (real TCP/HTTP traffic).
#
#   netns-harness/run.sh [--demo] [--nilb PATH] [--keep-logs] [--only LIST]
#                        [--xdp-mode native|generic] [--out DIR] [--plot-out DIR] [--selftest]
#
# Must run as root. Builds a private topology (see lib.sh), starts an HTTP backend
# and `nilb run` in every node namespace, then runs the scenarios:
#   a  300 requests with distinct source ports via the VIP; split matches weights 1:1:2
#   b  DSR: replies from the VIP reach the client straight from node2/node3 (by MAC)
#   c  with XDP attached on node1: node1's own address (port 8080 and 80) and ping work
#   d  second chance: 30 long-lived connections survive a weight change + SIGHUP;
#      fresh connections then follow the new weights
#   h1 health down: HTTP server on node3 stopped; within fall_count x interval + timeout
#      (+ margin) no new connection reaches node3, after that none fails; node3 down
#   h2 health up: server on node3 started again; node3 answers again after rise_count
#      checks and its bucket share returns to its weight
#   h3 drain: 20 keep-alive connections on node2 exchange data for 30 s across
#      `state: drained` + SIGHUP; no new connection lands on node2; drain undone
#   h4 broken YAML + SIGHUP: rejected (log, `nilb status`), tables and traffic unchanged
#   h5 weight change (paced steps) under 50 long-lived connections: zero resets
#   h6 ten SIGHUPs within one second, each a different weight set: last one applied
#   spoof   hand-built GUE to node2 from outside the cluster and claiming node2's own
#      address: dropped and counted (tc_drop_not_cluster, tc_drop_self_unmarked),
#      no SYN-ACK on the wire; the same packets from node1's address are accepted
#   restart fail-static: node1's nilb SIGKILLed, then stopped with --keep-dataplane
#      (an upgrade); traffic flows in the gaps, the restarted daemon adopts the
#      pinned maps, no bucket moves, 30 held connections see no reset
#   dw  dynamic weights (cpu): node2's reported CPU rises to 95 %, its bucket share
#      falls in paced steps while the others rise, then returns; 36 held
#      connections see no reset; CSV + PNG of the shares over time
#   e  SIGTERM: every nilb exits 0 and leaves no XDP program / tc ingress filter
# Order: a b c d h1 h2 h3 h4 h5 h6 spoof restart dw e (e stops nilb, so it is always last).
# --only takes a comma list of these; "health" means h1,h2,h3,h4,h5,h6, "all" everything.
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
#   NILB_READY_TIMEOUT          seconds to wait for "ready" in each nilb log (default 30)
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

usage() { sed -n '2,/^# shellcheck disable/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

DEMO=0 SELFTEST=0 KEEP=0
NILB=""
ONLY="all"
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
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -z $PLOT_OUT || $PLOT_OUT == /* ]] || PLOT_OUT=$PWD/$PLOT_OUT

ALL_SCENARIOS="a,b,c,d,h1,h2,h3,h4,h5,h6,spoof,restart,dw,e"
ONLY=${ONLY//all/$ALL_SCENARIOS}
ONLY=${ONLY//health/h1,h2,h3,h4,h5,h6}
for s in ${ONLY//,/ }; do
  if [[ ",$ALL_SCENARIOS," != *",$s,"* ]]; then
    echo "unknown scenario in --only: $s (known: $ALL_SCENARIOS, health, all)" >&2
    exit 2
  fi
done
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
want() { [[ ",$ONLY," == *",$1,"* ]]; }

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
  if ! cp "$NILB_SRC" "$NILB"; then
    echo "FAIL setup: cannot copy $NILB_SRC to $NILB"
    echo "harness: 0 passed, 1 failed"
    exit 1
  fi
fi
CFG=$NH_OUT/nilb.yaml
declare -A NILB_PID=()
declare -A WEIGHT=()
declare -A BSTATE=()      # node -> drained|offline in the generated config (unset: active)
declare -A BACKEND_PID=() # node -> pid of its backend.py
# health checking and pacing of the generated config (the bounds in h1/h2 derive from them)
HC_INTERVAL_MS=500 HC_TIMEOUT_MS=300 HC_RISE=2 HC_FALL=2
RB_MIN_INTERVAL_MS=200 RB_MAX_STEP_PERCENT=50 RB_MIN_BUCKET_AGE_MS=2000
HEALTH_MARGIN=${NH_HEALTH_MARGIN:-0.5}
DW_YAML=""                # the service's dynamic_weight flow mapping (dw only), empty: none
declare -A PIN_DIR=()     # node -> --pin-dir on a bpffs the harness mounted (restart needs it)
declare -A NILB_KEEP=()   # node -> 1 if its running nilb was started with --keep-dataplane

# json FILE EXPR: evaluate a Python expression over the JSON document d
json() { "$NH_PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }

# client ARGS...: client.py in the client namespace, bounded by `timeout`
client() { nh_fg client timeout 90 "$NH_PY" "$HERE/client.py" "$@"; }
# cl ARGS...: same, its JSON line goes to $OUT (no command substitution, so a
# signal interrupts the wait at once and cleanup can stop the client)
cl() {
  local rc
  client "$@" >"$NH_OUT/client.out"
  rc=$?
  OUT=$(<"$NH_OUT/client.out")
  return "$rc"
}

weights_str() { local n s=""; for n in "${NH_NODES[@]}"; do s+="${s:+,}$n=${WEIGHT[$n]}"; done; echo "$s"; }
weights_ratio() { local n s=""; for n in "${NH_NODES[@]}"; do s+="${s:+:}${WEIGHT[$n]}"; done; echo "$s"; }

# write_config W1 W2 W3: (re)write $CFG atomically with these weights (and the
# backend states in BSTATE)
write_config() {
  local i=0 n tmp=$CFG.tmp
  for n in "${NH_NODES[@]}"; do
    i=$((i + 1))
    WEIGHT[$n]=${!i}
  done
  {
    echo "version: 1"
    echo "cluster:"
    echo "  hash_seed: 0x5eed1234"
    echo "  balancers: [${NH_NODE_IP[node1]}]"
    echo "  gue_port: 19523"
    echo "  unknown_flow: drop"
    echo "defaults:"
    echo "  table_size: 1024"
    echo "  health_check: {interval_ms: $HC_INTERVAL_MS, timeout_ms: $HC_TIMEOUT_MS, rise_count: $HC_RISE, fall_count: $HC_FALL}"
    echo "  rebalance: {min_interval_ms: $RB_MIN_INTERVAL_MS, max_step_percent: $RB_MAX_STEP_PERCENT, min_bucket_age_ms: $RB_MIN_BUCKET_AGE_MS}"
    [[ -n ${NILB_HARNESS_DEFAULTS_EXTRA:-} ]] && printf '%s\n' "$NILB_HARNESS_DEFAULTS_EXTRA"
    echo "services:"
    echo "  - name: web"
    echo "    vip: $NH_VIP"
    echo "    port: 80"
    echo "    protocol: tcp"
    [[ -n $DW_YAML ]] && echo "    dynamic_weight: $DW_YAML"
    case $NH_HEALTH_CHECK in
      http) echo "    health_check: {http: {uri: /healthz, codes: [200]}}" ;;
      kglb) echo "    health_check: {checker: {http: {uri: /healthz, check_port: 80}}, fall_count: $HC_FALL, interval_ms: $HC_INTERVAL_MS, rise_count: $HC_RISE}" ;;
      tcp) echo "    health_check: {tcp: {check_port: 80}}" ;;
    esac
    echo "    backends:"
    for n in "${NH_NODES[@]}"; do
      echo "      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: ${WEIGHT[$n]}${BSTATE[$n]:+, state: ${BSTATE[$n]}}}"
    done
  } >"$tmp" && mv -f "$tmp" "$CFG"
}

nilb_check() {
  local out rc
  out=$("$NILB" check --config "$CFG" 2>&1)
  rc=$?
  if ((rc != 0)); then
    echo "  nilb check --config $CFG exited $rc:"
    printf '%s\n' "$out" | head -n 20 | sed 's/^/    | /'
    return 1
  fi
}

log_tail() { # log_tail FILE [N] (ANSI colour codes stripped)
  [[ -f $1 ]] && tail -n "${2:-15}" "$1" | sed 's/\x1b\[[0-9;]*m//g; s/^/    | /'
}

start_backends() {
  local n extra
  for n in "${NH_NODES[@]}"; do
    extra=()
    [[ $n == node1 ]] && extra=(--port 8080)
    nh_bg "backend $n" "$NH_OUT/backend-$n.log" "$n" "$NH_PY" "$HERE/backend.py" --name "$n" --port 80 "${extra[@]}"
    BACKEND_PID[$n]=$NH_BG_PID
  done
  for n in "${NH_NODES[@]}"; do
    local want=1
    [[ $n == node1 ]] && want=2
    if ! nh_wait_until 10 test_listening "$NH_OUT/backend-$n.log" "$want"; then
      echo "  backend on $n did not start:"
      log_tail "$NH_OUT/backend-$n.log"
      return 1
    fi
  done
}
test_listening() { [[ $(grep -c 'listening on' "$1" 2>/dev/null) -ge $2 ]]; }

# connectivity before nilb: pings (also fill the neighbour tables) and HTTP to every node address
sanity() {
  local n m k=0 out
  for n in "${NH_NODES[@]}"; do
    # (ping via nh_fg: ping catches SIGINT, which would make bash ignore a Ctrl-C)
    if ! nh_wait_until 5 nh_fg client ping -q -c 1 -W 1 "${NH_NODE_IP[$n]}" >/dev/null; then
      echo "  client cannot ping $n (${NH_NODE_IP[$n]})"
      return 1
    fi
    for m in "${NH_NODES[@]}"; do
      [[ $n == "$m" ]] && continue
      if ! nh_fg "$n" ping -q -c 1 -W 1 "${NH_NODE_IP[$m]}" >/dev/null; then
        echo "  $n cannot ping $m"
        return 1
      fi
    done
    nh_fg "$n" ping -q -c 1 -W 1 "$NH_CLIENT_IP" >/dev/null
  done
  for n in "${NH_NODES[@]}"; do
    k=$((k + 1))
    cl burst --host "${NH_NODE_IP[$n]}" --port 80 --count 3 --sport-base $((30000 + 10 * k)) --max-seconds 10
    out=$OUT
    if [[ $(json <(echo "$out") 'd["by_backend"].get("'"$n"'",0)') != 3 ]]; then
      echo "  HTTP to $n (${NH_NODE_IP[$n]}:80) from the client failed: $out"
      return 1
    fi
  done
  echo "  topology ok: client and nodes ping each other; HTTP to every node address answers with its name"
}

# mount_pins: a bpffs of the run's own per node ($NH_OUT/bpf-NODE), so that the
# maps nilb pins there survive the daemon (restart needs that; the default pin
# dir lives in the mount namespace `ip netns exec` creates for the daemon)
mount_pins() {
  local n
  for n in "${NH_NODES[@]}"; do
    nh_mount_bpffs "$NH_OUT/bpf-$n" || return 1
    PIN_DIR[$n]=$NH_OUT/bpf-$n/nilb
  done
  echo "  bpffs mounted for the pins: $NH_OUT/bpf-{$(IFS=,; echo "${NH_NODES[*]}")} (--pin-dir .../nilb)"
}

# start_nilb_on NODE [EXTRA...]: start `nilb run` in NODE's namespace (log
# nilb-NODE.log, truncated); sets NILB_PID[NODE] and NILB_ARGS
start_nilb_on() {
  local n=$1
  shift
  NILB_ARGS=(run --config "$CFG" --interface eth0 --node-address "${NH_NODE_IP[$n]}" --state-file "$NH_OUT/state-$n.yaml")
  [[ -n ${PIN_DIR[$n]:-} ]] && NILB_ARGS+=(--pin-dir "${PIN_DIR[$n]}")
  [[ -n $XDP_MODE ]] && NILB_ARGS+=(--xdp-mode "$XDP_MODE")
  # shellcheck disable=SC2206 # word splitting of NILB_EXTRA_ARGS is intended
  [[ -n ${NILB_EXTRA_ARGS:-} ]] && NILB_ARGS+=($NILB_EXTRA_ARGS)
  local x
  for x in "$@"; do # (not twice: NILB_EXTRA_ARGS may already hold it)
    [[ " ${NILB_ARGS[*]} " == *" $x "* ]] || NILB_ARGS+=("$x")
  done
  nh_bg "nilb on $n" "$NH_OUT/nilb-$n.log" "$n" "$NILB" "${NILB_ARGS[@]}"
  NILB_PID[$n]=$NH_BG_PID
  NILB_KEEP[$n]=0
  [[ " ${NILB_ARGS[*]} " == *" --keep-dataplane "* ]] && NILB_KEEP[$n]=1
}
# wait_ready NODE: bounded wait for "ready" in its log (or its death)
wait_ready() {
  local n=$1
  if ! nh_wait_until "$READY_TIMEOUT" ready_or_dead "$n"; then
    echo "  nilb on $n: no 'ready' in its log within ${READY_TIMEOUT}s"
    log_tail "$NH_OUT/nilb-$n.log"
    return 1
  fi
  if ! nh_alive "${NILB_PID[$n]}"; then
    nh_stop "${NILB_PID[$n]}" TERM 1
    echo "  nilb on $n exited with status $NH_LAST_RC before it was ready:"
    log_tail "$NH_OUT/nilb-$n.log"
    return 1
  fi
}

start_nilb() {
  local n
  for n in "${NH_NODES[@]}"; do
    start_nilb_on "$n"
    echo "  started nilb on $n (pid $NH_BG_PID): nilb ${NILB_ARGS[*]}"
  done
  for n in "${NH_NODES[@]}"; do
    wait_ready "$n" || return 1
    echo "  nilb on $n is ready; eth0: $(attach_info "$n")"
  done
}
# attach_info NODE: what is attached to eth0 (XDP program, tc ingress filters)
attach_info() {
  local ns xdp filt
  ns=$(nh_ns "$1")
  xdp=$(ip -n "$ns" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1)
  filt=$(tc -n "$ns" filter show dev eth0 ingress 2>/dev/null | grep -c .)
  echo "xdp: ${xdp:-none}, tc ingress filter lines: $filt"
}
ready_or_dead() { grep -qw ready "$NH_OUT/nilb-$1.log" 2>/dev/null || ! nh_alive "${NILB_PID[$1]}"; }

check_daemons() {
  local n
  for n in "${!NILB_PID[@]}"; do
    if ! nh_alive "${NILB_PID[$n]}"; then
      echo "  NOTE: nilb on $n is no longer running; last log lines:"
      log_tail "$NH_OUT/nilb-$n.log" 10
    fi
  done
}

# nilb_stats NODE [--all]: `nilb stats` of NODE's data plane: from the pins on the
# harness's bpffs if there are any (works while no daemon runs), otherwise inside
# the daemon's mount + net namespace
nilb_stats() {
  local pid=${NILB_PID[$1]:-}
  if [[ -n ${PIN_DIR[$1]:-} ]]; then
    timeout --foreground 10 "$NILB" stats --pin-dir "${PIN_DIR[$1]}" "${@:2}" 2>&1
    return
  fi
  [[ -n $pid ]] && nh_alive "$pid" || return 1
  timeout --foreground 10 nsenter --target "$pid" --mount --net "$NILB" stats "${@:2}" 2>&1
}
# counter NAME FILE: a counter's value in a saved `nilb stats --all` output (0 if absent)
counter() { awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }' "$2"; }

# burst_dist LABEL SPORT_BASE [--table]: 300 requests via the VIP, judged against WEIGHT
burst_dist() {
  local label=$1 base=$2 table=${3:-} out res summary
  res=$NH_OUT/burst-$label.json
  cl burst --host "$NH_VIP" --port 80 --count 300 --sport-base "$base" \
    --max-seconds 25 --max-consecutive-failures 10 --out "$res"
  out=$OUT
  echo "  client: $out"
  echo "  weights $(weights_ratio) -> expected share per backend; chi-square goodness of fit, reject at p < 0.001"
  "$NH_PY" "$HERE/dist.py" --result "$res" --weights "$(weights_str)" ${table:+--table} >"$NH_OUT/dist-$label.txt"
  local rc=$?
  sed '$d' "$NH_OUT/dist-$label.txt"
  summary=$(tail -n 1 "$NH_OUT/dist-$label.txt")
  DIST_NUMBERS=${summary#SUMMARY * }
  return "$rc"
}

# dsr_capture LABEL SPORT_BASE COUNT: burst via the VIP while capturing on the client
# Sets DSR_NUMBERS; returns 0 if node2 and node3 MACs both sent VIP-sourced frames.
dsr_capture() {
  local label=$1 base=$2 count=$3 pcap tlog tpid out n mac line frames total=0 other=0
  pcap=$NH_OUT/dsr-$label.pcap
  tlog=$NH_OUT/tcpdump-$label.log
  nh_bg "tcpdump on client" "$tlog" client timeout 60 tcpdump -i eth0 -nn -e -U --immediate-mode -Z root \
    -c 20000 -w "$pcap" "tcp and src host $NH_VIP"
  tpid=$NH_BG_PID
  if ! nh_wait_until 10 grep -q 'listening on' "$tlog"; then
    nh_stop "$tpid" TERM 3
    DSR_NUMBERS="tcpdump did not start: $(tr '\n' ' ' <"$tlog")"
    return 1
  fi
  cl burst --host "$NH_VIP" --port 80 --count "$count" --sport-base "$base" \
    --max-seconds 15 --max-consecutive-failures 10
  out=$OUT
  echo "  client: $out"
  sleep 0.3
  nh_stop "$tpid" TERM 5
  declare -A bymac=()
  while read -r frames mac; do
    [[ -n $mac ]] && bymac[$mac]=$frames
  done < <(tcpdump -nn -e -r "$pcap" 2>/dev/null | awk '{print $2}' | sort | uniq -c)
  echo "  frames with IP source $NH_VIP captured on the client's eth0, by Ethernet source:"
  local -A seen=()
  DSR_NUMBERS=""
  for n in "${NH_NODES[@]}"; do
    mac=$(nh_mac "$n")
    frames=${bymac[$mac]:-0}
    seen[$mac]=1
    total=$((total + frames))
    printf '    %-6s %-17s %6d\n' "$n" "$mac" "$frames"
    DSR_NUMBERS+="$n=$frames "
  done
  for mac in "${!bymac[@]}"; do
    [[ -n ${seen[$mac]:-} ]] && continue
    printf '    %-6s %-17s %6d\n' "other" "$mac" "${bymac[$mac]}"
    other=$((other + bymac[$mac]))
  done
  total=$((total + other))
  DSR_NUMBERS+="other=$other total=$total (burst ok=$(json <(echo "$out") 'd["ok"]')/$count)"
  line=$(nh_mac node2)
  [[ ${bymac[$line]:-0} -gt 0 && ${bymac[$(nh_mac node3)]:-0} -gt 0 ]]
}

# --------------------------------------------------------------------------- scenarios

scenario_a() {
  header "(a) distribution: 300 new connections via $NH_VIP:80, weights $(weights_ratio)"
  if burst_dist a 20000; then
    pass a "$DIST_NUMBERS"
  else
    fail a "$DIST_NUMBERS"
  fi
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$NH_OUT/burst-a.json" --show 2 |
    sed 's/^LOOKUP/  info: nilb lookup vs observed backend (same config):/'
  save_stats a
  echo "  info: node1 XDP counters after (a) (nilb stats, non-zero, names starting xdp):"
  awk '$1 ~ /^xdp/ && $2 != 0 {print "    " $0}' "$NH_OUT/stats-node1-a.txt" 2>/dev/null | head -n 12
}

scenario_b() {
  header "(b) DSR: replies from $NH_VIP come straight from the backends, not via node1"
  if dsr_capture b 21000 90; then
    pass b "VIP-sourced frames by source MAC: $DSR_NUMBERS"
  else
    fail b "expected VIP-sourced frames from node2 and node3 MACs: $DSR_NUMBERS"
  fi
}

scenario_c() {
  header "(c) node1's own traffic is untouched while XDP is attached"
  local link xdp ok=1 out80 out8080 okc png nums=""
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
  okc=$(json <(echo "$out8080") 'd["by_backend"].get("node1",0)')
  nums+="8080 ok=${okc:-0}/20; "
  [[ ${okc:-0} == 20 ]] || ok=0
  cl burst --host "${NH_NODE_IP[node1]}" --port 80 --count 20 --sport-base 23100 \
    --max-seconds 20 --max-consecutive-failures 5
  out80=$OUT
  echo "  TCP to ${NH_NODE_IP[node1]}:80 (node address, not the VIP): $out80"
  okc=$(json <(echo "$out80") 'd["by_backend"].get("node1",0)')
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

scenario_d() {
  header "(d) second chance: 30 long-lived connections across a weight change and SIGHUP"
  local state=$NH_OUT/hold-state.json go=$NH_OUT/hold.go res=$NH_OUT/hold-result.json
  local hpid n nums="" okc resets fails est lines0 part1=1 part2=1 rc
  rm -f "$go"
  nh_bg "hold client" "$NH_OUT/hold.log" client timeout 150 "$NH_PY" "$HERE/client.py" hold \
    --host "$NH_VIP" --port 80 --count 30 --sport-base 24000 --state "$state" --go "$go" \
    --go-timeout 90 --rounds 3 --interval 0.3 --max-seconds 20 --out "$res"
  hpid=$NH_BG_PID
  if ! nh_wait_until 30 test -e "$state"; then
    nh_stop "$hpid" TERM 3
    fail d "hold client did not establish its connections: $(tr '\n' ' ' <"$NH_OUT/hold.log")"
    return
  fi
  est=$(json "$state" 'd["established"]')
  echo "  held connections established: $est/30, by backend: $(json "$state" 'json.dumps(d["by_backend"])')"
  [[ $est == 30 ]] || part1=0

  local old_w
  old_w=$(weights_ratio)
  cp "$CFG" "$NH_OUT/nilb-before-d.yaml"
  write_config 3 1 1
  echo "  new config: weights $old_w -> $(weights_ratio)"
  if ! nilb_check; then
    nh_stop "$hpid" TERM 3
    fail d "nilb check rejected the new config"
    return
  fi
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$NH_OUT/nilb-before-d.yaml" --result "$state" --show 0 |
    sed 's/^LOOKUP/  info: nilb lookup (old config) vs backend of each held connection:/'
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$state" --show 0 |
    sed 's/^LOOKUP/  info: nilb lookup (new config) vs backend of each held connection (differ = bucket moved, needs second chance):/'

  lines0=$(wc -l <"$NH_OUT/nilb-node1.log")
  for n in "${NH_NODES[@]}"; do # node1 (the balancer) first
    if nh_alive "${NILB_PID[$n]}"; then
      kill -HUP "${NILB_PID[$n]}"
    else
      echo "  nilb on $n is not running; cannot send SIGHUP"
      part1=0
    fi
  done
  if nh_wait_until 5 reload_logged "$lines0"; then
    echo "  node1 log after SIGHUP: $(tail -n +"$((lines0 + 1))" "$NH_OUT/nilb-node1.log" | sed 's/\x1b\[[0-9;]*m//g' | grep -i reload | head -n 1 | cut -c1-160)"
  else
    echo "  (no log line mentioning 'reload' on node1 within 5 s; continuing)"
  fi
  sleep 1
  # with rebalance pacing the new table may come in steps, and not before
  # min_bucket_age_ms after the daemon started: use the held connections once
  # node1's state file shows the new weights in place (bounded)
  # (a nilb that writes no state file, e.g. selftest/fake-nilb: not waiting)
  if [[ ! -e $(state_of node1) ]]; then
    echo "  (node1's nilb wrote no state file $(state_of node1); not waiting for the table)"
  elif st_wait node1 10 "$(settled_expr)"; then
    echo "  node1 state: $WAIT_SUMMARY"
  else
    echo "  node1's table did not reach the new weights within 10 s: $WAIT_SUMMARY"
    nums+="table not at the new weights within 10 s; "
    part1=0
  fi
  for n in "${NH_NODES[@]}"; do
    if [[ -n ${NILB_PID[$n]:-} ]] && ! nh_alive "${NILB_PID[$n]}"; then
      echo "  nilb on $n is not running after SIGHUP:"
      log_tail "$NH_OUT/nilb-$n.log" 5
      nums+="nilb on $n died after SIGHUP; "
      part1=0
    fi
  done
  touch "$go"
  if ! nh_wait_until 60 nh_not_alive "$hpid"; then
    echo "  hold client still running after 60 s; stopping it"
  fi
  nh_stop "$hpid" TERM 3
  rc=$NH_LAST_RC
  if [[ ! -s $res ]]; then
    fail d "hold client produced no result (exit $rc): $(tail -n 3 "$NH_OUT/hold.log" | tr '\n' ' ')"
    return
  fi
  echo "  hold client: $(head -n 1 "$NH_OUT/hold.log")"
  okc=$(json "$res" 'd["ok"]')
  resets=$(json "$res" 'd["resets"]')
  fails=$(json "$res" 'd["failures"]')
  "$NH_PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
bad = [c for c in d["per_connection"] if c["status"] != "ok" or not c.get("same_backend")]
for c in bad[:10]:
    print("    sport %d: first %s, later %s, status %s (%s)" % (c["sport"], c["first"], c["later"], c["status"], c["error"]))
if len(bad) > 10:
    print("    ... %d more" % (len(bad) - 10))
' "$res"
  nums+="connections OK ${okc}/30 (3 rounds each), resets ${resets}, failures ${fails}, exit ${rc}"
  [[ $okc == 30 && $resets == 0 && $fails == 0 && $rc == 0 ]] || part1=0

  echo "  counters (nilb stats, names containing second_chance or forward):"
  local found=0 s
  for n in "${NH_NODES[@]}"; do
    s=$(nilb_stats "$n" | grep -Ei 'second_chance|forward')
    if [[ -n $s ]]; then
      found=1
      sed "s/^/    $n: /" <<<"$s"
    fi
  done
  ((found)) || echo "    (none found)"

  echo "  fresh burst with the new weights:"
  if burst_dist d 25000; then :; else part2=0; fi
  nums+="; new split: $DIST_NUMBERS"
  if ((part1 && part2)); then pass d "$nums"; else fail d "$nums"; fi
}
# save_stats LABEL: keep every running node's `nilb stats` in $NH_OUT/stats-NODE-LABEL.txt
save_stats() {
  local n
  for n in "${NH_NODES[@]}"; do
    [[ -n ${NILB_PID[$n]:-} ]] && nilb_stats "$n" >"$NH_OUT/stats-$n-$1.txt" 2>&1
  done
}

reload_logged() { tail -n +"$(($1 + 1))" "$NH_OUT/nilb-node1.log" | grep -qi reload; }

scenario_e() {
  header "(e) SIGTERM: every nilb exits 0 and detaches everything"
  local n ok=1 nums="" rc link xdp filt qd bt pins
  for n in "${NH_NODES[@]}"; do
    if [[ -z ${NILB_PID[$n]:-} ]]; then
      nums+="$n: never started; "
      ok=0
      continue
    fi
    if nh_alive "${NILB_PID[$n]}"; then
      nh_stop "${NILB_PID[$n]}" TERM 15
      rc=$NH_LAST_RC
      echo "  nilb on $n: SIGTERM -> exit status $rc"
    else
      nh_stop "${NILB_PID[$n]}" TERM 1
      rc=$NH_LAST_RC
      echo "  nilb on $n had already exited (status $rc) before SIGTERM"
      rc="$rc(early)"
    fi
    unset "NILB_PID[$n]"
    [[ $rc == 0 ]] || ok=0
    local ns
    ns=$(nh_ns "$n")
    if [[ ${NILB_KEEP[$n]:-0} == 1 ]]; then
      # (restart did not get to its last start without --keep-dataplane): the
      # daemon kept its data plane on purpose; `nilb cleanup` must remove it
      ip netns exec "$ns" timeout 20 "$NILB" cleanup --interface eth0 ${PIN_DIR[$n]:+--pin-dir "${PIN_DIR[$n]}"} \
        >"$NH_OUT/cleanup-$n.log" 2>&1
      echo "    (it ran with --keep-dataplane) nilb cleanup exit $?, $(grep -c . "$NH_OUT/cleanup-$n.log") log lines, last: $(sed 's/\x1b\[[0-9;]*m//g' "$NH_OUT/cleanup-$n.log" | tail -n 1 | cut -c1-150)"
      nums+="$n: kept its data plane (--keep-dataplane), removed with nilb cleanup: "
    fi
    link=$(ip -n "$ns" -d link show dev eth0)
    xdp=$(grep -Eo 'prog/xdp[a-z]* id [0-9]+|[ ,<]xdp[a-z]*[ >]' <<<"$link" | head -n 1)
    filt=$(tc -n "$ns" filter show dev eth0 ingress 2>/dev/null)
    qd=$(tc -n "$ns" qdisc show dev eth0 2>/dev/null | grep -o 'clsact' | head -n 1)
    echo "    ip -d link show eth0: ${xdp:-no xdp}"
    echo "    tc filter show dev eth0 ingress: $(if [[ -n $filt ]]; then echo; sed 's/^/      | /' <<<"$filt"; else echo "(empty)"; fi)"
    echo "    info: clsact qdisc $([[ -n $qd ]] && echo "still present" || echo "not present")"
    if command -v bpftool >/dev/null 2>&1; then
      bt=$(ip netns exec "$ns" bpftool net show dev eth0 2>/dev/null | grep -E 'eth0' | tr -s ' ')
      echo "    bpftool net show dev eth0: ${bt:-(nothing attached)}"
      [[ -z $bt ]] || ok=0
    fi
    [[ -z $xdp && -z $filt ]] || ok=0
    nums+="$n: exit=$rc xdp=${xdp:+yes}${xdp:-none} tc_ingress=$( [[ -n $filt ]] && echo present || echo none)"
    if [[ -n ${PIN_DIR[$n]:-} ]]; then
      # the pins on the harness's bpffs: SIGTERM without --keep-dataplane removes them
      pins=$(find "${PIN_DIR[$n]}" -mindepth 1 2>/dev/null | wc -l)
      echo "    pins left under ${PIN_DIR[$n]}: $pins"
      nums+=" pins=$pins"
      ((pins == 0)) || ok=0
    fi
    nums+="; "
  done
  if ((ok)); then pass e "$nums"; else fail e "$nums"; fi
}

# --------------------------------------------------------------------------- health, drain, reload (h1-h6)

# st ARGS...: state.py (reads nilb's state files; JSON/one-line output)
st() { "$NH_PY" "$HERE/state.py" "$@"; }
state_of() { echo "$NH_OUT/state-$1.yaml"; }

# st_wait NODE TIMEOUT EXPR: poll NODE's state file until EXPR holds (see state.py).
# Sets WAIT_OUT (its JSON line), WAIT_AT (epoch when it held) and WAIT_SUMMARY.
st_wait() {
  local rc
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of "$1")" "$3" --timeout "$2" >"$NH_OUT/wait.out" 2>&1
  rc=$?
  WAIT_OUT=$(<"$NH_OUT/wait.out")
  WAIT_AT=$(json <(echo "$WAIT_OUT") 'd["at"]')
  WAIT_SUMMARY=$(json <(echo "$WAIT_OUT") 'd["summary"]')
  return "$rc"
}

# the state file of node1 (the balancer: health checks, tables) matches the config
# as written: weights, every backend up (BSTATE respected), no pending moves,
# bucket shares within one bucket of the weights
settled_expr() {
  local n e
  e="weights() == '$(weights_ratio)' and settled(1)"
  for n in "${NH_NODES[@]}"; do
    e+=" and b['$n']['state'] == '${BSTATE[$n]:-active}' and b['$n']['health'] == 'up'"
  done
  echo "$e"
}
# wait_settled LABEL [TIMEOUT]: precondition of a scenario; prints what it waited for
wait_settled() {
  if st_wait node1 "${2:-15}" "$(settled_expr)"; then
    echo "  node1 state: $WAIT_SUMMARY"
    return 0
  fi
  echo "  node1's state did not settle on weights $(weights_ratio), all up, no pending moves within ${2:-15}s: $WAIT_SUMMARY"
  return 1
}

# status_table NODE: `nilb status` of NODE's daemon, indented
status_table() {
  timeout 10 "$NILB" status --state-file "$(state_of "$1")" 2>&1 | sed 's/^/    | /'
}

# hup_all: SIGHUP every running nilb, node1 (the balancer) first; sets HUP_LINES
# (line counts of every log before the signal, for log_since)
declare -A HUP_LINES=()
hup_all() {
  local n
  for n in "${NH_NODES[@]}"; do
    HUP_LINES[$n]=$(wc -l <"$NH_OUT/nilb-$n.log")
  done
  for n in "${NH_NODES[@]}"; do
    if [[ -n ${NILB_PID[$n]:-} ]] && nh_alive "${NILB_PID[$n]}"; then
      kill -HUP "${NILB_PID[$n]}"
    else
      echo "  nilb on $n is not running; cannot send SIGHUP"
    fi
  done
}
# log_since NODE LINES: log lines after the first LINES, colour codes stripped
log_since() { tail -n +"$(($2 + 1))" "$NH_OUT/nilb-$1.log" | sed 's/\x1b\[[0-9;]*m//g'; }
# wait_log NODE LINES REGEX TIMEOUT: a line matching REGEX appears after LINES
log_has() { log_since "$1" "$2" | grep -Eq "$3"; }
wait_log() { nh_wait_until "$4" log_has "$1" "$2" "$3"; }

daemons_alive() {
  local n dead=""
  for n in "${NH_NODES[@]}"; do
    [[ -n ${NILB_PID[$n]:-} ]] && nh_alive "${NILB_PID[$n]}" || dead+=" $n"
  done
  [[ -z $dead ]] || { echo "  nilb not running on:$dead"; return 1; }
}

# start_backend NODE [LOGSUFFIX]: (re)start backend.py on NODE's port 80; sets
# BACKEND_T (epoch when it listened, from its log)
start_backend() {
  local n=$1 log=$NH_OUT/backend-$1${2:+-$2}.log
  nh_bg "backend $n" "$log" "$n" "$NH_PY" "$HERE/backend.py" --name "$n" --port 80
  BACKEND_PID[$n]=$NH_BG_PID
  if ! nh_wait_until 10 test_listening "$log" 1; then
    echo "  backend on $n did not start:"
    log_tail "$log"
    return 1
  fi
  BACKEND_T=$(sed -n 's/.*listening on .* at=\([0-9.]*\).*/\1/p' "$log" | head -n 1)
}
# stop_backend NODE: SIGTERM its backend.py; sets BACKEND_T (epoch when its
# listening socket was closed, from its log)
stop_backend() {
  local n=$1 pid=${BACKEND_PID[$1]:-}
  BACKEND_T=""
  [[ -n $pid ]] || return 1
  nh_stop "$pid" TERM 5
  unset "BACKEND_PID[$n]"
  BACKEND_T=$(grep -h 'stopped at=' "$NH_OUT"/backend-"$n"*.log 2>/dev/null | sed -n 's/.*stopped at=\([0-9.]*\).*/\1/p' | tail -n 1)
  [[ -n $BACKEND_T ]]
}
backend_running() { [[ -n ${BACKEND_PID[$1]:-} ]] && nh_alive "${BACKEND_PID[$1]}"; }

# stream_bg LABEL SPORT_BASE RATE DURATION [STOP_FILE]: client.py stream in the
# background (ends early once STOP_FILE exists); waits (bounded) until its first
# request is due. Sets STREAM_PID, STREAM_RES.
stream_bg() {
  local label=$1 started=$NH_OUT/stream-$1.started stopargs=()
  STREAM_RES=$NH_OUT/stream-$label.json
  rm -f "$started"
  [[ -n ${5:-} ]] && { rm -f "$5"; stopargs=(--stop-file "$5"); }
  nh_bg "stream client ($label)" "$NH_OUT/stream-$label.log" client timeout $(( ${4%.*} + 30 )) \
    "$NH_PY" "$HERE/client.py" stream --host "$NH_VIP" --port 80 --rate "$3" --duration "$4" \
    --sport-base "$2" --timeout 1 --started "$started" --out "$STREAM_RES" "${stopargs[@]}"
  STREAM_PID=$NH_BG_PID
  nh_wait_until 10 test -e "$started"
}
# stream_wait: wait (bounded) for the stream started last; prints its summary
stream_wait() {
  local secs=${1:-40}
  nh_wait_until "$secs" nh_not_alive "$STREAM_PID" || echo "  stream client still running after ${secs}s; stopping it"
  nh_stop "$STREAM_PID" TERM 3
  echo "  stream client: $(sed -n 1p "${STREAM_RES%.json}.log")"
}

# hold_bg LABEL ARGS...: client.py hold in the background (state/go/until/out files
# named after LABEL); waits (bounded) until its connections are open.
# Sets HOLD_PID, HOLD_STATE, HOLD_GO, HOLD_UNTIL, HOLD_RES.
hold_bg() {
  local label=$1
  shift
  HOLD_STATE=$NH_OUT/hold-$label-state.json HOLD_GO=$NH_OUT/hold-$label.go
  HOLD_UNTIL=$NH_OUT/hold-$label.until HOLD_RES=$NH_OUT/hold-$label-result.json
  rm -f "$HOLD_STATE" "$HOLD_GO" "$HOLD_UNTIL" "$HOLD_RES"
  nh_bg "hold client ($label)" "$NH_OUT/hold-$label.log" client timeout 150 "$NH_PY" "$HERE/client.py" hold \
    --host "$NH_VIP" --port 80 --state "$HOLD_STATE" --go "$HOLD_GO" --go-timeout 90 --out "$HOLD_RES" "$@"
  HOLD_PID=$NH_BG_PID
  nh_wait_until 40 test -e "$HOLD_STATE"
}
# hold_finish SECS: wait (bounded) for the hold client; sets HOLD_RC
hold_finish() {
  nh_wait_until "$1" nh_not_alive "$HOLD_PID" || echo "  hold client still running after $1 s; stopping it"
  nh_stop "$HOLD_PID" TERM 3
  HOLD_RC=$NH_LAST_RC
  echo "  hold client: $(head -n 1 "${HOLD_RES%-result.json}.log")"
}
# hold_bad: the connections that failed, reset or changed backend (at most 10)
hold_bad() {
  "$NH_PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
bad = [c for c in d["per_connection"] if c["status"] != "ok" or not c.get("same_backend")]
for c in bad[:10]:
    print("    sport %d: first %s, later %s, status %s (%s)" % (c["sport"], c["first"], c["later"][-3:], c["status"], c["error"]))
if len(bad) > 10:
    print("    ... %d more" % (len(bad) - 10))
' "$HOLD_RES" 2>/dev/null
}

# hold_read: read the hold client's result into okc, resets, fails and
# rounds (the caller's variables) and list the connections that went wrong;
# status 1 if the client left no result.
hold_read() {
  [[ -s $HOLD_RES ]] || return 1
  okc=$(json "$HOLD_RES" 'd["ok"]')
  resets=$(json "$HOLD_RES" 'd["resets"]')
  fails=$(json "$HOLD_RES" 'd["failures"]')
  rounds=$(json "$HOLD_RES" 'd["rounds_done"]')
  hold_bad || true
}

# live_hops_of_bad: for each held connection that did not survive, the hops of
# its bucket in node1's live table (`nilb lookup --live` in the daemon's namespaces)
live_hops_of_bad() {
  local sp pid=${NILB_PID[node1]:-}
  [[ -n $pid ]] && nh_alive "$pid" || return 0
  for sp in $("$NH_PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join(str(c["sport"]) for c in d["per_connection"] if c["status"] != "ok" or not c.get("same_backend")))
' "$HOLD_RES" 2>/dev/null); do
    echo "    sport $sp, node1 live table: $(timeout 10 nsenter --target "$pid" --mount --net "$NILB" lookup --config "$CFG" --live \
      "$NH_CLIENT_IP:$sp" "$NH_VIP:80" tcp 2>&1 | grep -E '^(bucket|first hop|second hop)' | tr -s ' ' | paste -sd ',' -)"
  done
}

# second_chance_counters: node1's and the backends' tc_forward counters (info)
second_chance_counters() {
  local n s
  for n in "${NH_NODES[@]}"; do
    s=$(nilb_stats "$n" | awk '$1 ~ /forward|second_chance|unknown_flow/ {printf "%s=%s ", $1, $2}')
    echo "    $n: ${s:-(none)}"
  done
}

# log_rel TIMELINE_OUTPUT REGEX: "+0.632s" from timeline.py's "log: +0.632s after t0: ..." line
log_rel() {
  local v
  v=$(grep -E "^  log: [+-][0-9.]+s after t0: .*$2" <<<"$1" | head -n 1 | sed 's/^  log: \([+-][0-9.]*s\).*/\1/')
  echo "${v:-?}"
}

# ensure_all_up: precondition of h1 and h3-h6 (every backend's server running,
# node1 sees every backend up, its table settled on the configured weights)
ensure_all_up() {
  local n
  for n in "${NH_NODES[@]}"; do
    if ! backend_running "$n"; then
      echo "  (setup) starting the backend on $n again"
      start_backend "$n" "setup$SECONDS" || return 1
    fi
  done
  wait_settled 15
}

scenario_h1() {
  local win base nums ok=1 t_sig t_close out rc
  base=$(nh_calc "($HC_FALL * $HC_INTERVAL_MS + $HC_TIMEOUT_MS) / 1000")
  win=$(nh_calc "$base + $HEALTH_MARGIN")
  header "(h1) health: stop the HTTP server on node3; gone from new connections within ${base}s (+${HEALTH_MARGIN}s margin)"
  echo "  checker: $NH_HEALTH_CHECK; fall_count $HC_FALL x interval ${HC_INTERVAL_MS}ms + timeout ${HC_TIMEOUT_MS}ms = ${base}s"
  if ! ensure_all_up; then
    fail h1 "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  if ! stream_bg h1 40000 50 6; then
    nh_stop "$STREAM_PID" TERM 3
    fail h1 "stream client did not start: $(tr '\n' ' ' <"$NH_OUT/stream-h1.log")"
    return
  fi
  sleep 1
  t_sig=$(nh_now)
  if ! stop_backend node3; then
    fail h1 "could not stop node3's backend (no 'stopped at=' in its log)"
    stream_wait 20
    return
  fi
  t_close=$BACKEND_T
  H1_DOWN_AT=$t_close
  echo "  SIGTERM to node3's backend at t_sig; listening socket closed $(nh_calc "$t_close - $t_sig")s later (t0)"
  stream_wait 20
  out=$("$NH_PY" "$HERE/timeline.py" down --result "$STREAM_RES" --node node3 --t0 "$t_close" --window "$win" --t-signal "$t_sig" \
    --log "$NH_OUT/nilb-node1.log" --log-match "backend health changed.*dip=${NH_NODE_IP[node3]} .*health=down" \
    --log "$NH_OUT/nilb-node1.log" --log-match 'table installed.*reason="?health')
  rc=$?
  sed '$d' <<<"$out"
  nums=${out##*SUMMARY }
  nums="${nums#* } (t0 = listener closed, $(nh_calc "$t_close - $t_sig")s after SIGTERM)"
  ((rc == 0)) || ok=0
  nums+="; node1 logged health=down at $(log_rel "$out" 'health=down'), its table install at $(log_rel "$out" 'table installed')"
  if st_wait node1 5 "b['node3']['health'] == 'down' and b['node3']['buckets'] == 0 and settled(1) and not svc['fail_open']"; then
    echo "  node1 state: $WAIT_SUMMARY"
    nums+="; node1 state: node3 health=down buckets=0 2nd_hop=$(st get "$(state_of node1)" "b['node3']['second_hop_buckets']")"
  else
    echo "  node1 state does not show node3 down with 0 buckets: $WAIT_SUMMARY"
    nums+="; node1 state: node3 not down/empty ($WAIT_SUMMARY)"
    ok=0
  fi
  echo "  nilb status on node1:"
  status_table node1
  if ((ok)); then pass h1 "$nums"; else fail h1 "$nums"; fi
}

scenario_h2() {
  local bound settle_bound nums ok=1 t_listen out rc q3 b3 wait_age
  bound=$(nh_calc "($HC_RISE * $HC_INTERVAL_MS + $HC_TIMEOUT_MS + $RB_MIN_INTERVAL_MS) / 1000 + $HEALTH_MARGIN")
  settle_bound=$(nh_calc "$bound + $RB_MIN_BUCKET_AGE_MS / 1000")
  header "(h2) health: start node3's server again; back after rise_count checks, share back to its weight"
  echo "  rise_count $HC_RISE x interval ${HC_INTERVAL_MS}ms + timeout ${HC_TIMEOUT_MS}ms + rebalance.min_interval ${RB_MIN_INTERVAL_MS}ms + ${HEALTH_MARGIN}s margin = ${bound}s"
  if backend_running node3 || [[ -z ${H1_DOWN_AT:-} ]]; then
    echo "  (setup) h1 did not leave node3 down: stopping its server and waiting for health: down"
    ensure_all_up >/dev/null
    stop_backend node3
    H1_DOWN_AT=$BACKEND_T
  fi
  if ! st_wait node1 5 "b['node3']['health'] == 'down' and b['node3']['buckets'] == 0"; then
    fail h2 "precondition: node1 does not show node3 down: $WAIT_SUMMARY"
    return
  fi
  # buckets that moved when node3 failed may move back only min_bucket_age_ms later
  wait_age=$(nh_calc "${H1_DOWN_AT:-0} + $RB_MIN_BUCKET_AGE_MS / 1000 + 0.5 - $(nh_now)")
  if [[ $wait_age != -* ]]; then sleep "$wait_age"; fi
  echo "  node1 state before: $WAIT_SUMMARY"
  if ! stream_bg h2 41000 50 6; then
    nh_stop "$STREAM_PID" TERM 3
    fail h2 "stream client did not start: $(tr '\n' ' ' <"$NH_OUT/stream-h2.log")"
    return
  fi
  sleep 0.5
  if ! start_backend node3 restart; then
    stream_wait 20
    fail h2 "node3's backend did not start again"
    return
  fi
  t_listen=$BACKEND_T
  stream_wait 20
  out=$("$NH_PY" "$HERE/timeline.py" up --result "$STREAM_RES" --node node3 --t0 "$t_listen" --window "$bound" \
    --log "$NH_OUT/nilb-node1.log" --log-match "backend health changed.*dip=${NH_NODE_IP[node3]} .*health=up" \
    --log "$NH_OUT/nilb-node1.log" --log-match 'table installed.*pending=0')
  rc=$?
  sed '$d' <<<"$out"
  nums=${out##*SUMMARY }
  nums=${nums#* }
  ((rc == 0)) || ok=0
  # when did node1's table reach node3's quota (pending=0)? from its log, relative to t0
  local settled_rel
  settled_rel=$(log_rel "$out" 'table installed.*pending=0')
  settled_rel=${settled_rel%s}
  nums+="; node1 logged health=up at $(log_rel "$out" 'health=up')"
  if st_wait node1 5 "b['node3']['health'] == 'up' and settled(1)"; then
    q3=$(st get "$(state_of node1)" "quotas()['node3']")
    b3=$(st get "$(state_of node1)" "b['node3']['buckets']")
    echo "  node1 state: $WAIT_SUMMARY"
    nums+="; node3 buckets $b3/$q3 (quota for weight ${WEIGHT[node3]}), pending 0 at ${settled_rel:-?}s (bound ${settle_bound}s)"
    if [[ $settled_rel == "?" ]] || awk -v s="$settled_rel" -v b="$settle_bound" 'BEGIN { exit !(s > b) }'; then
      ok=0
      nums+=" [share not back within the bound]"
    fi
  else
    echo "  node1 state did not settle with node3 up: $WAIT_SUMMARY"
    nums+="; node1 state not settled: $WAIT_SUMMARY"
    ok=0
  fi
  echo "  fresh burst (node3 back at its weight):"
  if burst_dist h2 47000; then :; else ok=0; fi
  nums+="; split: $DIST_NUMBERS"
  if ((ok)); then pass h2 "$nums"; else fail h2 "$nums"; fi
}

scenario_h3() {
  local nums="" ok=1 est t_hup drain_s out rc okc resets fails rounds same
  header "(h3) drain: node2 drained by config + SIGHUP; 20 held connections keep talking for 30 s, no new ones land on node2"
  if ! ensure_all_up; then
    fail h3 "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  hold_bg h3 --count 300 --want-backend node2 --want-count 20 --sport-base 42000 --rounds 31 --interval 1.0 --max-seconds 45
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail h3 "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-h3.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  keep-alive connections on node2 opened before the drain: $est/20 (others tried and closed again: $(json "$HOLD_STATE" 'json.dumps(d["discarded"])'))"
  [[ $est == 20 ]] || ok=0
  touch "$HOLD_GO" # one request per connection per second from now on, 31 rounds
  sleep 1
  cp "$CFG" "$NH_OUT/nilb-before-h3.yaml"
  BSTATE[node2]=drained
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  nilb_check || ok=0
  t_hup=$(nh_now)
  hup_all
  if wait_log node1 "${HUP_LINES[node1]}" 'reload applied|reload rejected' 5; then
    echo "  node1 log: $(log_since node1 "${HUP_LINES[node1]}" | grep -E 'table installed|reload' | cut -c1-170 | paste -sd '|' | sed 's/|/\n  node1 log: /g')"
  else
    echo "  node1 logged no reload within 5 s"
  fi
  if st_wait node1 10 "b['node2']['state'] == 'drained' and b['node2']['buckets'] == 0 and svc['pending_moves'] == 0 and settled(1)"; then
    drain_s=$(nh_calc "$WAIT_AT - $t_hup")
    echo "  drain complete in node1's state file ${drain_s}s after SIGHUP: $WAIT_SUMMARY"
    nums+="drained (node2 0 buckets, $(st get "$(state_of node1)" "b['node2']['second_hop_buckets']") as 2nd hop) ${drain_s}s after SIGHUP; "
  else
    echo "  node1 state does not show node2 drained and empty: $WAIT_SUMMARY"
    nums+="drain not complete: $WAIT_SUMMARY; "
    ok=0
  fi
  # new connections while the held ones keep talking (until about 1.5 s before they stop)
  stream_bg h3 43000 10 27 || ok=0
  hold_finish 60
  stream_wait 20
  out=$("$NH_PY" "$HERE/timeline.py" avoid --result "$STREAM_RES" --node node2)
  rc=$?
  sed '$d' <<<"$out"
  ((rc == 0)) || ok=0
  if hold_read; then
    same=$(json "$HOLD_RES" 'sum(1 for c in d["per_connection"] if c["status"] == "ok" and c["same_backend"] and c["first"] == "node2")')
    nums+="held on node2: ${okc}/20 OK over ${rounds} rounds 1 s apart (all answered by node2: $same), resets ${resets}, failures ${fails}, exit ${HOLD_RC}; "
    [[ $okc == 20 && $same == 20 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 && $rounds -ge 30 ]] || ok=0
  else
    nums+="hold client produced no result (exit $HOLD_RC); "
    ok=0
  fi
  nums+="new connections during the 30 s: ${out##*SUMMARY [A-Z]* }"
  echo "  second-chance counters (nilb stats):"
  second_chance_counters
  # undo the drain
  unset "BSTATE[node2]"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  t_hup=$(nh_now)
  hup_all
  if wait_settled h3 10; then
    nums+="; undone: node2 back to $(st get "$(state_of node1)" "b['node2']['buckets']") buckets $(nh_calc "$WAIT_AT - $t_hup")s after SIGHUP"
  else
    nums+="; undoing the drain did not settle: $WAIT_SUMMARY"
    ok=0
  fi
  if ((ok)); then pass h3 "$nums"; else fail h3 "$nums"; fi
}

scenario_h4() {
  local nums="" ok=1 before after n good=$NH_OUT/nilb-good-h4.yaml broken=$NH_OUT/nilb-broken-h4.yaml chk status rerr
  header "(h4) SIGHUP with a broken YAML file: rejected, running tables and traffic unchanged"
  if ! ensure_all_up; then
    fail h4 "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  local shape="json.dumps({n: [x['weight'], x['buckets'], x['second_hop_buckets']] for n, x in b.items()}, sort_keys=True)"
  before=$(st get "$(state_of node1)" "$shape")
  echo "  node1 [weight, buckets, 2nd-hop buckets] before: $before"
  cp "$CFG" "$good"
  # the last backend's flow mapping loses its closing brace: a YAML syntax error
  sed '$ s/}$//' "$good" >"$broken"
  if cmp -s "$good" "$broken"; then
    fail h4 "could not produce a broken file"
    return
  fi
  chk=$("$NILB" check --config "$broken" 2>&1)
  echo "  nilb check on the broken file (exit $?): $(head -n 3 <<<"$chk" | sed 's/\x1b\[[0-9;]*m//g' | tr '\n' ' ' | cut -c1-200)"
  cp "$broken" "$CFG.tmp" && mv -f "$CFG.tmp" "$CFG"
  hup_all
  for n in "${NH_NODES[@]}"; do
    if wait_log "$n" "${HUP_LINES[$n]}" 'reload rejected' 5; then
      echo "  $n log: $(log_since "$n" "${HUP_LINES[$n]}" | grep 'reload rejected' | head -n 1 | cut -c1-200)"
    else
      echo "  $n logged no 'reload rejected' within 5 s; its log since SIGHUP:"
      log_since "$n" "${HUP_LINES[$n]}" | head -n 5 | sed 's/^/    | /'
      nums+="$n: no 'reload rejected' in the log; "
      ok=0
    fi
  done
  if st_wait node1 5 "reload.get('ok') is False and bool(reload.get('error'))"; then
    # the problem itself (field path, line, column) is the error's last line
    rerr=$(st get "$(state_of node1)" "reload['error']" | sed 's/^ *//' | tail -n 1 | cut -c1-150)
    echo "  node1 state: last_reload ok=false, failed=$(st get "$(state_of node1)" "reload['failed']"), error (last line): $rerr"
  else
    echo "  node1 state file shows no failed reload: $WAIT_SUMMARY"
    nums+="state file: no failed reload; "
    ok=0
  fi
  status=$(timeout 10 "$NILB" status --state-file "$(state_of node1)" 2>&1)
  echo "  nilb status on node1:"
  sed 's/^/    | /' <<<"$status"
  if grep -q 'FAILED' <<<"$status" && [[ -n $rerr ]] && grep -qF "${rerr:0:40}" <<<"$status"; then
    nums+="nilb status: reload FAILED with the error ($rerr); "
  else
    nums+="nilb status does not show the failed reload with its error; "
    ok=0
  fi
  after=$(st get "$(state_of node1)" "$shape")
  if [[ $after == "$before" ]]; then
    nums+="tables unchanged ($after); "
  else
    echo "  node1 [weight, buckets, 2nd-hop buckets] after: $after"
    nums+="TABLES CHANGED: before $before after $after; "
    ok=0
  fi
  daemons_alive || { ok=0; nums+="a daemon died; "; }
  echo "  burst with the broken file in place (old weights $(weights_ratio) must still hold):"
  burst_dist h4 44000 || ok=0
  nums+="split: $DIST_NUMBERS"
  after=$(st get "$(state_of node1)" "$shape")
  [[ $after == "$before" ]] || { ok=0; nums+="; tables changed after the burst: $after"; }
  # restore the good file
  cp "$good" "$CFG.tmp" && mv -f "$CFG.tmp" "$CFG"
  hup_all
  if st_wait node1 5 "reload.get('ok') is True and $(settled_expr)"; then
    after=$(st get "$(state_of node1)" "$shape")
    echo "  good file restored + SIGHUP: $WAIT_SUMMARY"
    nums+="; restored: reload ok, tables $([[ $after == "$before" ]] && echo unchanged || echo "CHANGED ($after)")"
    [[ $after == "$before" ]] || ok=0
  else
    nums+="; restoring the good file: no successful reload ($WAIT_SUMMARY)"
    ok=0
  fi
  daemons_alive || { ok=0; nums+="; a daemon died"; }
  if ((ok)); then pass h4 "$nums"; else fail h4 "$nums"; fi
}

scenario_h5() {
  local nums="" ok=1 est old_w t_hup settle_s steps okc resets fails rounds new=(1 8 1)
  header "(h5) weight change in paced steps under 50 long-lived connections"
  if ! ensure_all_up; then
    fail h5 "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  [[ $(weights_ratio) == 1:8:1 ]] && new=(8 1 1)
  hold_bg h5 --count 50 --sport-base 45000 --rounds 400 --interval 0.25 --max-seconds 40 --until "$NH_OUT/hold-h5.until"
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail h5 "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-h5.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  held connections established: $est/50, by backend: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])')"
  [[ $est == 50 ]] || ok=0
  old_w=$(weights_ratio)
  cp "$CFG" "$NH_OUT/nilb-before-h5.yaml"
  write_config "${new[@]}"
  echo "  new config: weights $old_w -> $(weights_ratio) (rebalance: at most ${RB_MAX_STEP_PERCENT}% of the buckets per step, steps ${RB_MIN_INTERVAL_MS}ms apart, buckets younger than ${RB_MIN_BUCKET_AGE_MS}ms stay)"
  nilb_check || ok=0
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$HOLD_STATE" --show 0 |
    sed 's/^LOOKUP/  info: nilb lookup (new config, one-step table) vs held connections (differ = moved):/'
  t_hup=$(nh_now)
  hup_all
  touch "$HOLD_GO" # every connection sends a request every 0.25 s while the steps happen
  if st_wait node1 20 "$(settled_expr)"; then
    settle_s=$(nh_calc "$WAIT_AT - $t_hup")
    echo "  pending_moves 0 and shares at the new weights ${settle_s}s after SIGHUP: $WAIT_SUMMARY"
  else
    echo "  node1 did not settle on the new weights within 20 s: $WAIT_SUMMARY"
    ok=0
  fi
  steps=$(log_since node1 "${HUP_LINES[node1]}" | grep -c 'table installed')
  log_since node1 "${HUP_LINES[node1]}" | grep 'table installed' | sed 's/^.*Z *INFO *//; s/service=web key=[^ ]* //; s/^/  node1 step: /'
  touch "$HOLD_UNTIL" # one final round on every connection, then the client exits
  hold_finish 30
  if hold_read; then
    nums+="connections OK ${okc}/50 over ${rounds} rounds (last one after pending_moves=0), resets ${resets}, failures ${fails}, exit ${HOLD_RC}; $old_w -> $(weights_ratio) in ${steps} table installs, settled ${settle_s:-never}s after SIGHUP"
    [[ $okc == 50 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 && $(json "$HOLD_RES" 'd["until_seen"]') == True ]] || ok=0
  else
    nums+="hold client produced no result (exit $HOLD_RC)"
    ok=0
  fi
  echo "  second-chance counters (nilb stats):"
  second_chance_counters
  echo "  fresh burst with the new weights:"
  burst_dist h5 45100 || ok=0
  nums+="; new split: $DIST_NUMBERS"
  if ((ok)); then pass h5 "$nums"; else fail h5 "$nums"; fi
}

scenario_h6() {
  local nums="" ok=1 t_start t_end span ok0 set i last n reloads installs
  local sets=("1 1 1" "2 1 1" "1 2 1" "1 1 2" "3 1 2" "2 3 1" "1 2 3" "4 1 1" "1 4 1" "2 5 3")
  header "(h6) ten SIGHUPs within one second, each with a different weight set"
  if ! ensure_all_up; then
    fail h6 "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  # information only: 30 keep-alive connections opened before the signals, used
  # again once the last weights are in place (a bucket that moves twice, old
  # owner -> B -> C, keeps only B as second hop: connections of the old owner
  # cannot survive that; the pacing's min_bucket_age only spaces such moves)
  hold_bg h6 --count 30 --sport-base 46500 --rounds 1 --max-seconds 30 --timeout 1 || echo "  (info hold client did not start)"
  ok0=$(st get "$(state_of node1)" "reload.get('succeeded', 0)")
  installs=$(wc -l <"$NH_OUT/nilb-node1.log")
  t_start=$(nh_now)
  for set in "${sets[@]}"; do
    # shellcheck disable=SC2086 # the set is three words on purpose
    write_config $set
    for n in "${NH_NODES[@]}"; do
      [[ -n ${NILB_PID[$n]:-} ]] && kill -HUP "${NILB_PID[$n]}" 2>/dev/null
    done
    sleep 0.05
  done
  t_end=$(nh_now)
  span=$(nh_calc "$t_end - $t_start")
  last=$(weights_ratio)
  echo "  ${#sets[@]} config writes + SIGHUP to every nilb in ${span}s; weight sets: $(printf '%s, ' "${sets[@]// /:}" | sed 's/, $//'); last $last"
  awk -v s="$span" 'BEGIN { exit !(s < 1.0) }' || { ok=0; nums+="signals took ${span}s (not within 1 s); "; }
  if st_wait node1 20 "reload.get('ok') is True and $(settled_expr)"; then
    echo "  node1 settled on $last $(nh_calc "$WAIT_AT - $t_end")s after the last SIGHUP: $WAIT_SUMMARY"
    nums+="node1 on $last (weights, buckets within 1 of quota, pending 0) $(nh_calc "$WAIT_AT - $t_end")s after the last SIGHUP; "
  else
    echo "  node1 did not end on the last weights $last: $WAIT_SUMMARY"
    nums+="node1 not on the last weights: $WAIT_SUMMARY; "
    ok=0
  fi
  reloads=$(( $(st get "$(state_of node1)" "reload.get('succeeded', 0)") - ok0 ))
  i=$(log_since node1 "$installs" | grep -c 'table installed')
  nums+="reloads applied on node1: $reloads for ${#sets[@]} signals (signals during a reload merge), $i table installs, rejected reloads since start $(st get "$(state_of node1)" "reload.get('failed', 0)"); "
  for n in node2 node3; do
    if ! st_wait "$n" 5 "reload.get('ok') is True and weights() == '$last'"; then
      nums+="$n not on the last weights ($WAIT_SUMMARY); "
      ok=0
    fi
  done
  daemons_alive || { ok=0; nums+="a daemon died; "; }
  touch "$HOLD_GO"
  hold_finish 30
  if [[ -s $HOLD_RES ]]; then
    hold_bad
    live_hops_of_bad
    echo "  info: 30 connections held across the ten reloads: $(json "$HOLD_RES" 'd["ok"]') answered by their backend afterwards, resets $(json "$HOLD_RES" 'd["resets"]'), failures $(json "$HOLD_RES" 'd["failures"]') (not part of the verdict: with min_bucket_age_ms $RB_MIN_BUCKET_AGE_MS a bucket may move twice within a few seconds, and connections of its first owner are then lost, see docs/config.md; nilb's default is 300000)"
  fi
  echo "  burst with the last weights:"
  burst_dist h6 46000 || ok=0
  nums+="split: $DIST_NUMBERS"
  if ((ok)); then pass h6 "$nums"; else fail h6 "$nums"; fi
}

# --------------------------------------------------------------------------- GUE source checks (spoof)

# tcpdump_bg ROLE LABEL FILTER: capture on ROLE's eth0 into $NH_OUT/LABEL.pcap;
# waits (bounded) until it listens. Sets TCPDUMP_PID.
tcpdump_bg() {
  local log=$NH_OUT/tcpdump-$2.log
  nh_bg "tcpdump on $1" "$log" "$1" timeout 60 tcpdump -i eth0 -nn -U --immediate-mode -Z root -c 20000 \
    -w "$NH_OUT/$2.pcap" "$3"
  TCPDUMP_PID=$NH_BG_PID
  nh_wait_until 10 grep -q 'listening on' "$log"
}

# gue_set OUTER_SRC SPORT_BASE: SPOOF_COUNT hand-built GUE packets from the client
# namespace to node2 (outer source forged), each with an inner SYN
# client:SPORT -> VIP:80; prints gue_send.py's JSON line
gue_set() {
  nh_fg client timeout 20 "$NH_PY" "$HERE/gue_send.py" --outer-src "$1" --outer-dst "${NH_NODE_IP[node2]}" \
    --inner-src "$NH_CLIENT_IP" --vip "$NH_VIP" --port 80 --sport-base "$2" --count "$SPOOF_COUNT" --interval 0.005
}

# spoof_delta COUNTER K: how much COUNTER moved during set K (SPOOF_STATS: the saved stats)
spoof_delta() { echo $(( $(counter "$1" "${SPOOF_STATS[$2]}") - $(counter "$1" "${SPOOF_STATS[$(($2 - 1))]}") )); }

scenario_spoof() {
  local nums="" ok=1 n2=${NH_NODE_IP[node2]} outsider=10.77.0.99 i pc pn sent
  local arrivals synacks c
  SPOOF_COUNT=20
  header "(spoof) GUE to node2 from outside the cluster and claiming node2's own address"
  SPOOF_STATS=()
  for i in 0 1 2 3; do SPOOF_STATS+=("$NH_OUT/stats-node2-spoof$i.txt"); done
  if ! nilb_stats node2 --all >"${SPOOF_STATS[0]}"; then
    fail spoof "cannot read node2's counters: $(head -n 2 "${SPOOF_STATS[0]}" | tr '\n' ' ')"
    return
  fi
  # SYN-ACKs from the VIP reaching the client (DSR: a backend that accepted a SYN
  # answers the inner source directly), and GUE arriving at node2
  if ! tcpdump_bg client spoof-client "tcp and src host $NH_VIP and src port 80 and tcp[tcpflags] & (tcp-syn|tcp-ack) == (tcp-syn|tcp-ack)"; then
    nh_stop "$TCPDUMP_PID" TERM 3
    fail spoof "tcpdump on the client did not start"
    return
  fi
  pc=$TCPDUMP_PID
  if ! tcpdump_bg node2 spoof-node2 "udp dst port 19523"; then
    nh_stop "$pc" TERM 3
    nh_stop "$TCPDUMP_PID" TERM 3
    fail spoof "tcpdump on node2 did not start"
    return
  fi
  pn=$TCPDUMP_PID
  echo "  each set: $SPOOF_COUNT GUE packets built like nilb's (gue_send.py) from the client namespace to $n2:19523, inner TCP SYN $NH_CLIENT_IP:PORT -> $NH_VIP:80"
  sent=$(gue_set "$outsider" 48000)
  echo "  set 1, outer source $outsider (outside the cluster), inner ports 48000+: $sent"
  sleep 0.3
  nilb_stats node2 --all >"${SPOOF_STATS[1]}"
  sent=$(gue_set "$n2" 48100)
  echo "  set 2, outer source $n2 (node2's own address), inner ports 48100+: $sent"
  sleep 0.3
  nilb_stats node2 --all >"${SPOOF_STATS[2]}"
  sent=$(gue_set "${NH_NODE_IP[node1]}" 48200)
  echo "  set 3 (control), outer source ${NH_NODE_IP[node1]} (node1, a balancer), inner ports 48200+: $sent"
  sleep 0.5
  nilb_stats node2 --all >"${SPOOF_STATS[3]}"
  sleep 0.2
  nh_stop "$pc" TERM 5
  nh_stop "$pn" TERM 5
  arrivals=$(tcpdump -nn -r "$NH_OUT/spoof-node2.pcap" 2>/dev/null | awk '$2 == "IP" { split($3, a, "."); print a[1] "." a[2] "." a[3] "." a[4] }' | sort | uniq -c | awk '{ printf "%s%s=%s", sep, $2, $1; sep = " " }')
  synacks=$(tcpdump -nn -r "$NH_OUT/spoof-client.pcap" 2>/dev/null | awk '$2 == "IP" { split($5, a, "."); p = a[5] + 0; print (p >= 48200 ? "set3" : p >= 48100 ? "set2" : p >= 48000 ? "set1" : "other") ":" p }' | sort -u | cut -d: -f1 | sort | uniq -c | awk '{ printf "%s%s=%s", sep, $2, $1; sep = " " }')
  echo "  GUE packets seen arriving on node2's eth0 by outer source: ${arrivals:-none}"
  echo "  SYN-ACKs from $NH_VIP:80 on the client's eth0 (distinct flows) by set: ${synacks:-none}"
  printf '  %-32s %8s %8s %8s\n' "node2 counter (delta)" "set 1" "set 2" "set 3"
  for c in tc_drop_not_cluster tc_drop_self_unmarked tc_decap_syn tc_drop_malformed tc_pass_other; do
    printf '  %-32s %8s %8s %8s\n' "$c" "$(spoof_delta "$c" 1)" "$(spoof_delta "$c" 2)" "$(spoof_delta "$c" 3)"
  done
  local n1 s1 n2d s2 y1 y2 y3
  n1=$(spoof_delta tc_drop_not_cluster 1) s1=$(spoof_delta tc_decap_syn 1)
  n2d=$(spoof_delta tc_drop_self_unmarked 2) s2=$(spoof_delta tc_decap_syn 2)
  y1=$(sed -n 's/.*set1=\([0-9]*\).*/\1/p' <<<"$synacks") y2=$(sed -n 's/.*set2=\([0-9]*\).*/\1/p' <<<"$synacks")
  y3=$(sed -n 's/.*set3=\([0-9]*\).*/\1/p' <<<"$synacks")
  nums+="outside source: sent $SPOOF_COUNT, arrived $(sed -n "s/.*$outsider=\([0-9]*\).*/\1/p" <<<"$arrivals"), tc_drop_not_cluster +$n1, tc_decap_syn +$s1, SYN-ACKs ${y1:-0}; "
  nums+="own source: sent $SPOOF_COUNT, tc_drop_self_unmarked +$n2d, tc_decap_syn +$s2, SYN-ACKs ${y2:-0}; "
  nums+="control from node1: tc_decap_syn +$(spoof_delta tc_decap_syn 3), drops +$(( $(spoof_delta tc_drop_not_cluster 3) + $(spoof_delta tc_drop_self_unmarked 3) + $(spoof_delta tc_drop_malformed 3) )), SYN-ACKs ${y3:-0}"
  [[ $n1 == "$SPOOF_COUNT" && $s1 == 0 && -z $y1 ]] || ok=0
  [[ $n2d == "$SPOOF_COUNT" && $s2 == 0 && -z $y2 ]] || ok=0
  (( $(spoof_delta tc_drop_malformed 1) == 0 && $(spoof_delta tc_drop_malformed 2) == 0 && $(spoof_delta tc_drop_self_unmarked 1) == 0 && $(spoof_delta tc_drop_not_cluster 2) == 0 )) || { ok=0; nums+="; other drop counters moved"; }
  # the control proves the packets are well-formed GUE that node2 would accept
  # from a cluster member (so the drops above are the source checks)
  [[ $(spoof_delta tc_decap_syn 3) == "$SPOOF_COUNT" && ${y3:-0} -ge 1 ]] || { ok=0; nums+="; control not accepted: the test packets may be malformed"; }
  if ((ok)); then pass spoof "$nums"; else fail spoof "$nums"; fi
}

# --------------------------------------------------------------------------- fail-static restarts (restart)

# held_hops FILE: "sport first-hop second-hop" of every held connection (HOLD_STATE)
# in node1's live table, from its pins (`nilb lookup --live`; works with no daemon)
held_hops() {
  local sp out
  : >"$1"
  for sp in $(json "$HOLD_STATE" '" ".join(str(c["sport"]) for c in d["connections"] if c["first"])'); do
    out=$(timeout 10 "$NILB" lookup --config "$CFG" --live --pin-dir "${PIN_DIR[node1]}" "$NH_CLIENT_IP:$sp" "$NH_VIP:80" tcp 2>&1)
    echo "$sp $(sed -n 's/^first hop *\([0-9.]*\).*/\1/p' <<<"$out") $(sed -n 's/^second hop *\([0-9.a-z]*\).*/\1/p' <<<"$out")" >>"$1"
  done
}

# stream_window RESULT T_FROM T_TO: "ok/started" of the stream's requests started
# in [T_FROM, T_TO), plus the errors by kind if any
stream_window() {
  "$NH_PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
a, b = float(sys.argv[2]), float(sys.argv[3])
r = [x for x in d["requests"] if a <= x[0] < b]
bad = {}
for x in r:
    if x[3]:
        bad[x[3]] = bad.get(x[3], 0) + 1
print("%d/%d%s" % (sum(1 for x in r if x[2]), len(r), (" errors " + json.dumps(bad, sort_keys=True)) if bad else ""))
' "$1" "$2" "$3" 2>/dev/null || echo "?/?"
}
window_ok() { [[ $1 =~ ^([0-9]+)/([0-9]+)$ && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" && ${BASH_REMATCH[2]} -gt 0 ]]; }

# restart_cycle kill|upgrade SPORT_BASE: stop node1's nilb (SIGKILL, or SIGTERM of a
# daemon started with --keep-dataplane), ~3 s with no daemon under a stream of new
# connections, start it again on the same pins; compare the live tables. Sets
# CYCLE_OK and CYCLE_NUMBERS.
restart_cycle() {
  local mode=$1 base=$2 pid=${NILB_PID[node1]} pin=${PIN_DIR[node1]} rc t_stop t_start t_ready
  local stop=$NH_OUT/stream-restart-$1.stop tb=$NH_OUT/tables-$1-before.json ta=$NH_OUT/tables-$1-ready.json
  local tl=$NH_OUT/tables-$1-later.json link filt cmp1 cmp2 gap before after enc hop_moved adopted newpid cont
  CYCLE_OK=1 CYCLE_NUMBERS="$mode: "
  if [[ $mode == kill ]]; then
    echo "  -- SIGKILL to node1's nilb (pid $pid): a crash"
  else
    echo "  -- SIGTERM to node1's nilb (pid $pid, started with --keep-dataplane): an upgrade"
  fi
  if ! nh_local "$NH_PY" "$HERE/tables.py" dump "$pin" --out "$tb" >"$NH_OUT/tables.out" 2>&1; then
    CYCLE_OK=0 CYCLE_NUMBERS+="cannot read the live table: $(head -c 200 "$NH_OUT/tables.out")"
    return 1
  fi
  echo "  node1 live table before (tables.py from $pin): $(<"$NH_OUT/tables.out")"
  held_hops "$NH_OUT/hops-$mode-before.txt"
  nilb_stats node1 --all >"$NH_OUT/stats-node1-$mode-before.txt"
  if ! stream_bg "restart-$mode" "$base" 20 20 "$stop"; then
    CYCLE_OK=0 CYCLE_NUMBERS+="stream client did not start; "
  fi
  sleep 0.5
  t_stop=$(nh_now)
  if [[ $mode == kill ]]; then
    nh_stop "$pid" KILL 5
  else
    nh_stop "$pid" TERM 15
  fi
  rc=$NH_LAST_RC
  link=$(ip -n "$(nh_ns node1)" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1)
  filt=$(tc -n "$(nh_ns node1)" filter show dev eth0 ingress 2>/dev/null | grep -c .)
  echo "  nilb exited with status $rc $(nh_calc "$(nh_now) - $t_stop")s after the signal; node1 eth0 now: xdp ${link:-none}, tc ingress filter lines $filt"
  if [[ $mode == kill ]]; then
    [[ $rc == 137 ]] || { CYCLE_OK=0; CYCLE_NUMBERS+="exit status $rc (not 137); "; }
  else
    [[ $rc == 0 ]] || { CYCLE_OK=0; CYCLE_NUMBERS+="exit status $rc (not 0); "; }
    if log_has node1 0 'data plane kept'; then
      echo "  its log: $(log_since node1 0 | grep -m 1 'data plane kept' | sed 's/^.*Z *INFO *//' | cut -c1-150)"
    else
      CYCLE_OK=0 CYCLE_NUMBERS+="no 'data plane kept' in its log; "
    fi
  fi
  if [[ -n $link && $filt -gt 0 ]]; then
    CYCLE_NUMBERS+="XDP and TC stayed attached; "
  else
    CYCLE_OK=0 CYCLE_NUMBERS+="data plane NOT attached after exit (xdp ${link:-none}, tc lines $filt); "
  fi
  sleep 3 # the gap: no control plane on node1, the orphaned data plane forwards
  nilb_stats node1 --all >"$NH_OUT/stats-node1-$mode-gap.txt"
  enc=0
  local c
  for c in xdp_encap_tx xdp_encap_local xdp_encap_slow_path; do
    enc=$((enc + $(counter "$c" "$NH_OUT/stats-node1-$mode-gap.txt") - $(counter "$c" "$NH_OUT/stats-node1-$mode-before.txt")))
  done
  mv -f "$NH_OUT/nilb-node1.log" "$NH_OUT/nilb-node1.before-$mode.log"
  t_start=$(nh_now)
  if [[ $mode == kill ]]; then
    start_nilb_on node1 --keep-dataplane # so that the upgrade cycle can stop it keeping the data plane
  else
    start_nilb_on node1
  fi
  newpid=${NILB_PID[node1]}
  echo "  started nilb on node1 again after a $(nh_calc "$t_start - $t_stop")s gap (pid $newpid): nilb ${NILB_ARGS[*]}"
  if ! wait_ready node1; then
    touch "$stop"
    stream_wait 30
    CYCLE_OK=0 CYCLE_NUMBERS+="restarted nilb not ready"
    return 1
  fi
  t_ready=$(nh_now)
  adopted=$(log_since node1 0 | grep -m 1 'adopted the pinned maps' | sed 's/^.*Z *INFO *//' | cut -c1-140)
  if [[ -n $adopted ]]; then
    echo "  ready $(nh_calc "$t_ready - $t_start")s after start; log: $adopted"
  else
    echo "  ready $(nh_calc "$t_ready - $t_start")s after start, but its log does not say it adopted the pinned maps:"
    log_tail "$NH_OUT/nilb-node1.log" 8
    CYCLE_OK=0 CYCLE_NUMBERS+="NOT adopted; "
  fi
  nh_local "$NH_PY" "$HERE/tables.py" dump "$pin" --out "$ta" >/dev/null 2>&1
  cmp1=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$tb" "$ta")
  echo "  live table at ready vs before the stop: ${cmp1##*SUMMARY }"
  # once the health checks have answered and the state file is the new daemon's
  if ! st_wait node1 8 "d.get('pid') == $newpid and $(settled_expr)"; then
    echo "  node1's state did not settle within 8 s after the restart: $WAIT_SUMMARY"
    CYCLE_OK=0 CYCLE_NUMBERS+="state not settled after restart; "
  fi
  sleep 1
  nh_local "$NH_PY" "$HERE/tables.py" dump "$pin" --out "$tl" >/dev/null 2>&1
  cmp2=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$tb" "$tl")
  echo "  live table $(nh_calc "$(nh_now) - $t_ready")s after ready (health checks answered) vs before the stop: ${cmp2##*SUMMARY }"
  grep -v '^SUMMARY' <<<"$cmp2" | head -n 5 | sed 's/^/    /'
  [[ $cmp1 == *"SUMMARY PASS"* && $cmp2 == *"SUMMARY PASS"* ]] || CYCLE_OK=0
  # counters live in the pinned maps too: the new daemon continues them
  nilb_stats node1 --all >"$NH_OUT/stats-node1-$mode-after.txt"
  cont=$(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-after.txt")
  if ((cont >= $(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-gap.txt") && cont > 0)); then
    CYCLE_NUMBERS+="counters carried over (xdp_encap_tx $(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-before.txt") before, $cont after); "
  else
    CYCLE_OK=0 CYCLE_NUMBERS+="counters NOT carried over (xdp_encap_tx $(counter xdp_encap_tx "$NH_OUT/stats-node1-$mode-gap.txt") in the gap, $cont after); "
  fi
  held_hops "$NH_OUT/hops-$mode-after.txt"
  hop_moved=$(diff "$NH_OUT/hops-$mode-before.txt" "$NH_OUT/hops-$mode-after.txt" | grep -c '^>')
  [[ $hop_moved == 0 ]] || CYCLE_OK=0
  touch "$stop"
  stream_wait 30
  before=$(stream_window "$STREAM_RES" 0 "$t_stop")
  gap=$(stream_window "$STREAM_RES" "$t_stop" "$t_ready")
  after=$(stream_window "$STREAM_RES" "$t_ready" 1e12)
  echo "  new connections (20/s): before the signal $before, from the signal until the new daemon was ready $gap, after $after; node1 encapsulated $enc packets during the gap"
  window_ok "$gap" && window_ok "$after" && window_ok "$before" || CYCLE_OK=0
  CYCLE_NUMBERS+="exit $rc, gap $(nh_calc "$t_ready - $t_stop")s: new connections OK $gap in the gap ($after after), encapsulated in the gap $enc; adopted $([[ -n $adopted ]] && echo yes || echo NO); "
  CYCLE_NUMBERS+="buckets compared $(sed -n 's/.* buckets=\([0-9]*\).*/\1/p' <<<"$cmp1"), moved $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$cmp1") at ready / $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$cmp2") later (second hops changed $(sed -n 's/.*second_changed=\([0-9]*\).*/\1/p' <<<"$cmp2"), move times changed $(sed -n 's/.*age_changed=\([0-9]*\).*/\1/p' <<<"$cmp2")); held flows with other hops (nilb lookup --live) $hop_moved/$(wc -l <"$NH_OUT/hops-$mode-before.txt")"
  [[ $CYCLE_OK == 1 ]]
}

scenario_restart() {
  local nums="" ok=1 est okc resets fails rounds
  header "(restart) fail-static: node1's nilb crashes (SIGKILL) and is upgraded (SIGTERM + --keep-dataplane)"
  if [[ -z ${PIN_DIR[node1]:-} ]]; then
    fail restart "no pins on a harness bpffs (mount_pins did not run)"
    return
  fi
  if ! ensure_all_up; then
    fail restart "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  hold_bg restart --count 30 --sport-base 47000 --rounds 1000 --interval 0.3 --max-seconds 60 --until "$NH_OUT/hold-restart.until"
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail restart "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-restart.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  echo "  held connections established: $est/30, by backend: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])'); each sends a request every 0.3 s from now on"
  [[ $est == 30 ]] || ok=0
  touch "$HOLD_GO"
  restart_cycle kill 50000 || ok=0
  nums+="$CYCLE_NUMBERS; "
  if nh_alive "${NILB_PID[node1]}" && [[ ${NILB_KEEP[node1]} == 1 ]]; then
    restart_cycle upgrade 50400 || ok=0
    nums+="$CYCLE_NUMBERS; "
  else
    ok=0
    nums+="upgrade: skipped (node1's nilb not running with --keep-dataplane); "
  fi
  touch "$HOLD_UNTIL"
  hold_finish 30
  if hold_read; then
    nums+="held connections OK ${okc}/30 over ${rounds} rounds across both gaps, resets ${resets}, failures ${fails}"
    [[ $okc == 30 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 ]] || ok=0
  else
    nums+="hold client produced no result (exit $HOLD_RC)"
    ok=0
  fi
  daemons_alive || { ok=0; nums+="; a daemon is not running"; }
  if ((ok)); then pass restart "$nums"; else fail restart "$nums"; fi
}

# --------------------------------------------------------------------------- dynamic weights (dw)

DW_PORT=9101            # the harness's CPU metrics endpoint in every node (nilb's own is 127.0.0.1:9700)
DW_DEADBAND=4           # deadband_percent of the dw config (percentage points of CPU)
DW_MAX_STEP=5           # rebalance.max_step_percent during dw

# dw_control NODE2_COST: write the load model (dynweight.py): every node idle 10 %
# plus 0.9 x its bucket share (40 % with a third of the buckets); node2's cost as given
dw_control() {
  local tmp=$NH_OUT/dw-control.json.tmp
  printf '{"nodes": {"node1": {"idle": 0.1, "cost": 0.9}, "node2": {"idle": 0.1, "cost": %s}, "node3": {"idle": 0.1, "cost": 0.9}}}\n' \
    "$1" >"$tmp" && mv -f "$tmp" "$NH_OUT/dw-control.json"
}
# dw_wait LABEL [--need-change]: bounded wait until node1's shares (changed and then)
# stayed put for 3 s with no pending moves (the controller is inside its deadband)
dw_wait() {
  local out
  out=$(nh_local "$NH_PY" "$HERE/dynweight.py" wait --state "$(state_of node1)" --quiet 3 --timeout 30 "${@:2}")
  local rc=$?
  echo "  $1: $(json <(echo "$out") 'd["summary"]') ($(json <(echo "$out") '"settled" if d["ok"] else "NOT settled"') after $(json <(echo "$out") 'd["elapsed_s"]') s, 3 s of them without a change)"
  return "$rc"
}

# dw_restart (NH_DW_RESTART=1): SIGKILL node1's nilb while dynamic weights have
# shaped its table, start it again on the same pins; the table must not move
# (adoption promises that). Sets DWR_NUMBERS.
dw_restart() {
  local pin=${PIN_DIR[node1]:-} b=$NH_OUT/tables-dw-before.json r=$NH_OUT/tables-dw-ready.json
  local l=$NH_OUT/tables-dw-later.json c1 c2 t_ready
  DWR_NUMBERS="restart under dynamic weights: "
  if [[ -z $pin ]]; then
    DWR_NUMBERS+="no pins on a harness bpffs"
    return 1
  fi
  nh_local "$NH_PY" "$HERE/tables.py" dump "$pin" --out "$b" >/dev/null 2>&1
  nh_stop "${NILB_PID[node1]}" KILL 5
  mv -f "$NH_OUT/nilb-node1.log" "$NH_OUT/nilb-node1.before-dw.log"
  start_nilb_on node1
  if ! wait_ready node1; then
    DWR_NUMBERS+="restarted nilb not ready"
    return 1
  fi
  t_ready=$(nh_now)
  nh_local "$NH_PY" "$HERE/tables.py" dump "$pin" --out "$r" >/dev/null 2>&1
  c1=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$b" "$r" | tail -n 1)
  sleep 5
  nh_local "$NH_PY" "$HERE/tables.py" dump "$pin" --out "$l" >/dev/null 2>&1
  c2=$(nh_local "$NH_PY" "$HERE/tables.py" compare "$b" "$l" | tail -n 1)
  echo "  SIGKILL + restart of node1's nilb with the table shaped by dynamic weights (node2 hot):"
  echo "    live table at ready vs before: ${c1#SUMMARY }"
  echo "    live table $(nh_calc "$(nh_now) - $t_ready")s after ready vs before: ${c2#SUMMARY }"
  log_since node1 0 | grep 'table installed' | head -n 6 | sed 's/^.*Z *INFO *table installed *//; s/service=web key=[^ ]* //; s/^/    node1 after the restart: /'
  DWR_NUMBERS+="moved $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$c1") at ready, $(sed -n 's/.* moved=\([0-9]*\).*/\1/p' <<<"$c2") within 5 s (move times changed $(sed -n 's/.*age_changed=\([0-9]*\).*/\1/p' <<<"$c2"))"
  [[ $c1 == "SUMMARY PASS"* && $c2 == "SUMMARY PASS"* ]]
}

scenario_dw() {
  local nums="" ok=1 n m est t0 t_hot t_hot_end logs=() t_cool t_end share2 cost2 spid res okc resets fails rounds verdict
  local old_w=() old_step=$RB_MAX_STEP_PERCENT phase=$NH_OUT/dw-phase csv=$NH_OUT/dynamic-weights.csv png=$NH_OUT/dynamic-weights.png
  header "(dw) dynamic weights from CPU load: node2 runs hot, its share falls in paced steps, then returns"
  if ! ensure_all_up; then
    fail dw "precondition: not every backend up and settled: $WAIT_SUMMARY"
    return
  fi
  dw_control 0.9
  declare -A DW_PID=()
  for n in "${NH_NODES[@]}"; do
    nh_bg "cpu metrics on $n" "$NH_OUT/cpu-metrics-$n.log" "$n" "$NH_PY" "$HERE/dynweight.py" serve --node "$n" \
      --port "$DW_PORT" --control "$NH_OUT/dw-control.json" --state "$(state_of node1)"
    DW_PID[$n]=$NH_BG_PID
  done
  for n in "${NH_NODES[@]}"; do
    if ! nh_wait_until 10 grep -q 'listening on' "$NH_OUT/cpu-metrics-$n.log"; then
      fail dw "the CPU metrics server on $n did not start: $(tr '\n' ' ' <"$NH_OUT/cpu-metrics-$n.log")"
      for m in "${NH_NODES[@]}"; do nh_stop "${DW_PID[$m]}" TERM 3; done
      return
    fi
  done
  for n in "${NH_NODES[@]}"; do old_w+=("${WEIGHT[$n]}"); done
  cp "$CFG" "$NH_OUT/nilb-before-dw.yaml"
  RB_MAX_STEP_PERCENT=$DW_MAX_STEP
  DW_YAML="{source: cpu, metrics_port: $DW_PORT, interval_ms: 1000, deadband_percent: $DW_DEADBAND}"
  write_config 100 100 100
  echo "  load model: each node serves nilb_host_cpu_utilization_ratio = 0.1 + cost x (its share of node1's buckets) on :$DW_PORT/metrics, cost 0.9 (40 % at a third)"
  echo "  config: weights $(weights_ratio), dynamic_weight: $DW_YAML; rebalance: {min_interval_ms: $RB_MIN_INTERVAL_MS, max_step_percent: $RB_MAX_STEP_PERCENT, min_bucket_age_ms: $RB_MIN_BUCKET_AGE_MS}"
  if ! nilb_check; then
    ok=0
    nums+="nilb check rejected the dw config; "
  else
    hup_all
    if st_wait node1 20 "$(settled_expr) and all(x.get('load') is not None for x in b.values())"; then
      echo "  node1 on the new config with load readings: $WAIT_SUMMARY"
    else
      echo "  node1 did not settle on $(weights_ratio) with load readings within 20 s: $WAIT_SUMMARY"
      nums+="not settled with load readings before the test; "
      ok=0
    fi
  fi
  if ((ok)); then
    hold_bg dw --count 36 --sport-base 49000 --rounds 1000 --interval 0.25 --max-seconds 90 --until "$NH_OUT/hold-dw.until"
    est=$(json "$HOLD_STATE" 'd["established"]' 2>/dev/null)
    echo "  held connections established: ${est:-0}/36, by backend: $(json "$HOLD_STATE" 'json.dumps(d["by_backend"])'); each sends a request every 0.25 s from now on"
    [[ $est == 36 ]] || ok=0
    touch "$HOLD_GO"
    echo "all at 40 %" >"$phase"
    t0=$(nh_now)
    rm -f "$NH_OUT/dw-sample.stop"
    nh_bg "dw sampler" "$NH_OUT/dw-sampler.log" node1 "$NH_PY" "$HERE/dynweight.py" sample --state "$(state_of node1)" \
      --control "$NH_OUT/dw-control.json" --phase-file "$phase" --out "$csv" --t0 "$t0" --interval 0.5 \
      --stop-file "$NH_OUT/dw-sample.stop" --max-seconds 120
    spid=$NH_BG_PID
    sleep 2
    share2=$(st get "$(state_of node1)" "b['node2']['buckets'] / svc['table_size']")
    cost2=$(nh_calc "(0.95 - 0.1) / $share2")
    dw_control "$cost2"
    echo "node2 at 95 %" >"$phase"
    t_hot=$(nh_now)
    echo "  +$(nh_calc "$t_hot - $t0")s node2 runs hot: cost $cost2 per unit of share, i.e. 95 % at its share of $(nh_calc "100 * $share2")%"
    dw_wait "node2 hot" --need-change || { ok=0; nums+="shares did not settle while node2 was hot; "; }
    t_hot_end=$(nh_now)
    logs=()
    if [[ ${NH_DW_RESTART:-1} == 1 ]]; then
      echo "restart" >"$phase"
      dw_restart || ok=0
      nums+="$DWR_NUMBERS; "
      logs=(--log "$NH_OUT/nilb-node1.before-dw.log")
      echo "node2 at 95 %" >"$phase"
      dw_wait "node2 hot, after the restart" || { ok=0; nums+="shares did not settle after the restart; "; }
    fi
    dw_control 0.9
    echo "node2 back to normal" >"$phase"
    t_cool=$(nh_now)
    echo "  +$(nh_calc "$t_cool - $t0")s node2 back to normal (cost 0.9)"
    dw_wait "node2 normal" --need-change || { ok=0; nums+="shares did not settle after node2 recovered; "; }
    t_end=$(nh_now)
    sleep 1
    touch "$NH_OUT/dw-sample.stop"
    nh_wait_until 5 nh_not_alive "$spid"
    nh_stop "$spid" TERM 3
    touch "$HOLD_UNTIL"
    hold_finish 30
    "$NH_PY" "$HERE/dynweight.py" analyze --csv "$csv" --log "$NH_OUT/nilb-node1.log" "${logs[@]}" --t0 "$t0" \
      --control-hot <(printf '{"nodes": {"node1": {"idle": 0.1, "cost": 0.9}, "node2": {"idle": 0.1, "cost": %s}, "node3": {"idle": 0.1, "cost": 0.9}}}' "$cost2") \
      --t-hot "$t_hot" --t-hot-end "$t_hot_end" --t-cool "$t_cool" --t-end "$t_end" --table-size 1024 --max-step-percent "$RB_MAX_STEP_PERCENT" \
      --deadband-percent "$DW_DEADBAND" --weights "$(weights_ratio)" --min-weight 10 >"$NH_OUT/dw-verdict.txt"
    sed '$d' "$NH_OUT/dw-verdict.txt"
    echo "  info: node1's load scrapes that failed so far (state file load_errors): $(st get "$(state_of node1)" "' '.join('%s=%s' % (n, x.get('load_errors')) for n, x in b.items())")"
    verdict=$(tail -n 1 "$NH_OUT/dw-verdict.txt")
    [[ $verdict == "SUMMARY PASS"* ]] || ok=0
    nums+="${verdict#SUMMARY * }; "
    if hold_read; then
      nums+="held connections OK ${okc}/36 over ${rounds} rounds, resets ${resets}, failures ${fails}"
      [[ $okc == 36 && $resets == 0 && $fails == 0 && $HOLD_RC == 0 ]] || ok=0
    else
      nums+="hold client produced no result (exit $HOLD_RC)"
      ok=0
    fi
    "$NH_PY" "$HERE/dynweight.py" plot --csv "$csv" --out "$png" \
      --title "nilb dynamic weights (source: cpu, interval 1 s, deadband $DW_DEADBAND %, steps of at most $RB_MAX_STEP_PERCENT % of the buckets): bucket shares on the balancer" \
      --mark "$(nh_calc "$t_hot - $t0"):node2 at 95 %" --mark "$(nh_calc "$t_cool - $t0"):node2 back to normal" |
      sed 's/^/  /'
    echo "  samples: $csv ($(($(wc -l <"$csv") - 1)) rows)$([[ -s $png ]] && echo ", plot: $png")"
    if [[ -n $PLOT_OUT ]]; then
      if mkdir -p "$PLOT_OUT" && cp "$csv" "$PLOT_OUT/" && { [[ ! -s $png ]] || cp "$png" "$PLOT_OUT/"; }; then
        echo "  copied to $PLOT_OUT/"
      else
        echo "  could not copy the CSV/PNG to $PLOT_OUT"
      fi
    fi
  fi
  # back to the weights and pacing from before, without dynamic weights
  DW_YAML=""
  RB_MAX_STEP_PERCENT=$old_step
  write_config "${old_w[@]}"
  hup_all
  if st_wait node1 20 "reload.get('ok') is True and $(settled_expr)"; then
    echo "  restored weights $(weights_ratio) without dynamic weights: $WAIT_SUMMARY"
  else
    echo "  node1 did not settle on $(weights_ratio) after dynamic weights were removed: $WAIT_SUMMARY"
    nums+="; restoring the weights did not settle"
    ok=0
  fi
  for n in "${NH_NODES[@]}"; do nh_stop "${DW_PID[$n]}" TERM 3; done
  if ((ok)); then pass dw "$nums"; else fail dw "$nums"; fi
}

selftest() {
  header "selftest: harness plumbing without nilb"
  local out res pcap tlog tpid frames mac2 state go hpid
  cl burst --host "${NH_NODE_IP[node2]}" --port 80 --count 50 --sport-base 20000 --max-seconds 20
  out=$OUT
  echo "  burst to node2: $out"
  if [[ $(json <(echo "$out") 'd["by_backend"].get("node2",0)') == 50 ]]; then pass burst "50/50 from node2"; else fail burst "$out"; fi
  cl burst --host "${NH_NODE_IP[node1]}" --port 8080 --count 5 --sport-base 20100 --max-seconds 20
  out=$OUT
  if [[ $(json <(echo "$out") 'd["ok"]') == 5 ]]; then pass port8080 "5/5 from node1:8080"; else fail port8080 "$out"; fi
  cl burst --host "${NH_NODE_IP[node3]}" --port 81 --count 3 --sport-base 20200 --max-seconds 10
  out=$OUT
  if [[ $(json <(echo "$out") 'd["errors"].get("refused",0)') == 3 ]]; then pass errors "refused counted: $out"; else fail errors "$out"; fi

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

# --------------------------------------------------------------------------- main

echo "nilb netns harness: prefix $NH_PREFIX, output $NH_OUT${NILB:+, nilb $NILB_SRC}$([[ $NILB != "$NILB_SRC" ]] && echo " (run from a copy in the output directory)")"
header "topology"
if ! nh_build_topology; then
  fail setup "could not build the topology (see $NH_OUT/setup.log)"
  echo "harness: $NPASS passed, $NFAIL failed"
  exit 1
fi
echo "  namespaces: ${NH_CREATED_NS[*]}"
if ! start_backends || ! sanity; then
  fail setup "backends or basic connectivity broken"
  echo "harness: $NPASS passed, $NFAIL failed"
  exit 1
fi

if ((SELFTEST)); then
  selftest
else
  write_config 1 1 2
  echo "  config: $CFG (weights $(weights_ratio))"
  if ! nilb_check; then
    fail setup "nilb check rejected the harness config"
    echo "harness: $NPASS passed, $NFAIL failed"
    exit 1
  fi
  if ((DEMO == 0)) && { want restart || { want dw && [[ ${NH_DW_RESTART:-1} == 1 ]]; }; } && ! mount_pins; then
    fail setup "could not mount a bpffs for the pins (see $NH_OUT/setup.log)"
    echo "harness: $NPASS passed, $NFAIL failed"
    exit 1
  fi
  header "starting nilb on every node"
  if ! start_nilb; then
    fail setup "nilb did not become ready on every node"
    echo "harness: $NPASS passed, $NFAIL failed"
    exit 1
  fi
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
    want a && { scenario_a; check_daemons; }
    want b && { scenario_b; check_daemons; }
    want c && { scenario_c; check_daemons; }
    want d && { scenario_d; check_daemons; }
    want h1 && { scenario_h1; check_daemons; }
    want h2 && { scenario_h2; check_daemons; }
    want h3 && { scenario_h3; check_daemons; }
    want h4 && { scenario_h4; check_daemons; }
    want h5 && { scenario_h5; check_daemons; }
    want h6 && { scenario_h6; check_daemons; }
    want spoof && { scenario_spoof; check_daemons; }
    want restart && { scenario_restart; check_daemons; }
    want dw && { scenario_dw; check_daemons; }
    want e && scenario_e
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
