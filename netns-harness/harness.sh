# shellcheck shell=bash disable=SC2034 # globals here are used by run.sh and the scenarios
# harness.sh - what the scenarios share: the generated config, starting and
# stopping nilb and the backends, the base state, clients, and reading nilb's
# state, counters and tables through its JSON tools (`nilb status|stats|tables|
# lookup --json`). Source it after lib.sh (run.sh does); it only defines
# variables and functions. run.sh sets NILB, CFG, XDP_MODE, READY_TIMEOUT,
# HERE and the pass/fail/header functions before any of these run.
#
# Base state (ensure_base): the config with weights 1:1:2, every backend
# active, no dynamic weights and the default pacing, loaded by a nilb on every
# node (started without --keep-dataplane, pins on the harness's bpffs); every
# backend's HTTP server running; node1 (the balancer) sees every backend up and
# its table settled on the weights. Every scenario establishes it first and,
# except (e), leaves it behind; so any scenario runs alone or in any order.

declare -A NILB_PID=()    # node -> pid of its running nilb
declare -A NILB_KEEP=()   # node -> 1 if its running nilb was started with --keep-dataplane
declare -A NILB_ADDR=()   # node -> the --node-address its running nilb was started with
declare -A WEIGHT=()      # node -> weight in the generated config
declare -A BSTATE=()      # node -> drained|offline in the generated config (unset: active)
declare -A BACKEND_PID=() # node -> pid of its backend.py
declare -A BACKEND_LOG=() # node -> log file of its backend.py
declare -A PIN_DIR=()     # node -> --pin-dir on a bpffs the harness mounted
declare -A HUP_LINES=()   # node -> lines in its nilb log before the last hup_all
declare -A HUP_RELOADS=() # node -> reloads (applied + rejected) in its state before the last hup_all
# health checking and pacing of the generated config (the bounds in h1/h2 derive from them)
HC_INTERVAL_MS=500 HC_TIMEOUT_MS=300 HC_RISE=2 HC_FALL=2
RB_MIN_INTERVAL_MS=200 RB_MAX_STEP_PERCENT=50 RB_MIN_BUCKET_AGE_MS=2000
RB_BASE_MAX_STEP_PERCENT=$RB_MAX_STEP_PERCENT
RB_PREVIOUS_OWNERS=""     # rebalance.previous_owners (chain), empty: nilb's default
BASE_WEIGHTS=(1 1 2)
HEALTH_MARGIN=${NH_HEALTH_MARGIN:-0.5}
DW_YAML=""                # the service's dynamic_weight flow mapping (dw only), empty: none
UNKNOWN_FLOW=drop         # cluster.unknown_flow of the generated config (rst scenario)
EXTRA_SERVICES=""         # YAML list items appended to services: (udp scenario), empty: none
ENCAP_YAML=""             # the service's encap_check (true|false), empty: nilb's default (on)
FILTERS_YAML=""           # top-level `filters:` block, YAML lines (filters only), empty: none
WEB_FILTERS_YAML=""       # the service's `filters:` block, YAML lines indented 6 (filters only)
BALANCERS=""              # cluster.balancers (ecmp scenarios: every node), empty: node1
ROUTING_YAML=""           # top-level `routing:` block, YAML lines (ecmp scenarios), empty: none
CLUSTER6=""               # 1: the IPv6-only cluster network (v6-cluster-*): IPv6 node addresses
                          # in the config and on nilb's command line; empty: IPv4
RETIRED_LOGS=0

# json FILE EXPR: evaluate a Python expression over the JSON document d (FILE "-": stdin)
json() { "$NH_PY" "$HERE/results.py" get "$@" 2>/dev/null; }

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

# node_addr NODE: NODE's cluster address (IPv6 with CLUSTER6, else IPv4)
node_addr() { if [[ -n $CLUSTER6 ]]; then echo "${NH_NODE_IP6[$1]}"; else echo "${NH_NODE_IP[$1]}"; fi; }
# node_yaml NODE: the same as a YAML scalar (an IPv6 address quoted: it holds colons)
node_yaml() { if [[ -n $CLUSTER6 ]]; then echo "\"${NH_NODE_IP6[$1]}\""; else echo "${NH_NODE_IP[$1]}"; fi; }

weights_str() { local n s=""; for n in "${NH_NODES[@]}"; do s+="${s:+,}$n=${WEIGHT[$n]}"; done; echo "$s"; }
weights_ratio() { local n s=""; for n in "${NH_NODES[@]}"; do s+="${s:+:}${WEIGHT[$n]}"; done; echo "$s"; }

# write_config W1 W2 W3: (re)write $CFG atomically with these weights (and the
# backend states in BSTATE, DW_YAML, ENCAP_YAML (web, and web6 too),
# RB_MAX_STEP_PERCENT,
# RB_PREVIOUS_OWNERS,
# UNKNOWN_FLOW, CLUSTER_EXTRA (lines under cluster:), EXTRA_SERVICES, WEB6,
# CLUSTER6: balancers and DIPs IPv6)
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
    echo "  balancers: [${BALANCERS:-$(node_yaml node1)}]"
    echo "  gue_port: 19523"
    echo "  unknown_flow: $UNKNOWN_FLOW"
    [[ -n ${CLUSTER_EXTRA:-} ]] && printf '%s\n' "$CLUSTER_EXTRA"
    echo "defaults:"
    echo "  table_size: 1024"
    echo "  health_check: {interval_ms: $HC_INTERVAL_MS, timeout_ms: $HC_TIMEOUT_MS, rise_count: $HC_RISE, fall_count: $HC_FALL}"
    echo "  rebalance: {min_interval_ms: $RB_MIN_INTERVAL_MS, max_step_percent: $RB_MAX_STEP_PERCENT, min_bucket_age_ms: $RB_MIN_BUCKET_AGE_MS${RB_PREVIOUS_OWNERS:+, previous_owners: $RB_PREVIOUS_OWNERS}}"
    [[ -n ${NILB_HARNESS_DEFAULTS_EXTRA:-} ]] && printf '%s\n' "$NILB_HARNESS_DEFAULTS_EXTRA"
    echo "services:"
    echo "  - name: web"
    echo "    vip: $NH_VIP"
    echo "    port: 80"
    echo "    protocol: tcp"
    [[ -n $DW_YAML ]] && echo "    dynamic_weight: $DW_YAML"
    [[ -n $ENCAP_YAML ]] && echo "    encap_check: $ENCAP_YAML"
    [[ -n $WEB_FILTERS_YAML ]] && printf '    filters:\n%s\n' "$WEB_FILTERS_YAML"
    case $NH_HEALTH_CHECK in
      http) echo "    health_check: {http: {uri: /healthz, codes: [200]}}" ;;
      kglb) echo "    health_check: {checker: {http: {uri: /healthz, check_port: 80}}, fall_count: $HC_FALL, interval_ms: $HC_INTERVAL_MS, rise_count: $HC_RISE}" ;;
      tcp) echo "    health_check: {tcp: {check_port: 80}}" ;;
      none) echo "    health_check: {none: {}}" ;; # (set by a scenario for itself, e.g. neigh)
    esac
    echo "    backends:"
    for n in "${NH_NODES[@]}"; do
      echo "      - {dip: $(node_yaml "$n"), hostname: $n, weight: ${WEIGHT[$n]}${BSTATE[$n]:+, state: ${BSTATE[$n]}}}"
    done
    if [[ -n ${WEB6:-} ]]; then
      echo "  - name: web6"
      echo "    vip: $NH_VIP6"
      echo "    port: 80"
      echo "    protocol: tcp"
      [[ -n $ENCAP_YAML ]] && echo "    encap_check: $ENCAP_YAML"
      echo "    health_check: {http: {uri: /healthz, codes: [200]}}"
      echo "    backends:"
      for n in "${NH_NODES[@]}"; do
        echo "      - {dip: $(node_yaml "$n"), hostname: $n, weight: ${WEIGHT[$n]}${BSTATE[$n]:+, state: ${BSTATE[$n]}}}"
      done
    fi
    if [[ -n $EXTRA_SERVICES ]]; then printf '%s\n' "$EXTRA_SERVICES"; fi
    if [[ -n $FILTERS_YAML ]]; then printf '%s\n' "$FILTERS_YAML"; fi
    if [[ -n $ROUTING_YAML ]]; then printf '%s\n' "$ROUTING_YAML"; fi
  } >"$tmp" && mv -f "$tmp" "$CFG"
}

# base_config: write the base config (weights 1:1:2, every backend active, no
# dynamic weights, no filters, default pacing); status 0 if that changed the file
base_config() {
  local before=""
  [[ -f $CFG ]] && before=$(<"$CFG")
  BSTATE=()
  DW_YAML=""
  UNKNOWN_FLOW=drop
  CLUSTER_EXTRA=""
  EXTRA_SERVICES=""
  WEB6=""
  CLUSTER6=""
  ENCAP_YAML=""
  FILTERS_YAML=""
  WEB_FILTERS_YAML=""
  BALANCERS=""
  ROUTING_YAML=""
  RB_MAX_STEP_PERCENT=$RB_BASE_MAX_STEP_PERCENT
  RB_PREVIOUS_OWNERS=""
  write_config "${BASE_WEIGHTS[@]}"
  [[ $(<"$CFG") != "$before" ]]
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

# ------------------------------------------------------------------ backends (backend.py)

start_backends() {
  local n extra
  for n in "${NH_NODES[@]}"; do
    extra=()
    [[ $n == node1 ]] && extra=(--port 8080)
    nh_bg "backend $n" "$NH_OUT/backend-$n.log" "$n" "$NH_PY" "$HERE/backend.py" --name "$n" --port 80 "${extra[@]}" \
      --sick-file "$NH_OUT/sick-$n"
    BACKEND_PID[$n]=$NH_BG_PID
    BACKEND_LOG[$n]=$NH_OUT/backend-$n.log
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

# start_backend NODE [LOGSUFFIX]: (re)start backend.py on NODE's port 80; sets
# BACKEND_T (epoch when it listened, from its log)
start_backend() {
  local n=$1 log=$NH_OUT/backend-$1${2:+-$2}.log extra=() want=1
  # node1's backend also serves 8080, as start_backends starts it ((c) uses it)
  [[ $n == node1 ]] && extra=(--port 8080) && want=2
  nh_bg "backend $n" "$log" "$n" "$NH_PY" "$HERE/backend.py" --name "$n" --port 80 "${extra[@]}" \
    --sick-file "$NH_OUT/sick-$n"
  BACKEND_PID[$n]=$NH_BG_PID
  BACKEND_LOG[$n]=$log
  if ! nh_wait_until 10 test_listening "$log" "$want"; then
    echo "  backend on $n did not start:"
    log_tail "$log"
    return 1
  fi
  BACKEND_T=$(sed -n 's/.*listening on .* at=\([0-9.]*\).*/\1/p' "$log" | head -n 1)
}
# stop_backend NODE: SIGTERM its backend.py; sets BACKEND_T (epoch when its
# listening socket was closed, from the log of that very process)
stop_backend() {
  local n=$1 pid=${BACKEND_PID[$1]:-}
  BACKEND_T=""
  [[ -n $pid ]] || return 1
  nh_stop "$pid" TERM 5
  unset "BACKEND_PID[$n]"
  BACKEND_T=$(sed -n 's/.*stopped at=\([0-9.]*\).*/\1/p' "${BACKEND_LOG[$n]}" 2>/dev/null | tail -n 1)
  [[ -n $BACKEND_T ]]
}
backend_running() { [[ -n ${BACKEND_PID[$1]:-} ]] && nh_alive "${BACKEND_PID[$1]}"; }

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
    if [[ $(json - 'd["by_backend"].get("'"$n"'",0)' <<<"$out") != 3 ]]; then
      echo "  HTTP to $n (${NH_NODE_IP[$n]}:80) from the client failed: $out"
      return 1
    fi
  done
  echo "  topology ok: client and nodes ping each other; HTTP to every node address answers with its name"
}

# ------------------------------------------------------------------ nilb daemons

# mount_pins: a bpffs of the run's own per node ($NH_OUT/bpf-NODE), so that the
# maps nilb pins there survive the daemon (restart needs that) and the tools
# (`nilb stats|tables|lookup --live --pin-dir`) read them from the harness's
# own namespace, also while no daemon runs (the default pin dir lives in the
# mount namespace `ip netns exec` creates for the daemon)
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
  NILB_ADDR[$n]=$(node_addr "$n")
  NILB_ARGS=(run --config "$CFG" --interface eth0 --node-address "${NILB_ADDR[$n]}" --state-file "$(state_of "$n")")
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
# retire_log NODE LABEL: keep a stopped daemon's log as nilb-NODE.LABEL.log
retire_log() {
  [[ -s $NH_OUT/nilb-$1.log ]] && mv -f "$NH_OUT/nilb-$1.log" "$NH_OUT/nilb-$1.$2.log"
}

# wait_ready NODE: bounded wait until the daemon's state (`nilb status --json`)
# carries its pid - nilb writes its state file once its programs are attached
# and its health checks set up, just before it logs "ready" - or it died
wait_ready() {
  local n=$1
  if ! nh_wait_until "$READY_TIMEOUT" ready_or_dead "$n"; then
    echo "  nilb on $n: its state (nilb status --json --state-file $(state_of "$n")) did not show pid ${NILB_PID[$n]} within ${READY_TIMEOUT}s"
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
ready_or_dead() {
  nh_alive "${NILB_PID[$1]}" || return 0
  [[ $(st get "$(state_of "$1")" "d['pid']" 2>/dev/null) == "${NILB_PID[$1]}" ]]
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

check_daemons() {
  local n
  for n in "${!NILB_PID[@]}"; do
    if ! nh_alive "${NILB_PID[$n]}"; then
      echo "  NOTE: nilb on $n is no longer running; last log lines:"
      log_tail "$NH_OUT/nilb-$n.log" 10
    fi
  done
}

daemons_alive() {
  local n dead=""
  for n in "${NH_NODES[@]}"; do
    [[ -n ${NILB_PID[$n]:-} ]] && nh_alive "${NILB_PID[$n]}" || dead+=" $n"
  done
  [[ -z $dead ]] || { echo "  nilb not running on:$dead"; return 1; }
}

# hup_all: SIGHUP every running nilb, node1 (the balancer) first; sets HUP_LINES
# (line counts of every log before the signal, for log_since), HUP_RELOADS
# (reloads in every state before the signal, for wait_reload) and HUP_T (epoch
# of the first signal)
hup_all() {
  local n
  for n in "${NH_NODES[@]}"; do
    HUP_LINES[$n]=$(wc -l <"$NH_OUT/nilb-$n.log" 2>/dev/null || echo 0)
    HUP_RELOADS[$n]=$(reloads_of "$n")
  done
  HUP_T=$(nh_now)
  for n in "${NH_NODES[@]}"; do
    if [[ -n ${NILB_PID[$n]:-} ]] && nh_alive "${NILB_PID[$n]}"; then
      kill -HUP "${NILB_PID[$n]}"
    else
      echo "  nilb on $n is not running; cannot send SIGHUP"
    fi
  done
}
# reloads_of NODE: reloads (applied + rejected) in NODE's state so far (0 if none or unreadable)
reloads_of() {
  local r
  r=$(st get "$(state_of "$1")" "reload.get('succeeded', 0) + reload.get('failed', 0)" 2>/dev/null)
  echo "${r:-0}"
}
# wait_reload NODE TIMEOUT [EXPR]: NODE's state shows a reload after the last
# hup_all (and EXPR holds); sets WAIT_* like st_wait
wait_reload() {
  st_wait "$1" "$2" "reload.get('succeeded', 0) + reload.get('failed', 0) > ${HUP_RELOADS[$1]:-0}${3:+ and ($3)}"
}

# ------------------------------------------------------------------ nilb's state (nilb status --json)

# st ARGS...: state.py (reads a daemon's state with `nilb status --json`; $NH_NILB is the binary)
st() { "$NH_PY" "$HERE/state.py" "$@"; }
state_of() { echo "$NH_OUT/state-$1.yaml"; }

# st_wait NODE TIMEOUT EXPR: poll NODE's state until EXPR holds (see state.py).
# Sets WAIT_OUT (its JSON line), WAIT_AT (epoch when it held) and WAIT_SUMMARY.
st_wait() {
  local rc
  nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of "$1")" "$3" --timeout "$2" >"$NH_OUT/wait.out" 2>&1
  rc=$?
  WAIT_OUT=$(<"$NH_OUT/wait.out")
  WAIT_AT=$(json - 'd["at"]' <<<"$WAIT_OUT")
  WAIT_SUMMARY=$(json - 'd["summary"]' <<<"$WAIT_OUT")
  return "$rc"
}

# the state of node1 (the balancer: health checks, tables) matches the config
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
# wait_settled [TIMEOUT]: node1 settled on the config as written; prints what it waited for
wait_settled() {
  if st_wait node1 "${1:-15}" "$(settled_expr)"; then
    echo "  node1 state: $WAIT_SUMMARY"
    return 0
  fi
  echo "  node1's state did not settle on weights $(weights_ratio), all up, no pending moves within ${1:-15}s: $WAIT_SUMMARY"
  return 1
}

# status_table NODE: `nilb status` of NODE's daemon, indented
status_table() {
  timeout 10 "$NILB" status --state-file "$(state_of "$1")" 2>&1 | sed 's/^/    | /'
}

# ------------------------------------------------------------------ the base state

# ensure_base [LABEL] [TIMEOUT]: bring the topology to the base state (see the
# top of this file): base config written (and SIGHUP to every daemon that runs
# an older one), every backend's server running, a nilb on every node
# (started again where it stopped or died; restarted where it runs with
# --keep-dataplane), node1 settled and node2/node3 on the base weights. Prints
# a line per thing it had to do, prefixed (LABEL) (default: base), and node1's
# state. Status 1 (WAIT_SUMMARY says why) if it cannot.
ensure_base() {
  local label=${1:-base} secs=${2:-15} n changed=0 fresh=() old=() rc
  base_config && changed=1
  if [[ $NH_CLUSTER6_TOPO == 1 ]]; then
    # back from the IPv6-only cluster network (v6-cluster-*): its daemons go
    # first (SIGTERM: their pins go too), then the IPv4 node addresses return
    for n in "${NH_NODES[@]}"; do
      [[ -n ${NILB_PID[$n]:-} ]] || continue
      nh_alive "${NILB_PID[$n]}" && echo "  ($label) stopping nilb on $n (IPv6 cluster network; SIGTERM)"
      nh_stop "${NILB_PID[$n]}" TERM 15
      unset "NILB_PID[$n]"
      RETIRED_LOGS=$((RETIRED_LOGS + 1))
      retire_log "$n" "cluster6-$label$RETIRED_LOGS"
      # (a daemon killed with -9 leaves pins of the IPv6 cluster behind: the
      # next one starts afresh rather than adopt them)
      [[ -n ${PIN_DIR[$n]:-} && -d ${PIN_DIR[$n]} ]] && rm -rf -- "${PIN_DIR[$n]}"
    done
    echo "  ($label) the nodes' IPv4 addresses back on eth0 (nh_cluster6_off)"
    if ! nh_cluster6_off; then
      WAIT_SUMMARY="the IPv4 node addresses could not be restored (see $NH_OUT/setup.log)"
      return 1
    fi
  fi
  for n in "${NH_NODES[@]}"; do
    if ! backend_running "$n"; then
      echo "  ($label) starting the backend on $n again"
      if ! start_backend "$n" "$label$SECONDS"; then
        WAIT_SUMMARY="the backend on $n did not start"
        return 1
      fi
    fi
  done
  for n in "${NH_NODES[@]}"; do
    if [[ -n ${NILB_PID[$n]:-} ]] && nh_alive "${NILB_PID[$n]}"; then
      if [[ ${NILB_KEEP[$n]:-0} != 1 && ${NILB_ADDR[$n]:-} == "$(node_addr "$n")" ]]; then
        old+=("$n")
        continue
      fi
      if [[ ${NILB_KEEP[$n]:-0} == 1 ]]; then
        echo "  ($label) nilb on $n runs with --keep-dataplane; stopping it (SIGTERM) to start it without"
      else
        echo "  ($label) nilb on $n runs with --node-address ${NILB_ADDR[$n]:-?}; stopping it (SIGTERM) to start it with $(node_addr "$n")"
      fi
      nh_stop "${NILB_PID[$n]}" TERM 15
    elif [[ -n ${NILB_PID[$n]:-} ]]; then
      nh_stop "${NILB_PID[$n]}" TERM 1
      echo "  ($label) nilb on $n had exited (status $NH_LAST_RC); starting it again"
    else
      echo "  ($label) no nilb running on $n; starting one"
    fi
    RETIRED_LOGS=$((RETIRED_LOGS + 1))
    retire_log "$n" "before-$label$RETIRED_LOGS"
    start_nilb_on "$n"
    fresh+=("$n")
  done
  for n in "${fresh[@]}"; do
    if ! wait_ready "$n"; then
      WAIT_SUMMARY="nilb on $n not ready"
      return 1
    fi
    echo "  ($label) nilb on $n is ready (pid ${NILB_PID[$n]}); eth0: $(attach_info "$n")"
  done
  if ((changed)) && ((${#old[@]})); then
    echo "  ($label) base config written (weights $(weights_ratio), all active); SIGHUP to nilb on ${old[*]}"
    for n in "${old[@]}"; do kill -HUP "${NILB_PID[$n]}"; done
  fi
  # (a state without services comes from a stand-in such as selftest/fake-nilb:
  # there is no table to wait for)
  if ! st_wait node1 "$secs" "len(d['services']) == 0 or (reload.get('ok', True) is True and $(settled_expr))"; then
    echo "  ($label) node1's state did not settle on weights $(weights_ratio), all up, no pending moves within ${secs}s: $WAIT_SUMMARY"
    return 1
  fi
  echo "  ($label) node1 state: $WAIT_SUMMARY"
  for n in "${NH_NODES[@]:1}"; do
    if ! st_wait "$n" 5 "len(d['services']) == 0 or (reload.get('ok', True) is True and weights() == '$(weights_ratio)')"; then
      rc=$WAIT_SUMMARY
      WAIT_SUMMARY="$n not on weights $(weights_ratio): $rc"
      echo "  ($label) $WAIT_SUMMARY"
      return 1
    fi
  done
}

# ------------------------------------------------------------------ logs

# log_since NODE LINES: log lines after the first LINES, colour codes stripped
log_since() { tail -n +"$(($2 + 1))" "$NH_OUT/nilb-$1.log" | sed 's/\x1b\[[0-9;]*m//g'; }
# log_has NODE LINES REGEX: a line matching REGEX appears after LINES
log_has() { log_since "$1" "$2" | grep -Eq "$3"; }
# log_rel TIMELINE_OUTPUT REGEX: "+0.632s" from timeline.py's "log: +0.632s after t0: ..." line
log_rel() {
  local v
  v=$(grep -E "^  log: [+-][0-9.]+s after t0: .*$2" <<<"$1" | head -n 1 | sed 's/^  log: \([+-][0-9.]*s\).*/\1/')
  echo "${v:-?}"
}

# ------------------------------------------------------------------ counters and tables (nilb stats|tables --json)

# nilb_stats NODE [ARGS...]: `nilb stats` of NODE's data plane, from the pins on
# the harness's bpffs (works while no daemon runs); ARGS e.g. --json
nilb_stats() {
  [[ -n ${PIN_DIR[$1]:-} ]] || { echo "no pin dir for $1"; return 1; }
  timeout --foreground 10 "$NILB" stats --pin-dir "${PIN_DIR[$1]}" "${@:2}" 2>&1
}
# save_stats NODE FILE: NODE's counters (`nilb stats --json`) in FILE
save_stats() { nilb_stats "$1" --json >"$2"; }
# counter NAME FILE: a counter's value in a saved `nilb stats --json` (0 if absent)
counter() { "$NH_PY" "$HERE/results.py" counter "$2" "$1" 2>/dev/null || echo 0; }
# counters_matching NODE REGEX: "name=value ..." of NODE's non-zero counters whose names match REGEX
counters_matching() {
  nilb_stats "$1" --json | "$NH_PY" "$HERE/results.py" counters - "$2" 2>/dev/null
}
# second_chance_counters: node1's and the backends' second-chance counters (info)
second_chance_counters() {
  local n s
  for n in "${NH_NODES[@]}"; do
    s=$(counters_matching "$n" 'forward|second_chance|unknown_flow')
    echo "    $n: ${s:-(none)}"
  done
}
# dump_tables NODE FILE: NODE's live tables (`nilb tables --json`) in FILE;
# prints a line per service
dump_tables() { nh_local "$NH_PY" "$HERE/tables.py" dump "${PIN_DIR[$1]}" --out "$2"; }

# ------------------------------------------------------------------ clients (client.py)

# burst_dist LABEL SPORT_BASE [--table]: 300 requests via the VIP, judged against WEIGHT
burst_dist() {
  local label=$1 base=$2 table=${3:-} out res summary
  res=$NH_OUT/burst-$label.json
  cl burst --host "${BURST_HOST:-$NH_VIP}" --port 80 --count 300 --sport-base "$base" \
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
    -c 20000 -w "$pcap" "tcp and src host ${BURST_HOST:-$NH_VIP}"
  tpid=$NH_BG_PID
  if ! nh_wait_until 10 grep -qs 'listening on' "$tlog"; then
    nh_stop "$tpid" TERM 3
    DSR_NUMBERS="tcpdump did not start: $(tr '\n' ' ' <"$tlog")"
    return 1
  fi
  cl burst --host "${BURST_HOST:-$NH_VIP}" --port 80 --count "$count" --sport-base "$base" \
    --max-seconds 15 --max-consecutive-failures 10
  out=$OUT
  echo "  client: $out"
  sleep 0.3
  nh_stop "$tpid" TERM 5
  declare -A bymac=()
  while read -r frames mac; do
    [[ -n $mac ]] && bymac[$mac]=$frames
  done < <(tcpdump -nn -e -r "$pcap" 2>/dev/null | awk '{print $2}' | sort | uniq -c)
  echo "  frames with IP source ${BURST_HOST:-$NH_VIP} captured on the client's eth0, by Ethernet source:"
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
  DSR_NUMBERS+="other=$other total=$total (burst ok=$(json - 'd["ok"]' <<<"$out")/$count)"
  line=$(nh_mac node2)
  [[ ${bymac[$line]:-0} -gt 0 && ${bymac[$(nh_mac node3)]:-0} -gt 0 ]]
}

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
    --host "${HOLD_HOST:-$NH_VIP}" --port 80 --state "$HOLD_STATE" --go "$HOLD_GO" --go-timeout 90 --out "$HOLD_RES" "$@"
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
hold_bad() { "$NH_PY" "$HERE/results.py" hold-bad "$HOLD_RES" 2>/dev/null; }

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

# live_hops_of_bad [VIP]: for each held connection that did not survive, the
# hops of its bucket in node1's live table (`nilb lookup --live --json`, from
# the pins); VIP: the one the hold client used (default $NH_VIP; for $NH_VIP6
# the client's IPv6 address is the source)
live_hops_of_bad() {
  local vip=${1:-$NH_VIP} src=$NH_CLIENT_IP
  [[ $vip == *:* ]] && src=$NH_CLIENT_IP6
  [[ -n ${PIN_DIR[node1]:-} ]] || return 0
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$HOLD_RES" --live "${PIN_DIR[node1]}" \
    --client-ip "$src" --vip "$vip" --hops --bad-only 2>/dev/null |
    while read -r sp bucket first second; do
      echo "    sport $sp, node1 live table: bucket $bucket, first hop $first, second hop $second"
    done
}

# ------------------------------------------------------------------ scenario frame

# base_ratio: the base weights, "1:1:2"
base_ratio() { local IFS=:; echo "${BASE_WEIGHTS[*]}"; }
# need_base NAME: a scenario's set-up: ensure_base, or FAIL NAME (status 1)
need_base() {
  ensure_base && return 0
  fail "$1" "precondition: base state not reached: $WAIT_SUMMARY"
  return 1
}
# leave_base: a scenario's teardown: back to the base state (ensure_base
# restore); on failure clears the caller's `ok` and appends to its `nums`
leave_base() {
  ensure_base restore && return 0
  ok=0
  nums+="; restoring the base state failed: $WAIT_SUMMARY"
  return 1
}

# ------------------------------------------------------------------ control-plane scenarios (restarts, modes, reload failures, clock)

# cfg_edit SED_EXPR: edit $CFG (after write_config) atomically with one sed
# expression, e.g. to add a key write_config does not know; base_config
# rewrites the file, so leave_base undoes it
cfg_edit() { sed "$1" "$CFG" >"$CFG.tmp" && mv -f "$CFG.tmp" "$CFG"; }

# uptime_s: seconds since boot (/proc/uptime, CLOCK_BOOTTIME): unlike
# nh_now and bash's SECONDS it does not jump when the wall clock is set
uptime_s() { local u _; read -r u _ </proc/uptime; echo "$u"; }

# watch_bg LABEL NODE: tablewatch.py on NODE's pins in the background (the
# first-hop buckets of every backend, every 50 ms, on the monotonic clock);
# waits (bounded) for its first sample. Sets WATCH_PID, WATCH_RES, WATCH_STOP.
watch_bg() {
  local started=$NH_OUT/watch-$1.started
  WATCH_RES=$NH_OUT/watch-$1.json WATCH_STOP=$NH_OUT/watch-$1.stop
  rm -f "$WATCH_RES" "$WATCH_STOP" "$started"
  # in the harness's own namespace, where the pins are (like dump_tables)
  "$NH_PY" "$HERE/tablewatch.py" --pin-dir "${PIN_DIR[$2]}" --stop-file "$WATCH_STOP" \
    --started "$started" --max-seconds 90 --out "$WATCH_RES" </dev/null >"$NH_OUT/watch-$1.log" 2>&1 7>&- 8>&- &
  WATCH_PID=$!
  NH_PID_DESC["$WATCH_PID"]="table watch ($1)"
  NH_STARTED=$((NH_STARTED + 1))
  nh_wait_until 10 test -e "$started"
}
# watch_stop: stop the last watch_bg (bounded) and wait for its result
watch_stop() {
  touch "$WATCH_STOP"
  nh_wait_until 10 nh_not_alive "$WATCH_PID" || echo "  table watch still running; stopping it"
  nh_stop "$WATCH_PID" TERM 3
}
# watch_get EXPR: a Python expression over the last watch's result (d), e.g.
# 'd["buckets"].get("10.77.0.13", [0, 0, 0])[1]' (the most buckets .13 had)
watch_get() { json "$WATCH_RES" "$1"; }

# ------------------------------------------------------------------ the IPv6-only cluster network (v6-cluster-*)

# need_cluster6 NAME: a scenario's set-up on the IPv6-only cluster network: the
# base state, then every nilb stopped (SIGTERM), the nodes' link made IPv6 only
# (nh_cluster6_on in lib.sh), the config rewritten with CLUSTER6 and WEB6
# (balancers and DIPs IPv6; the services web, IPv4 VIP, and web6, IPv6 VIP, on
# the base weights, both with encap_check: false) and checked, a nilb started on every node with its IPv6
# --node-address, node1 settled on both services and node2/node3 on the
# weights. On failure: FAIL NAME, the base state again, status 1. leave_base
# (ensure_base) undoes all of it.
need_cluster6() {
  local name=$1 n why=""
  need_base "$name" || return 1
  for n in "${NH_NODES[@]}"; do
    if [[ -n ${NILB_PID[$n]:-} ]]; then
      nh_stop "${NILB_PID[$n]}" TERM 15
      unset "NILB_PID[$n]"
    fi
    RETIRED_LOGS=$((RETIRED_LOGS + 1))
    retire_log "$n" "before-cluster6-$RETIRED_LOGS"
    [[ -n ${PIN_DIR[$n]:-} && -d ${PIN_DIR[$n]} ]] && rm -rf -- "${PIN_DIR[$n]}"
  done
  echo "  nilb stopped on every node; the nodes' IPv4 addresses removed from eth0 (nh_cluster6_on)"
  if ! nh_cluster6_on; then
    why="the IPv6-only cluster network did not come up (see $NH_OUT/setup.log)"
  else
    echo "  IPv6-only cluster network: eth0 of node1..3 holds only ${NH_NODE_IP6[node1]%::*}::11-13; ping6 between the nodes and the client ok"
    CLUSTER6_SETUPS=$((CLUSTER6_SETUPS + 1))
    cluster6_routes $((28000 + 20 * CLUSTER6_SETUPS)) || why="the client's routes to the VIPs over the IPv6-only link do not work"
  fi
  if [[ -z $why ]]; then
    CLUSTER6=1
    WEB6=1
    # (the encapsulated check is refused on an IPv6 cluster network)
    ENCAP_YAML=false
    write_config "${BASE_WEIGHTS[@]}"
    echo "  config: balancers [$(node_addr node1)], DIPs $(node_addr node1) $(node_addr node2) $(node_addr node3); services web ($NH_VIP:80) and web6 ($NH_VIP6:80)"
    if ! nilb_check; then
      why="nilb check rejected the IPv6 cluster config ($CFG)"
      cp -f "$CFG" "$NH_OUT/nilb-cluster6-rejected.yaml"
    fi
  fi
  if [[ -z $why ]]; then
    for n in "${NH_NODES[@]}"; do
      start_nilb_on "$n"
      echo "  started nilb on $n: nilb ${NILB_ARGS[*]}"
    done
    for n in "${NH_NODES[@]}"; do
      if ! wait_ready "$n"; then
        why="nilb on $n (--node-address $(node_addr "$n")) not ready"
        break
      fi
      echo "  nilb on $n is ready; eth0: $(attach_info "$n")"
    done
  fi
  if [[ -z $why ]]; then
    if ! st_wait node1 20 "reload.get('ok', True) is True and $(settled_expr)"; then
      why="node1 did not settle on web: $WAIT_SUMMARY"
    elif ! nh_local "$NH_PY" "$HERE/state.py" wait "$(state_of node1)" "weights() == '$(weights_ratio)' and settled(1)" \
      --timeout 20 --service web6 >"$NH_OUT/wait.out" 2>&1; then
      why="node1 did not settle on web6: $(json "$NH_OUT/wait.out" 'd["summary"]')"
    else
      echo "  node1 web:  $WAIT_SUMMARY"
      echo "  node1 web6: $(json "$NH_OUT/wait.out" 'd["summary"]')"
      for n in "${NH_NODES[@]:1}"; do
        st_wait "$n" 5 "weights() == '$(weights_ratio)'" || { why="$n not on weights $(weights_ratio): $WAIT_SUMMARY"; break; }
      done
    fi
  fi
  [[ -z $why ]] && return 0
  fail "$name" "precondition: IPv6 cluster network not reached: $why"
  ensure_base restore || echo "  restoring the base state failed too: $WAIT_SUMMARY"
  return 1
}

CLUSTER6_SETUPS=0
# cluster6_routes SPORT_BASE: with no nilb running and the link IPv6 only,
# node1 answers for both VIPs itself: 3 requests each to the IPv4 VIP (the
# client's route with an IPv6 next hop, node1's IPv4 route back with one) and
# to the IPv6 VIP all come from node1
cluster6_routes() {
  local vip k=0 r=0
  for vip in "$NH_VIP" "$NH_VIP6"; do
    cl burst --host "$vip" --port 80 --count 3 --sport-base $(($1 + k)) --max-seconds 10
    k=$((k + 10))
    if [[ $(json - 'd["by_backend"].get("node1", 0)' <<<"$OUT") == 3 ]]; then
      echo "  no nilb: $vip:80 answered by node1 3/3 over the IPv6-only link"
    else
      echo "  no nilb: $vip:80 not answered by node1 over the IPv6-only link: $OUT"
      r=1
    fi
  done
  return "$r"
}

# wire_bg LABEL: tcpdump on every port of the switch (-i any in its namespace)
# of what should not exist on an IPv6-only cluster network and of what should:
# every IPv4 packet, IPv6 GUE (UDP port 19523) and node1's IPv6 TCP to port 80
# (its health checks). Waits (bounded) until it listens. Sets WIRE_PID, WIRE_PCAP.
wire_bg() {
  local log=$NH_OUT/wire-$1.log
  WIRE_PCAP=$NH_OUT/wire-$1.pcap
  nh_bg "tcpdump on the switch ($1)" "$log" sw timeout 120 tcpdump -i any -nn -U --immediate-mode -Z root \
    -s 128 -c 200000 -w "$WIRE_PCAP" \
    "ip or (ip6 and udp port 19523) or (ip6 and tcp port 80 and host ${NH_NODE_IP6[node1]})"
  WIRE_PID=$NH_BG_PID
  nh_wait_until 10 grep -qs 'listening on' "$log"
}
# wire_count FILTER: packets in the last wire_bg's capture that match FILTER
wire_count() { tcpdump -nn -r "$WIRE_PCAP" "$1" 2>/dev/null | wc -l; }
# wire_stop: stop the last wire_bg and count (every packet is seen at each bridge
# port it crosses, so most twice): WIRE_GUE6 (IPv6 GUE), WIRE_GUE4 (IPv4 GUE),
# WIRE_V4_OTHER (IPv4 packets not between the client and the IPv4 VIP),
# WIRE_HC6 (node1's IPv6 TCP to port 80 of node2/node3), WIRE_GUE6_BAD (IPv6 GUE
# with a source or destination outside the nodes' IPv6 addresses); WIRE_NUMBERS
# says it in one line. Status 0 if the wire is what an IPv6-only cluster
# network must show: IPv6 GUE, node1's IPv6 health checks, nothing else in IPv4.
wire_stop() {
  local nodes6="" n
  sleep 0.3
  nh_stop "$WIRE_PID" TERM 5
  for n in "${NH_NODES[@]}"; do nodes6+="${nodes6:+ or }${NH_NODE_IP6[$n]}"; done
  WIRE_GUE6=$(wire_count "ip6 and udp port 19523")
  WIRE_GUE4=$(wire_count "ip and udp port 19523")
  WIRE_V4_OTHER=$(wire_count "ip and not (host $NH_CLIENT_IP and host $NH_VIP)")
  WIRE_HC6=$(wire_count "ip6 and tcp dst port 80 and src host ${NH_NODE_IP6[node1]} and (dst host ${NH_NODE_IP6[node2]} or dst host ${NH_NODE_IP6[node3]})")
  WIRE_GUE6_BAD=$(wire_count "ip6 and udp port 19523 and not (src host ($nodes6) and dst host ($nodes6))")
  WIRE_NUMBERS="wire: IPv6 GUE $WIRE_GUE6, IPv4 GUE $WIRE_GUE4, IPv6 GUE not between nodes $WIRE_GUE6_BAD, other IPv4 $WIRE_V4_OTHER, node1's IPv6 health checks $WIRE_HC6"
  echo "  $WIRE_NUMBERS (captured at every switch port, $WIRE_PCAP)"
  if ((WIRE_V4_OTHER > 0)); then
    echo "  IPv4 packets that are not client <-> $NH_VIP (first 5):"
    tcpdump -nn -r "$WIRE_PCAP" "ip and not (host $NH_CLIENT_IP and host $NH_VIP)" 2>/dev/null | head -n 5 | sed 's/^/    | /'
  fi
  ((WIRE_GUE6 > 0 && WIRE_GUE4 == 0 && WIRE_GUE6_BAD == 0 && WIRE_V4_OTHER == 0 && WIRE_HC6 > 0))
}

# v6c_delta NODE COUNTER LABEL_BEFORE LABEL_AFTER: a counter's change between two save_stats
v6c_delta() {
  echo $(($(counter "$2" "$NH_OUT/stats-$1-$4.json") - $(counter "$2" "$NH_OUT/stats-$1-$3.json")))
}

# v6c_counters LABEL_BEFORE LABEL_AFTER: the balancer and backend counters of
# traffic through the IPv6 cluster between two save_stats of every node;
# appends to the caller's nums, clears its ok when node1 did not encapsulate
# (with forwarding on its eth0: not on the XDP fast path, xdp_encap_tx; with
# NH_BALANCER_FORWARDING=0 the slow path counts instead) or dropped, or a
# backend decapsulated no SYN in XDP (with --xdp-mode generic: in XDP or TC)
# or dropped GUE
v6c_counters() {
  local a=$1 z=$2 n enc slow noroute bad syn tcsyn tcbad notcl
  enc=$(v6c_delta node1 xdp_encap_tx "$a" "$z")
  slow=$(v6c_delta node1 xdp_encap_slow_path "$a" "$z")
  noroute=$(v6c_delta node1 xdp_drop_no_route "$a" "$z")
  bad=$(v6c_delta node1 xdp_drop_malformed "$a" "$z")
  nums+="node1 xdp_encap_tx +$enc xdp_encap_slow_path +$slow xdp_drop_no_route +$noroute xdp_drop_malformed +$bad"
  if [[ ${NH_BALANCER_FORWARDING:-1} == 1 ]]; then
    [[ $enc -gt 0 ]] || ok=0
  else
    [[ $((enc + slow)) -gt 0 ]] || ok=0
  fi
  [[ $noroute == 0 && $bad == 0 ]] || ok=0
  for n in node2 node3; do
    syn=$(v6c_delta "$n" xdp_decap_syn "$a" "$z")
    tcsyn=$(v6c_delta "$n" tc_decap_syn "$a" "$z")
    tcbad=$(v6c_delta "$n" tc_drop_malformed "$a" "$z")
    notcl=$(v6c_delta "$n" tc_drop_not_cluster "$a" "$z")
    nums+=", $n xdp_decap_syn +$syn tc_decap_syn +$tcsyn tc_drop_malformed +$tcbad tc_drop_not_cluster +$notcl"
    # (with --xdp-mode generic the backends have no XDP program of their own:
    # TC takes the SYNs)
    if [[ ${XDP_MODE:-} == generic ]]; then
      [[ $((syn + tcsyn)) -gt 0 ]] || ok=0
    else
      [[ $syn -gt 0 ]] || ok=0
    fi
    [[ $tcbad == 0 && $notcl == 0 ]] || ok=0
  done
}

# v6c_live_lookup LABEL VIP: every flow of the burst LABEL (burst_dist) looked
# up in node1's live table (`nilb lookup --live --json` on the pins of the
# IPv6 cluster network: hops are IPv6 DIPs); appends to the caller's nums,
# clears its ok unless every first hop is the backend that answered
v6c_live_lookup() {
  local label=$1 vip=$2 src=$NH_CLIENT_IP nodes="" n line
  [[ $vip == *:* ]] && src=$NH_CLIENT_IP6
  for n in "${NH_NODES[@]}"; do nodes+="${nodes:+,}${NH_NODE_IP6[$n]}=$n"; done
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$NH_OUT/burst-$label.json" \
    --live "${PIN_DIR[node1]}" --client-ip "$src" --vip "$vip" --nodes "$nodes" --show 2 >"$NH_OUT/lookup-$label.txt" 2>&1
  sed '$d' "$NH_OUT/lookup-$label.txt"
  line=$(tail -n 1 "$NH_OUT/lookup-$label.txt")
  echo "  nilb lookup --live (node1's pins) vs observed backend: ${line#LOOKUP }"
  nums+="live lookup ${line#LOOKUP }; "
  [[ $line =~ same=([0-9]+)\ differ=0\ unparsed=0\ total=([0-9]+) ]] &&
    [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" && ${BASH_REMATCH[2]} -gt 0 ]] || ok=0
}
