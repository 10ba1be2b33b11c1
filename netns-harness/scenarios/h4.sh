# shellcheck shell=bash disable=SC2001 # sed over multi-line text is clearer here
# scenario-order: 80 health
# (h4) the config is rewritten with a YAML syntax error (the last flow mapping
# unclosed) and every nilb gets SIGHUP: every node's state must show the reload
# rejected (last_reload.ok false, one more rejected), node1's with the error,
# `nilb status` must print FAILED with it; per backend [weight, buckets,
# 2nd-hop buckets] identical before and after; a 300-burst fits the old
# weights; all daemons alive; the good file restored + SIGHUP gives a
# successful reload and the same tables.
# Needs: the base state. Leaves: the base state.

scenario_h4() {
  local nums="" ok=1 before after n good=$NH_OUT/nilb-good-h4.yaml broken=$NH_OUT/nilb-broken-h4.yaml chk status rerr
  header "(h4) SIGHUP with a broken YAML file: rejected, running tables and traffic unchanged"
  need_base h4 || return
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
    if wait_reload "$n" 5 "reload.get('ok') is False"; then
      echo "  $n state: reload rejected, running configuration kept ($(st get "$(state_of "$n")" "reload['failed']") rejected so far)"
    else
      echo "  $n's state shows no rejected reload within 5 s: $WAIT_SUMMARY"
      nums+="$n: no rejected reload in its state; "
      ok=0
    fi
  done
  echo "  info: node1 log: $(log_since node1 "${HUP_LINES[node1]}" | grep -m 1 'reload rejected' | cut -c1-200)"
  if st_wait node1 5 "reload.get('ok') is False and bool(reload.get('error'))"; then
    # the problem itself (field path, line, column) is the error's last line
    rerr=$(st get "$(state_of node1)" "reload['error']" | sed 's/^ *//' | tail -n 1 | cut -c1-150)
    echo "  node1 state: last_reload ok=false, failed=$(st get "$(state_of node1)" "reload['failed']"), error (last line): $rerr"
  else
    echo "  node1 state shows no failed reload: $WAIT_SUMMARY"
    nums+="state: no failed reload; "
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
  leave_base
  if ((ok)); then pass h4 "$nums"; else fail h4 "$nums"; fi
}

