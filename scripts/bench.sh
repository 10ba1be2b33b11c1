#!/usr/bin/env bash
# bench.sh - nilb's benchmark suite; writes BENCHMARKS.md (one command, as root).
#
#   scripts/bench.sh [--only LIST] [--reps N] [--out FILE] [--keep] [--no-setup] [--nilb BIN]
#
#   --only LIST  comma list of: xdp (XDP and TC data plane), control (tables and map
#                sync), reload (SIGHUP to live), e2e (iperf3 and HTTP through the VIP
#                versus direct), filters (edge filters with 1,000,000 prefixes: denied and
#                allowed packets, loading and swapping the lists); default all. Sections
#                not run show as "not run".
#   --reps N     repetitions per measurement (default 5; the XDP pairs run 2N times)
#   --out FILE   where to write the report (default BENCHMARKS.md in the repository)
#   --keep       keep the work directory (raw JSON, logs) even after a clean run
#   --no-setup   do not run scripts/setup.sh (packages already installed)
#   --nilb BIN   run BIN as the daemon (reload and e2e sections; e.g. the static binary of
#                scripts/build-static.sh, a path from the repository root or absolute;
#                default: target/release/nilb)
#
# What it does (about 8 minutes on 2 cores after the build):
#   1. installs missing Debian packages (scripts/setup.sh), builds nilb and the bench
#      examples in release mode, compiles bench/bpf/bench.bpf.c (baselines, probes);
#   2. xdp:     namespace with a veth pair gen0/sink0; examples/bench_dataplane.rs, pinned
#               to one CPU: live-frames BPF_PROG_TEST_RUN of nilb's XDP balancer and of
#               baselines, frames counted on the peer; where the kernel refuses live frames
#               (probed at start), the same pairs as repeat-mode program cost (driver
#               gen_repeat, nothing transmitted; the report says which); TC program cost
#               per packet;
#   3. control: examples/bench_control.rs (Table::build/rebalance, ControlPlane::update,
#               install_table and its steps, full apply of 100 services);
#   4. reload:  `nilb run` with 100 and with 1,000 services in a namespace, config
#               rewritten + SIGHUP, pinned map polled until the new tables are live
#               (examples/bench_reload.rs measure), start to ready and RSS; then the
#               same reloads step by step in-process (bench_reload breakdown);
#   5. filters: same namespace set-up as xdp; examples/bench_filters.rs, pinned to one
#               CPU: two lists of 1,000,000 prefixes (list files), loaded and swapped as
#               a SIGHUP does (time per phase, kernel memory, peak RSS), then live frames
#               (or repeat mode, as xdp): a denied source against a bare XDP_DROP, an
#               allowed VIP packet against nilb without filters, and the same list in one
#               LPM_TRIE (the design not taken) against XDP_DROP;
#   6. e2e:     the netns harness topology (netns-harness/lib.sh): iperf3 and
#               short-connection HTTP (examples/bench_http.rs) from the client through
#               the VIP (DSR), through a NAT-mode service on node1's own address, and
#               directly to the same backend, alternating, same run;
#   7. bench/report.py renders medians, ratios, targets, machine and load into the report.
#
# BENCH_XDP_METHOD=live|repeat (default auto: live frames unless the kernel refuses them)
# forces the method of the xdp and filters sections' XDP figures.
#
# Everything runs in namespaces this script creates and deletes (also on Ctrl-C);
# nothing is configured in the root namespace. Raw results: $WORK (printed).
# shellcheck source-path=SCRIPTDIR
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
source "$HERE/env.sh" # PATH for cargo; cd to the repository root
REPO=$PWD

ONLY="xdp,control,reload,filters,e2e"
REPS=5
OUT=$REPO/BENCHMARKS.md
KEEP=0
SETUP=1
NILB_BIN=
while (($#)); do
  case $1 in
    --only) ONLY=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-setup) SETUP=0; shift ;;
    --nilb) NILB_BIN=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

if [[ $(id -u) != 0 ]]; then
  echo "bench.sh: run as root (BPF programs, network namespaces)" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/nilb-bench.XXXXXX)
echo "bench.sh: work directory $WORK"
PFX="nb$$"
MY_NS=()
declare -A MY_PIDS=()
FAILED=0

cleanup() {
  local p ns
  for p in "${!MY_PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null
  done
  for p in "${!MY_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  if declare -F nh_cleanup >/dev/null && [[ -n ${NH_PREFIX:-} ]]; then
    nh_cleanup >/dev/null 2>&1
  fi
  for ns in "${MY_NS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  if ((KEEP == 0 && FAILED == 0)); then
    rm -rf -- "$WORK"
  else
    echo "bench.sh: raw results and logs kept in $WORK"
  fi
}
trap cleanup EXIT
trap 'echo "bench.sh: interrupted"; FAILED=1; exit 130' INT TERM

say() { printf '\n== %s\n' "$*"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
section_fail() { echo "bench.sh: $1 failed (see $WORK)"; FAILED=1; echo "{\"error\": \"$1 failed\"}" >"$WORK/$2.json"; }
new_ns() {
  local ns="$PFX-$1"
  ip netns add "$ns" || return 1
  MY_NS+=("$ns")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

# ---------------------------------------------------------------- setup and build
START=$SECONDS
echo "load average at start: $(loadavg)" | tee "$WORK/load-start.txt"
if ((SETUP)); then
  "$REPO/scripts/setup.sh" >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log"; echo "bench.sh: setup.sh failed"; exit 1; }
fi
for c in clang-19 ip tc ethtool iperf3 nsenter taskset python3; do
  command -v "$c" >/dev/null || { echo "bench.sh: missing $c (scripts/setup.sh installs it)"; exit 1; }
done
say "building (release)"
if ! cargo build --release --bin nilb --example bench_dataplane --example bench_control \
  --example bench_reload --example bench_http --example bench_filters 2>&1 | tail -n 3; then
  echo "bench.sh: build failed"; exit 1
fi
NILB=${NILB_BIN:-$REPO/target/release/nilb}
EX=$REPO/target/release/examples
for b in "$NILB" "$EX/bench_dataplane" "$EX/bench_control" "$EX/bench_reload" "$EX/bench_http" "$EX/bench_filters"; do
  [[ -x $b ]] || { echo "bench.sh: $b was not built"; exit 1; }
done
INC=$(find "$REPO"/target/release/build -maxdepth 3 -path '*/libbpf-sys-*/out/include' -type d 2>/dev/null | head -n 1)
if [[ -z $INC ]]; then
  echo "bench.sh: libbpf headers not found under target/release/build/libbpf-sys-*/out/include"; exit 1
fi
if ! clang-19 -O2 -g -Wall -Werror -target bpf -I "$REPO/vmlinux" -I "$INC" \
  -c "$REPO/bench/bpf/bench.bpf.c" -o "$WORK/bench.bpf.o"; then
  echo "bench.sh: compiling bench/bpf/bench.bpf.c failed"; exit 1
fi
NCPU=$(nproc)
CPU=$((NCPU - 1)) # the data-plane bench is pinned to the last CPU

{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "kernel=$(uname -r)"
  echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "ncpu=$NCPU"
  echo "mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "rustc=$(rustc --version 2>/dev/null)"
  echo "clang=$(clang-19 --version | head -n 1)"
  # BENCH_COMMIT describes the tree when it is not a git checkout (e.g. an export)
  echo "commit=${BENCH_COMMIT:-$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')}"
  echo "virt=$(systemd-detect-virt 2>/dev/null || echo unknown)"
  perf_out=$(perf stat -e instructions true 2>&1)
  if [[ $perf_out == *"not supported"* || -z $perf_out ]]; then echo "perf_hw=no"; else echo "perf_hw=yes"; fi
  echo "pin_cpu=$CPU"
  echo "reps=$REPS"
} >"$WORK/machine.txt"

# ---------------------------------------------------------------- xdp + tc
if want xdp; then
  say "XDP and TC data plane (pinned to CPU $CPU)"
  echo "load before: $(loadavg)" >"$WORK/load-xdp.txt"
  NS="$PFX-dp"
  if new_ns dp &&
    ip -n "$NS" link add gen0 type veth peer name sink0 &&
    ip -n "$NS" addr add 10.99.0.1/24 dev gen0 &&
    ip -n "$NS" link set gen0 up && ip -n "$NS" link set sink0 up &&
    ip netns exec "$NS" sysctl -qw net.ipv4.conf.gen0.forwarding=1 net.ipv4.conf.all.rp_filter=0 \
      net.ipv4.conf.gen0.rp_filter=0 &&
    ip -n "$NS" addr add 10.99.0.100/32 dev lo && ip -n "$NS" addr add 10.99.0.2/32 dev lo; then
    SINK_MAC=$(ip -n "$NS" -o link show sink0 | sed -n 's#.*link/ether \([0-9a-f:]*\).*#\1#p')
    for h in 11 12 13 14 15 16 50; do
      ip -n "$NS" neigh replace "10.99.0.$h" lladdr "$SINK_MAC" dev gen0 nud permanent
    done
    # the IPv6 cluster network of the *_c6 cases: node fd99::1, backends
    # fd99::11-13 (IPv6 on gen0 only; the FIB answers IPv6 only with
    # forwarding on)
    ip netns exec "$NS" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 \
      net.ipv6.conf.gen0.disable_ipv6=0 net.ipv6.conf.gen0.accept_ra=0 &&
      ip -n "$NS" -6 addr add fd99::1/64 dev gen0 nodad &&
      ip netns exec "$NS" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv6.conf.gen0.forwarding=1
    for h in 11 12 13; do
      ip -n "$NS" -6 neigh replace "fd99::$h" lladdr "$SINK_MAC" dev gen0 nud permanent
    done
    # instructions executed per path (no hardware counters here): nilb's BPF
    # object built as build.rs builds it, run in bench/bpf_paths.py
    if clang-19 -O2 -g -Wall -target bpf -I "$REPO/vmlinux" -I "$REPO/bpf" -I "$INC" \
      -c "$REPO/bpf/nilb.bpf.c" -o "$WORK/nilb.bpf.o" 2>"$WORK/paths.log" &&
      python3 "$REPO/bench/bpf_paths.py" "$WORK/nilb.bpf.o" --json >"$WORK/paths.json" 2>>"$WORK/paths.log"; then
      python3 "$REPO/bench/bpf_paths.py" "$WORK/nilb.bpf.o" | sed 's/^/  /'
    else
      echo "  instruction count per path failed (see $WORK/paths.log); the report omits it"
    fi
    if ! timeout 600 ip netns exec "$NS" taskset -c "$CPU" "$EX/bench_dataplane" --obj "$WORK/bench.bpf.o" \
      --reps $((REPS * 2)) --frames 1000000 --method "${BENCH_XDP_METHOD:-auto}" --out "$WORK/dataplane.json" \
      2> >(tee "$WORK/dataplane.log" >&2); then
      section_fail "xdp" dataplane
    fi
  else
    section_fail "xdp namespace setup" dataplane
  fi
  echo "load after: $(loadavg)" >>"$WORK/load-xdp.txt"
fi

# ---------------------------------------------------------------- control plane
if want control; then
  say "control plane"
  echo "load before: $(loadavg)" >"$WORK/load-control.txt"
  if ! timeout 300 taskset -c "$CPU" "$EX/bench_control" --reps $((REPS + 2)) --out "$WORK/control.json" \
    2> >(tee "$WORK/control.log" >&2); then
    section_fail "control" control
  fi
  echo "load after: $(loadavg)" >>"$WORK/load-control.txt"
fi

# ---------------------------------------------------------------- SIGHUP to live
if want reload; then
  echo "load before: $(loadavg)" >"$WORK/load-reload.txt"
  NS="$PFX-rl"
  rc_ok=0
  if new_ns rl &&
    ip -n "$NS" link add r0 mtu 1600 type veth peer name r1 mtu 1600 &&
    ip -n "$NS" addr add 10.98.0.1/24 dev r0 &&
    ip -n "$NS" link set r0 up && ip -n "$NS" link set r1 up &&
    ip netns exec "$NS" sysctl -qw net.ipv4.conf.r0.forwarding=1; then
    rc_ok=1
  fi
  # 100 services (reload.json) and 1,000 (reload-1000.json); per size also the
  # in-process breakdown of a reload (reload-breakdown-N.json) and the daemon's
  # start to ready and RSS (reload-daemon-N.json).
  for NSV in 100 1000; do
    ((rc_ok)) || break
    say "SIGHUP to live (nilb run, $NSV services)"
    RDIR=$WORK/reload-$NSV
    mkdir -p "$RDIR"
    RCFG=$RDIR/nilb.yaml
    PIN=/sys/fs/bpf/nilb-bench
    OUTJ=$WORK/reload.json
    [[ $NSV == 100 ]] || OUTJ=$WORK/reload-$NSV.json
    if ! "$EX/bench_reload" gen --dir "$RDIR" --services "$NSV" || ! cp "$RDIR/a.yaml" "$RCFG"; then
      rc_ok=0
      break
    fi
    T0=$(date +%s%N)
    ip netns exec "$NS" "$NILB" run --config "$RCFG" --interface r0 --node-address 10.98.0.1 \
      --pin-dir "$PIN" --state-file "$RDIR/state.yaml" </dev/null >"$RDIR/nilb.log" 2>&1 &
    RPID=$!
    MY_PIDS[$RPID]=1
    for _ in $(seq 600); do
      grep -qw ready "$RDIR/nilb.log" 2>/dev/null && break
      kill -0 "$RPID" 2>/dev/null || break
      sleep 0.05
    done
    if grep -qw ready "$RDIR/nilb.log"; then
      READY_MS=$((($(date +%s%N) - T0) / 1000000))
      RSS=$(awk '/^VmRSS:/ {print $2}' "/proc/$RPID/status")
      if ! timeout 600 nsenter --target "$RPID" --mount --net "$EX/bench_reload" measure --services "$NSV" --pid "$RPID" \
        --config "$RCFG" --dir "$RDIR" --log "$RDIR/nilb.log" --pin-dir "$PIN" --reps "$REPS" \
        --out "$OUTJ" 2> >(tee "$WORK/reload-$NSV.log" >&2); then
        rc_ok=0
      fi
      RSS_AFTER=$(awk '/^VmRSS:/ {print $2}' "/proc/$RPID/status")
      HWM=$(awk '/^VmHWM:/ {print $2}' "/proc/$RPID/status")
      # Kernel memory of the BPF maps the daemon holds (memlock, once per map id).
      BPF_KB=$(for f in /proc/"$RPID"/fd/*; do
        [[ $(readlink "$f" 2>/dev/null) == *bpf-map* ]] && cat "/proc/$RPID/fdinfo/${f##*/}" 2>/dev/null
      done | awk '/^memlock:/ {m=$2} /^map_id:/ {if (!($2 in seen)) {seen[$2]=1; t+=m}} END {print int(t/1024)}')
      echo "{\"services\": $NSV, \"ready_ms\": $READY_MS, \"rss_kb_ready\": $RSS, \"rss_kb_after\": $RSS_AFTER, \"hwm_kb\": $HWM, \"bpf_kb\": ${BPF_KB:-0}}" \
        >"$WORK/reload-daemon-$NSV.json"
    else
      echo "nilb run did not become ready:"; tail -n 20 "$RDIR/nilb.log"
      rc_ok=0
    fi
    kill -TERM "$RPID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$RPID" 2>/dev/null || break; sleep 0.1; done
    wait "$RPID" 2>/dev/null
    unset "MY_PIDS[$RPID]"
    if ! timeout 600 ip netns exec "$NS" "$EX/bench_reload" breakdown --services "$NSV" --reps "$REPS" \
      --out "$WORK/reload-breakdown-$NSV.json" 2> >(tee -a "$WORK/reload-$NSV.log" >&2); then
      rc_ok=0
    fi
  done
  ((rc_ok)) || section_fail "reload" reload
  echo "load after: $(loadavg)" >>"$WORK/load-reload.txt"
fi

# ---------------------------------------------------------------- edge filters
if want filters; then
  say "edge filters, 1,000,000 prefixes (pinned to CPU $CPU)"
  echo "load before: $(loadavg)" >"$WORK/load-filters.txt"
  NS="$PFX-fl"
  if new_ns fl &&
    ip -n "$NS" link add gen0 type veth peer name sink0 &&
    ip -n "$NS" addr add 10.99.0.1/24 dev gen0 &&
    ip -n "$NS" link set gen0 up && ip -n "$NS" link set sink0 up &&
    ip netns exec "$NS" sysctl -qw net.ipv4.conf.gen0.forwarding=1 net.ipv4.conf.all.rp_filter=0 \
      net.ipv4.conf.gen0.rp_filter=0 &&
    ip -n "$NS" addr add 10.99.0.100/32 dev lo; then
    SINK_MAC=$(ip -n "$NS" -o link show sink0 | sed -n 's#.*link/ether \([0-9a-f:]*\).*#\1#p')
    for h in 11 12 13; do
      ip -n "$NS" neigh replace "10.99.0.$h" lladdr "$SINK_MAC" dev gen0 nud permanent
    done
    mkdir -p "$WORK/filters"
    if ! timeout 900 ip netns exec "$NS" taskset -c "$CPU" "$EX/bench_filters" --obj "$WORK/bench.bpf.o" \
      --dir "$WORK/filters" --prefixes "${BENCH_FILTER_PREFIXES:-1000000}" --reps "$REPS" --frames 1000000 \
      --method "${BENCH_XDP_METHOD:-auto}" --out "$WORK/filters.json" 2> >(tee "$WORK/filters.log" >&2); then
      section_fail "filters" filters
    fi
    rm -f "$WORK"/filters/list*.txt # 2 x 16 MB, not worth keeping
  else
    section_fail "filters namespace setup" filters
  fi
  echo "load after: $(loadavg)" >>"$WORK/load-filters.txt"
fi

# ---------------------------------------------------------------- end to end
e2e() {
  # shellcheck source=../netns-harness/lib.sh
  source "$REPO/netns-harness/lib.sh" || return 1
  # shellcheck disable=SC2034 # read by lib.sh
  NILB_HARNESS_PREFIX="${PFX}e"
  nh_init "$WORK/e2e" || return 1
  # shellcheck disable=SC2034 # read by lib.sh's nh_cleanup
  NH_KEEP_OUT=1 # $WORK is removed (or kept) as a whole
  nh_build_topology >"$WORK/e2e-topology.log" 2>&1 || { cat "$WORK/e2e-topology.log"; return 1; }
  local cl n2 vip=$NH_VIP b=${NH_NODE_IP[node2]} cfg=$NH_OUT/nilb.yaml n r reps order
  cl=$(nh_ns client)
  n2=$(nh_ns node2)
  # many short connections: wide port range on the client; the server closes first
  ip netns exec "$cl" sysctl -qw net.ipv4.ip_local_port_range="1024 65000"
  # The harness turns GRO on for every bridge port (and attaches XDP_PASS, which is
  # what makes node1's XDP_TX work). GRO on the client's port merges the client's
  # TCP segments into super-frames of up to 64 KB before they reach node1, whose
  # veth drops them in front of nilb's XDP program (no frags support): a bulk
  # TCP stream through the VIP collapses. Real NICs run XDP before GRO, so this
  # bench turns GRO off on the client's port (BENCH_CLIENT_PORT_GRO=on keeps it).
  ip netns exec "$(nh_ns sw)" ethtool -K to-client gro "${BENCH_CLIENT_PORT_GRO:-off}" >/dev/null
  cat >"$cfg" <<EOF
version: 1
cluster:
  hash_seed: 0x5eed1234
  balancers: [${NH_NODE_IP[node1]}]
  gue_port: 19523
  unknown_flow: drop
defaults:
  table_size: 4096
services:
  - name: http
    vip: $vip
    port: 80
    protocol: tcp
    health_check: {none: {}}
    backends:
      - {dip: $b, hostname: node2}
  - name: iperf
    vip: $vip
    port: 5201
    protocol: tcp
    health_check: {none: {}}
    backends:
      - {dip: $b, hostname: node2}
  # NAT mode (path "nat"): twins of the servers on ports of their own
  # (8080, 5203: the client reuses its ports between paths within seconds,
  # and a translated connection must not meet a direct one's TIME_WAIT on
  # node2, docs/config.md "NAT mode") behind node1's own address, no VIP
  # involved; node2 translates in and out.
  - name: http-nat
    vip: ${NH_NODE_IP[node1]}
    port: 8000
    protocol: tcp
    mode: nat
    target_port: 8080
    health_check: {none: {}}
    backends:
      - {dip: $b, hostname: node2}
  - name: iperf-nat
    vip: ${NH_NODE_IP[node1]}
    port: 5202
    protocol: tcp
    mode: nat
    target_port: 5203
    health_check: {none: {}}
    backends:
      - {dip: $b, hostname: node2}
EOF
  nh_bg "http server" "$NH_OUT/http-node2.log" node2 "$EX/bench_http" serve --port 80 --threads 2 --name node2
  HTTP_SERVER_PID=$NH_BG_PID
  nh_bg "iperf3 server" "$NH_OUT/iperf3-node2.log" node2 iperf3 -s -p 5201
  nh_bg "http server (nat)" "$NH_OUT/http-nat-node2.log" node2 "$EX/bench_http" serve --port 8080 --threads 2 --name node2
  HTTP_NAT_SERVER_PID=$NH_BG_PID
  nh_bg "iperf3 server (nat)" "$NH_OUT/iperf3-nat-node2.log" node2 iperf3 -s -p 5203
  for n in node1 node2; do
    nh_bg "nilb $n" "$NH_OUT/nilb-$n.log" "$n" "$NILB" run --config "$cfg" --interface eth0 \
      --node-address "${NH_NODE_IP[$n]}" --state-file "$NH_OUT/state-$n.yaml"
    E2E_NILB_PID[$n]=$NH_BG_PID
  done
  for n in node1 node2; do
    if ! nh_wait_until 30 grep -qw ready "$NH_OUT/nilb-$n.log"; then
      echo "nilb on $n not ready:"; tail -n 20 "$NH_OUT/nilb-$n.log"; return 1
    fi
  done
  nh_wait_until 10 grep -q listening "$NH_OUT/http-node2.log" || return 1
  nh_wait_until 10 grep -q listening "$NH_OUT/http-nat-node2.log" || return 1
  # both paths answer before measuring
  for a in "$vip:80" "$b:80" "${NH_NODE_IP[node1]}:8000"; do
    if ! nh_fg client timeout 20 "$EX/bench_http" load --addr "$a" --seconds 1 --threads 2 >"$NH_OUT/warm.json"; then
      echo "warm-up load against $a failed"; return 1
    fi
    echo "  warm-up $a: $(cat "$NH_OUT/warm.json")"
    grep -q '"ok": 0,' "$NH_OUT/warm.json" && { echo "no successful request to $a"; return 1; }
  done
  # A third path for context: the same two hops without nilb, plain kernel
  # routing through node1 (node2 also answers on 10.77.1.12, which the client
  # routes via node1); replies go straight back as with the VIP.
  local routed=10.77.1.12
  ip -n "$n2" addr add "$routed/32" dev lo &&
    ip -n "$cl" route add "$routed/32" via "${NH_NODE_IP[node1]}" &&
    ip -n "$(nh_ns node1)" route add "$routed/32" via "$b" || return 1
  reps=$((REPS > 3 ? REPS : 3))
  : >"$WORK/e2e-runs.jsonl"
  local orders=("vip direct routed nat" "direct nat routed vip" "routed vip nat direct" "nat routed direct vip")
  local pi ph spid
  for ((r = 0; r < reps; r++)); do
    order=${orders[r % 4]}
    for path in $order; do
      pi=5201
      case $path in vip) a=$vip ;; direct) a=$b ;; routed) a=$routed ;; nat) a=${NH_NODE_IP[node1]} pi=5202 ;; esac
      m0=$(machine_cpu)
      if nh_fg client timeout 30 iperf3 -c "$a" -p "$pi" -t 3 -J >"$NH_OUT/iperf-$r-$path.json" 2>&1; then
        m1=$(machine_cpu)
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=d["end"]; c=e.get("cpu_utilization_percent", {})
b0, t0 = map(float, sys.argv[4].split()); b1, t1 = map(float, sys.argv[5].split())
print(json.dumps({"rep": int(sys.argv[2]), "path": sys.argv[3], "kind": "iperf3", "bps": e["sum_received"]["bits_per_second"],
  "bytes": e["sum_received"]["bytes"], "seconds": e["sum_received"]["seconds"], "retransmits": e["sum_sent"].get("retransmits", 0),
  "client_cpu_pct": c.get("host_total"), "server_cpu_pct": c.get("remote_total"),
  "machine_busy_s": round(b1 - b0, 2), "machine_cpu_s": round(t1 - t0, 2)}))' "$NH_OUT/iperf-$r-$path.json" "$r" "$path" "$m0" "$m1" \
          >>"$WORK/e2e-runs.jsonl"
        echo "  rep $r $path iperf3: $(tail -n 1 "$WORK/e2e-runs.jsonl")"
      else
        echo "  iperf3 to $a failed: $(head -c 300 "$NH_OUT/iperf-$r-$path.json")"
      fi
    done
    for path in $order; do
      ph=80 spid=$HTTP_SERVER_PID
      case $path in vip) a=$vip ;; direct) a=$b ;; routed) a=$routed ;; nat) a=${NH_NODE_IP[node1]} ph=8000 spid=$HTTP_NAT_SERVER_PID ;; esac
      sleep 1
      t0=$(proc_cpu "$spid")
      if nh_fg client timeout 30 "$EX/bench_http" load --addr "$a:$ph" --seconds 3 --threads 8 >"$NH_OUT/http-$r-$path.json"; then
        t1=$(proc_cpu "$spid")
        printf '{"rep": %d, "path": "%s", "kind": "http", "server_cpu_s": %s, "result": %s}\n' "$r" "$path" \
          "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$(cat "$NH_OUT/http-$r-$path.json")" >>"$WORK/e2e-runs.jsonl"
      fi
      echo "  rep $r $path http: $(cat "$NH_OUT/http-$r-$path.json")"
    done
  done
  # which XDP path node1 took (xdp_encap_tx = fast path)
  ip netns exec "$(nh_ns node1)" ethtool -S eth0 >"$WORK/e2e-node1-ethtool.txt" 2>&1
  ip -n "$(nh_ns node1)" -s -s link show dev eth0 >>"$WORK/e2e-node1-ethtool.txt" 2>&1
  for n in node1 node2; do
    timeout 10 nsenter --target "${E2E_NILB_PID[$n]}" --mount --net "$NILB" stats >"$WORK/e2e-$n-stats.txt" 2>&1
    grep -E '^ *(xdp|tc)_' "$WORK/e2e-$n-stats.txt" | head -n 6 | sed "s/^/  $n: /"
  done
  return 0
}
declare -A E2E_NILB_PID=()
HTTP_SERVER_PID=0
HTTP_NAT_SERVER_PID=0
# machine_cpu: "BUSY TOTAL" CPU seconds of the whole machine so far, all CPUs
# (/proc/stat; busy = all but idle and iowait): every namespace's work, the
# client's, the balancer's and the backend's, softirqs included
machine_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i
    printf "%.2f %.2f", (t - $5 - $6) / hz, t / hz; exit }' /proc/stat
}
# proc_cpu PID: user+system CPU seconds of a process (and its threads) so far
proc_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.3f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}
if want e2e; then
  say "end to end (harness topology): iperf3 and HTTP, VIP versus direct"
  echo "load before: $(loadavg)" >"$WORK/load-e2e.txt"
  if ! e2e; then
    section_fail "e2e" e2e
  fi
  nh_cleanup >/dev/null 2>&1
  echo "load after: $(loadavg)" >>"$WORK/load-e2e.txt"
fi

# ---------------------------------------------------------------- report
say "report"
echo "load average at end: $(loadavg)" >"$WORK/load-end.txt"
echo "runtime_s=$((SECONDS - START))" >>"$WORK/machine.txt"
if python3 "$REPO/bench/report.py" --work "$WORK" --out "$OUT"; then
  echo "bench.sh: wrote $OUT ($((SECONDS - START)) s)"
else
  echo "bench.sh: report failed"; FAILED=1
fi
((FAILED == 0))
