# shellcheck shell=bash
# scenario-order: 10
# (a) distribution: 300 requests via the VIP, each on a new connection from its
# own source port; the split must fit the weights 1:1:2 (chi-square goodness of
# fit, rejected at p < 0.001). Also compares `nilb lookup --json` with the
# observed backends and prints node1's non-zero XDP counters (`nilb stats --json`).
# Needs and leaves: the base state (changes nothing).

scenario_a() {
  local n
  header "(a) distribution: 300 new connections via $NH_VIP:80, weights $(base_ratio)"
  need_base a || return
  if burst_dist a 20000; then
    pass a "$DIST_NUMBERS"
  else
    fail a "$DIST_NUMBERS"
  fi
  "$NH_PY" "$HERE/lookup.py" --nilb "$NILB" --config "$CFG" --result "$NH_OUT/burst-a.json" --show 2 |
    sed 's/^LOOKUP/  info: nilb lookup vs observed backend (same config):/'
  for n in "${NH_NODES[@]}"; do
    save_stats "$n" "$NH_OUT/stats-$n-a.json"
  done
  echo "  info: node1 XDP counters after (a) (nilb stats --json, non-zero, names starting xdp):"
  "$NH_PY" "$HERE/results.py" counters "$NH_OUT/stats-node1-a.json" '^xdp' | tr ' ' '\n' | head -n 12 | sed 's/^/    /'
}
