# shellcheck shell=bash disable=SC2001 # sed over multi-line text is clearer here
# scenario-order: 420
# (e) SIGTERM to every nilb: each exits 0; no XDP program, no tc ingress filter
# (and, with bpftool, nothing in `bpftool net`) on any eth0; no pin left in the
# pin dirs on the harness's bpffs. A daemon still running with
# --keep-dataplane is removed with `nilb cleanup` before the checks.
# Needs: the base state. Leaves: every nilb stopped (the only scenario that
# does; a later scenario's set-up starts them again), so the default run has
# it last.

scenario_e() {
  header "(e) SIGTERM: every nilb exits 0 and detaches everything"
  local n ok=1 nums="" rc link xdp filt qd bt pins
  need_base e || return
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

