# shellcheck shell=bash
# scenario-order: 360
# (clockstep) pacing does not follow the wall clock. Pacing for this
# scenario: one step per 400 ms, 5 % of the buckets (51) per step, so draining
# node3 (512 buckets) takes about 4-5 s. Three drains of node3 (`state:
# drained` + SIGHUP, undone in between): one as a reference, and two during
# which the machine's wall clock is stepped 1 s after the SIGHUP, by -1 h and
# by +1 h (`date -s`). Each drain must end (node1's state: node3 0 buckets,
# no pending moves) within 7 s of boot time (/proc/uptime, which no clock
# setting moves) and within 1 s of the reference.
# The wall clock is system-wide: it is stepped back at once after the drain
# (or after 15 s of polling), and an EXIT/INT/TERM trap puts it back if the
# scenario is interrupted, so the step lasts a few seconds. Polling while the
# clock is off counts iterations, not time.
# Needs: the base state. Leaves: the base state (and the clock within a few
# milliseconds of where it would have been).

CLOCK_STEP_S=0 # the step of the wall clock in force (s), undone by clock_restore

# clock_restore: undo CLOCK_STEP_S (date -s with the current time minus it)
clock_restore() {
  ((CLOCK_STEP_S != 0)) || return 0
  local now
  now=$(date +%s.%N)
  date -s "@$(nh_calc "$now - $CLOCK_STEP_S")" >/dev/null
  echo "  wall clock stepped back by $((-CLOCK_STEP_S)) s: $(date -u +%FT%TZ)"
  CLOCK_STEP_S=0
}

# clock_traps on|off: chain clock_restore in front of run.sh's EXIT/INT/TERM
# traps while the clock may be off, and put them back afterwards
CLOCK_OLD_TRAPS=()
clock_traps() {
  local sig cmd
  if [[ $1 == on ]]; then
    CLOCK_OLD_TRAPS=()
    for sig in EXIT INT TERM; do
      cmd=$(trap -p "$sig")
      CLOCK_OLD_TRAPS+=("$cmd")
      eval "set -- $cmd"
      # shellcheck disable=SC2064 # expand the old command now
      trap "clock_restore >&7 2>&8; ${3:-}" "$sig"
    done
  else
    for cmd in "${CLOCK_OLD_TRAPS[@]}"; do
      eval "$cmd"
    done
  fi
}

# drain_node3 STEP_S: drain node3 by config + SIGHUP, step the wall clock by
# STEP_S 1 s later (0: no step), poll node1's state every 0.2 s (at most 75
# times) until the drain is done, put the clock back, undo the drain. Sets
# DRAIN_S (boot-time seconds from SIGHUP to done, "" if not within the
# polls) and DRAIN_LEFT (node3's buckets at the last poll).
drain_node3() {
  local step=$1 u0 u i n pend stepped=0
  DRAIN_S="" DRAIN_LEFT=""
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  BSTATE["node3"]=drained
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  clock_traps on
  hup_all
  u0=$(uptime_s)
  for ((i = 0; i < 75; i++)); do
    sleep 0.2
    u=$(uptime_s)
    if ((step != 0 && !stepped)) && awk "BEGIN { exit !($u - $u0 >= 1.0) }"; then
      date -s "@$(nh_calc "$(date +%s.%N) + $step")" >/dev/null
      CLOCK_STEP_S=$step stepped=1
      echo "  wall clock stepped by $step s at +$(nh_calc "$u - $u0")s: $(date -u +%FT%TZ)"
    fi
    n=$(st get "$(state_of node1)" "b['node3']['buckets']" 2>/dev/null)
    pend=$(st get "$(state_of node1)" "svc['pending_moves']" 2>/dev/null)
    DRAIN_LEFT=$n
    if [[ $n == 0 && $pend == 0 ]]; then
      DRAIN_S=$(nh_calc "$(uptime_s) - $u0")
      break
    fi
  done
  clock_restore
  clock_traps off
  echo "  drain with a wall-clock step of $step s: $([[ -n $DRAIN_S ]] && echo "done in ${DRAIN_S}s (boot time)" || echo "NOT done after $i polls, node3 still at $DRAIN_LEFT buckets")"
  unset "BSTATE[node3]"
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  wait_settled 20 >/dev/null || echo "  undoing the drain did not settle: $WAIT_SUMMARY"
  sleep 2 # min_bucket_age_ms: the buckets the undo moved may move again
}

scenario_clockstep() {
  local nums="" ok=1 ref interval_before=$RB_MIN_INTERVAL_MS step
  header "(clockstep) a paced drain of node3 (~4-5 s) with the wall clock stepped by -1 h and +1 h: it ends as without a step"
  need_base clockstep || return
  # shellcheck disable=SC2034 # read by write_config (harness.sh)
  RB_MIN_INTERVAL_MS=400 RB_MAX_STEP_PERCENT=5
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  hup_all
  wait_settled 10 >/dev/null || { ok=0; nums+="pacing change did not settle: $WAIT_SUMMARY; "; }
  drain_node3 0
  ref=$DRAIN_S
  nums+="reference drain of 512 buckets ${ref:-NOT done}s; "
  [[ -n $ref ]] || ok=0
  for step in -3600 3600; do
    drain_node3 "$step"
    nums+="wall clock $step s: ${DRAIN_S:-NOT done (node3 at $DRAIN_LEFT buckets after 15 s)}s; "
    if [[ -z $DRAIN_S || -z $ref ]] || ! awk "BEGIN { d = $DRAIN_S - $ref; exit !($DRAIN_S <= 7.0 && d <= 1.0 && d >= -1.0) }"; then
      ok=0
    fi
  done
  nums+="wall clock now $(date -u +%FT%TZ)"
  RB_MIN_INTERVAL_MS=$interval_before
  leave_base
  if ((ok)); then pass clockstep "$nums"; else fail clockstep "$nums"; fi
}
