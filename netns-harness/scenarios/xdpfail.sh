# shellcheck shell=bash
# scenario-order: 350
# (xdpfail) a reload that cannot apply is a failed reload: another XDP
# program (the harness's XDP_PASS, `xdp_pass.py`) is attached to node2's eth0,
# then the config makes node2 a balancer too + SIGHUP. nilb must not replace
# the foreign program, so node2's reload fails: its state must say so
# (`last_reload.ok` false, the error naming the XDP attach), `nilb status`
# must print FAILED and show node2 as what it runs (backend only: balancer
# false), and its metrics must count the failure (`nilb_last_reload_success
# 0`, `nilb_reloads_total{result="failure"}` +1); node1's reload of the same
# file succeeds. With the foreign program removed, the same file + SIGHUP
# makes node2 a balancer (XDP attached, state balancer true); the base config
# detaches it again.
# Needs: the base state. Leaves: the base state (node2 backend only, nothing
# attached to its eth0 but nilb's TC filter).

# metrics_of NODE: nilb's own Prometheus text (127.0.0.1:9700 in NODE's namespace)
metrics_of() {
  nh_fg "$1" timeout 5 "$NH_PY" -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9700/metrics", timeout=3).read().decode())' 2>/dev/null
}

scenario_xdpfail() {
  local nums="" ok=1 ns err bal conf text m xdp failed_before failed_after
  header "(xdpfail) node2 made a balancer by reload while another XDP program holds its eth0: a failed reload, shown as such"
  need_base xdpfail || return
  ns=$(nh_ns node2)
  if ! nh_fg node2 "$NH_PY" "$HERE/xdp_pass.py" eth0 >/dev/null; then
    fail xdpfail "could not attach the foreign XDP program to node2's eth0"
    leave_base
    return
  fi
  echo "  node2 eth0: $(ip -n "$ns" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1) (harness_pass, not nilb's)"
  failed_before=$(metrics_of node2 | sed -n 's/^nilb_reloads_total{result="failure"} \([0-9.e+]*\).*/\1/p')
  write_config "${WEIGHT[node1]}" "${WEIGHT[node2]}" "${WEIGHT[node3]}"
  cfg_edit "s/^  balancers: \[${NH_NODE_IP[node1]}\]$/  balancers: [${NH_NODE_IP[node1]}, ${NH_NODE_IP[node2]}]/"
  nilb_check || ok=0
  hup_all
  if wait_reload node2 8; then
    err=$(st get "$(state_of node2)" "reload.get('error') or ''")
    bal=$(st get "$(state_of node2)" "d['balancer']")
    conf=$(st get "$(state_of node2)" "d.get('balancer_configured')")
    echo "  node2 state: last reload ok=$(st get "$(state_of node2)" "reload.get('ok')"), balancer (running) $bal, configured $conf, error: ${err:0:220}"
  else
    ok=0 nums+="node2's state shows no reload: $WAIT_SUMMARY; "
  fi
  text=$(timeout 10 "$NILB" status --state-file "$(state_of node2)" 2>&1)
  echo "  nilb status on node2:"
  head -n 2 <<<"$text" | sed 's/^/    | /'
  sleep 1.5 # the metrics snapshot is refreshed about once a second
  m=$(metrics_of node2)
  failed_after=$(sed -n 's/^nilb_reloads_total{result="failure"} \([0-9.e+]*\).*/\1/p' <<<"$m")
  echo "  node2 metrics: $(grep -E '^nilb_(last_reload_success|balancer|balancer_configured) |^nilb_reloads_total' <<<"$m" | tr '\n' ' ')"
  xdp=$(ip -n "$ns" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1)
  nums+="with a foreign XDP program: node2 reload ok=$(st get "$(state_of node2)" "reload.get('ok')") ($(grep -o 'attaching XDP[^:]*' <<<"$err" | head -n 1)), state balancer=$bal, status line '$(head -n 1 <<<"$text" | grep -o '([^)]*)' | head -n 1)', FAILED in status: $(grep -c FAILED <<<"$text"), nilb_last_reload_success $(sed -n 's/^nilb_last_reload_success \(.*\)/\1/p' <<<"$m"), failures ${failed_before:-0} -> ${failed_after:-?}; node1 reload ok=$(st get "$(state_of node1)" "reload.get('ok')"); "
  [[ $(st get "$(state_of node2)" "reload.get('ok')") == False && $err == *"attaching XDP"* && $bal == False ]] || ok=0
  grep -q 'FAILED' <<<"$text" && grep -q '(backend only)' <<<"$text" || ok=0
  grep -q '^nilb_last_reload_success 0' <<<"$m" || ok=0
  awk "BEGIN { exit !(${failed_after:-0} == ${failed_before:-0} + 1) }" || ok=0
  [[ $(st get "$(state_of node1)" "reload.get('ok')") == True ]] || ok=0
  [[ $xdp == *"id"* ]] || ok=0 # the foreign program is still there, untouched
  # without the foreign program the same file makes node2 a balancer
  ip -n "$ns" link set dev eth0 xdp off
  hup_all
  if wait_reload node2 8 "reload.get('ok') is True and d['balancer'] is True"; then
    nums+="foreign program removed, same file: node2 reload ok, balancer, eth0 $(ip -n "$ns" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1); "
  else
    ok=0 nums+="node2 not a balancer after the foreign program was removed: $WAIT_SUMMARY; "
  fi
  leave_base
  if st_wait node2 8 "d['balancer'] is False and reload.get('ok') is True"; then
    nums+="base config: node2 backend only again, eth0 xdp: $(ip -n "$ns" -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1 || true)"
  else
    ok=0 nums+="node2 still a balancer after the base config: $WAIT_SUMMARY"
  fi
  if ((ok)); then pass xdpfail "$nums"; else fail xdpfail "$nums"; fi
}
