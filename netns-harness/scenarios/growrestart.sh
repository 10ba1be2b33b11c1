# shellcheck shell=bash
# scenario-order: 310
# (growrestart) a restart with a new table size that grows the pinned bucket
# pool: 30 keep-alive connections send a request every 0.1 s and 50 new
# connections/s run throughout. node1's live table is dumped, node1's nilb
# SIGKILLed; the file gains a service of 65536 buckets (the pool must grow:
# its tables no longer fit the pinned pool) and web's table goes from 1024 to
# 2048 buckets; nilb starts again on the same pins. The restart must resize
# web's live table as a reload would (bucket i keeps what bucket i mod 1024
# held), and install the new and resized tables only once the new programs
# are attached (until then the old ones read the old pool; docs/design.md
# "Maps", sizing).
# Pass: the new daemon's log says the pool grew and the 2 tables waited for
# the attach; node1's live web table has 2048 buckets, none with other hops
# than its bucket i mod 1024 had before the kill; node1's XDP dropped no
# packet for want of a first hop (xdp_drop_no_backend +0, the counters are
# pinned); 30/30 held connections answer every round, 0 resets; every new
# connection succeeds. (Before the fix of the resize 17 of 30 held connections
# timed out: the table was built anew. Without the attach ordering the old
# programs can meet an empty region, but their per-CPU service cache serves
# the old one for up to 100 ms, so a run shows drops only sometimes; the unit
# test a_grown_pool_installs_new_and_resized_tables_after_the_attach covers it.)
# Needs: the base state. Leaves: the base state (the file as before + SIGHUP;
# the pool keeps its grown size).

scenario_growrestart() {
  local nums="" ok=1 est pid t_kill grown size drops okc resets fails rounds moved
  local stop=$NH_OUT/stream-growrestart.stop
  header "(growrestart) node1's nilb restarted (-9) with a service added and web resized: the pinned pool grows, no packet meets an empty region"
  if [[ -z ${PIN_DIR[node1]:-} ]]; then
    fail growrestart "no pins on a harness bpffs (mount_pins did not run)"
    return
  fi
  need_base growrestart || return
  hold_bg growrestart --count 30 --sport-base 57000 --rounds 1000 --interval 0.1 --max-seconds 60 \
    --until "$NH_OUT/hold-growrestart.until"
  if [[ ! -e $HOLD_STATE ]]; then
    nh_stop "$HOLD_PID" TERM 3
    fail growrestart "hold client did not open its connections: $(tr '\n' ' ' <"$NH_OUT/hold-growrestart.log")"
    return
  fi
  est=$(json "$HOLD_STATE" 'd["established"]')
  [[ $est == 30 ]] || ok=0
  touch "$HOLD_GO"
  save_stats node1 "$NH_OUT/stats-node1-grow-before.json"
  stream_bg growrestart 57500 50 20 "$stop" || ok=0
  sleep 1
  dump_tables node1 "$NH_OUT/tables-grow-before.json" >/dev/null 2>&1
  pid=${NILB_PID[node1]}
  t_kill=$(nh_now)
  nh_stop "$pid" KILL 5
  retire_log node1 before-grow
  # a 65536-bucket service (the pool must grow) and web at 2048 buckets
  EXTRA_SERVICES="  - name: big
    vip: 10.77.0.201
    port: 80
    protocol: tcp
    table_size: 65536
    health_check: {none: {}}
    backends:
      - {dip: $(node_yaml node2)}"
  write_config "${BASE_WEIGHTS[@]}"
  cfg_edit '0,/^    protocol: tcp$/s//    protocol: tcp\n    table_size: 2048/'
  start_nilb_on node1
  if ! wait_ready node1; then
    touch "$stop" "$HOLD_UNTIL"
    stream_wait 30
    hold_finish 30
    leave_base
    fail growrestart "restarted nilb not ready"
    return
  fi
  echo "  node1's nilb killed and started again with the larger file: ready $(nh_calc "$(nh_now) - $t_kill")s after the kill"
  grown=$(log_since node1 0 | grep -m 1 'bucket pool grown' | sed 's/^.*Z *INFO *//' | cut -c1-200)
  echo "  its log: ${grown:-(no line about the grown pool)}"
  [[ $grown == *"tables=2"* ]] || ok=0
  size=$("$NILB" tables --json --pin-dir "${PIN_DIR[node1]}" 2>/dev/null |
    "$NH_PY" -c 'import json,sys; d=json.load(sys.stdin); print(*[s["table_size"] for s in d["services"] if s["port"] == 80 and s["vip"] == sys.argv[1]])' "$NH_VIP")
  echo "  node1's live web table: ${size:-?} buckets"
  dump_tables node1 "$NH_OUT/tables-grow-ready.json" >/dev/null 2>&1
  # grown, bucket i holds what bucket i mod 1024 held: every flow keeps its hops
  moved=$("$NH_PY" - "$NH_OUT/tables-grow-before.json" "$NH_OUT/tables-grow-ready.json" "$NH_VIP" <<'PY'
import json, sys
def web(path):
    for s in json.load(open(path))["services"]:
        if s["vip"] == sys.argv[3] and s["port"] == 80:
            return [(b["first_hop"], b["second_hop"]) for b in s["buckets"]]
    return []
a, b = web(sys.argv[1]), web(sys.argv[2])
print(sum(1 for i, h in enumerate(b) if h != a[i % len(a)]) if a and b else "?")
PY
)
  echo "  buckets of the 2048 whose first or second hop differs from bucket i mod 1024 before the kill: $moved"
  [[ $moved == 0 ]] || ok=0
  [[ $size == 2048 ]] || ok=0
  sleep 3
  touch "$stop" "$HOLD_UNTIL"
  stream_wait 30
  hold_finish 30
  save_stats node1 "$NH_OUT/stats-node1-grow-after.json"
  drops=$(($(counter xdp_drop_no_backend "$NH_OUT/stats-node1-grow-after.json") - $(counter xdp_drop_no_backend "$NH_OUT/stats-node1-grow-before.json")))
  [[ $drops == 0 ]] || ok=0
  nums+="pool grown with new and resized tables after the attach: $([[ -n $grown ]] && echo yes || echo NO); web's live table ${size:-?} buckets, $moved with other hops than before; xdp_drop_no_backend +$drops"
  nums+="; new connections $(json "$STREAM_RES" '"%d/%d ok" % (d["ok"], d["sent"])')"
  [[ $(json "$STREAM_RES" 'd["ok"] == d["sent"] and d["sent"] > 0') == True ]] || ok=0
  if hold_read; then
    nums+="; held ${okc}/30 ok over ${rounds} rounds, resets ${resets}, failures ${fails}"
    [[ $okc == 30 && $resets == 0 && $fails == 0 ]] || ok=0
  else
    ok=0
    nums+="; hold client left no result"
  fi
  leave_base
  if ((ok)); then pass growrestart "$nums"; else fail growrestart "$nums"; fi
}
