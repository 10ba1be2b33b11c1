#!/usr/bin/env bash
# run.sh - end-to-end test of nilb in network namespaces (real TCP/HTTP traffic).
#
#   netns-harness/run.sh [--demo] [--nilb PATH] [--keep-logs] [--only a,b,c,d,e]
#                        [--xdp-mode native|generic] [--out DIR] [--selftest]
#
# Must run as root. Builds a private topology (see lib.sh), starts an HTTP backend
# and `nilb run` in every node namespace, then runs the scenarios:
#   a  300 requests with distinct source ports via the VIP; split matches weights 1:1:2
#   b  DSR: replies from the VIP reach the client straight from node2/node3 (by MAC)
#   c  with XDP attached on node1: node1's own address (port 8080 and 80) and ping work
#   d  second chance: 30 long-lived connections survive a weight change + SIGHUP;
#      fresh connections then follow the new weights
#   e  SIGTERM: every nilb exits 0 and leaves no XDP program / tc ingress filter
# Prints "PASS <scenario>: ..." or "FAIL <scenario>: ..." per scenario and a closing
# "harness: N passed, N failed"; exits 1 if anything failed.
#
# --demo      topology + one 300-request burst shown as a table + the DSR check; nothing else
# --selftest  no nilb needed: checks topology, backends, client, capture and cleanup only
# --nilb PATH nilb binary (default: <repo>/target/release/nilb)
# --keep-logs keep the run's directory (logs, pcaps, JSON); it is also kept when a scenario fails
# --out DIR   put the run's directory under DIR (default: $TMPDIR or /tmp)
#
# Environment:
#   NILB_EXTRA_ARGS             extra words appended to every `nilb run` (word-split)
#   NILB_XDP_MODE               default for --xdp-mode (otherwise nilb's own default)
#   NILB_READY_TIMEOUT          seconds to wait for "ready" in each nilb log (default 30)
#   NILB_HARNESS_DEFAULTS_EXTRA YAML lines inserted under `defaults:` of the generated
#                               config (2-space indented), e.g. rebalance limits
#   NILB_HARNESS_PREFIX         namespace name prefix (default nh<pid>)
#   NILB_HARNESS_OUT            same as --out
#   NH_PY                       python3 to use (default /usr/bin/python3)
#   NH_PEER_XDP=0               no XDP_PASS on the bridge-side veth ends (reproduces the
#                               XDP_TX trap: connections through the balancer time out)
#   NH_BALANCER_FORWARDING=0    leave forwarding off on node1's eth0 (nilb's slow TC path)
# shellcheck disable=SC2001 # sed over multi-line text is clearer here
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

usage() { sed -n '2,/^# shellcheck disable/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

DEMO=0 SELFTEST=0 KEEP=0
NILB=""
ONLY="a,b,c,d,e"
XDP_MODE=${NILB_XDP_MODE:-}
OUTBASE=${NILB_HARNESS_OUT:-}
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
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

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
CFG=$NH_OUT/nilb.yaml
declare -A NILB_PID=()
declare -A WEIGHT=()

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

# write_config W1 W2 W3: (re)write $CFG atomically with these weights
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
    echo "  health_check: {interval_ms: 500, timeout_ms: 300, rise_count: 2, fall_count: 2}"
    echo "  rebalance: {min_interval_ms: 200, max_step_percent: 50, min_bucket_age_ms: 2000}"
    [[ -n ${NILB_HARNESS_DEFAULTS_EXTRA:-} ]] && printf '%s\n' "$NILB_HARNESS_DEFAULTS_EXTRA"
    echo "services:"
    echo "  - name: web"
    echo "    vip: $NH_VIP"
    echo "    port: 80"
    echo "    protocol: tcp"
    echo "    backends:"
    for n in "${NH_NODES[@]}"; do
      echo "      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: ${WEIGHT[$n]}}"
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

start_nilb() {
  local n args
  for n in "${NH_NODES[@]}"; do
    args=(run --config "$CFG" --interface eth0 --node-address "${NH_NODE_IP[$n]}" --state-file "$NH_OUT/state-$n.yaml")
    [[ -n $XDP_MODE ]] && args+=(--xdp-mode "$XDP_MODE")
    # shellcheck disable=SC2206 # word splitting of NILB_EXTRA_ARGS is intended
    [[ -n ${NILB_EXTRA_ARGS:-} ]] && args+=($NILB_EXTRA_ARGS)
    nh_bg "nilb on $n" "$NH_OUT/nilb-$n.log" "$n" "$NILB" "${args[@]}"
    NILB_PID[$n]=$NH_BG_PID
    echo "  started nilb on $n (pid $NH_BG_PID): nilb ${args[*]}"
  done
  for n in "${NH_NODES[@]}"; do
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

# nilb_stats NODE: `nilb stats` inside the daemon's mount + net namespace
nilb_stats() {
  local pid=${NILB_PID[$1]}
  nh_alive "$pid" || return 1
  timeout --foreground 10 nsenter --target "$pid" --mount --net "$NILB" stats 2>&1
}

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
  local n ok=1 nums="" rc link xdp filt qd bt
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
    link=$(ip -n "$ns" -d link show dev eth0)
    xdp=$(grep -Eo 'prog/xdp[a-z]* id [0-9]+|[ ,<]xdp[a-z]*[ >]' <<<"$link" | head -n 1)
    filt=$(tc -n "$ns" filter show dev eth0 ingress 2>/dev/null)
    qd=$(tc -n "$ns" qdisc show dev eth0 2>/dev/null | grep -o 'clsact' | head -n 1)
    echo "    ip -d link show eth0: ${xdp:-no xdp}"
    echo "    tc filter show dev eth0 ingress: $(if [[ -n $filt ]]; then echo; sed 's/^/      | /' <<<"$filt"; else echo "(empty)"; fi)"
    echo "    info: clsact qdisc ${qd:+still }${qd:-not }present"
    if command -v bpftool >/dev/null 2>&1; then
      bt=$(ip netns exec "$ns" bpftool net show dev eth0 2>/dev/null | grep -E 'eth0' | tr -s ' ')
      echo "    bpftool net show dev eth0: ${bt:-(nothing attached)}"
      [[ -z $bt ]] || ok=0
    fi
    [[ -z $xdp && -z $filt ]] || ok=0
    nums+="$n: exit=$rc xdp=${xdp:+yes}${xdp:-none} tc_ingress=$( [[ -n $filt ]] && echo present || echo none); "
  done
  if ((ok)); then pass e "$nums"; else fail e "$nums"; fi
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

echo "nilb netns harness: prefix $NH_PREFIX, output $NH_OUT${NILB:+, nilb $NILB}"
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
