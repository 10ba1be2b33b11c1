# shellcheck shell=bash
# scenario-order: 20
# (b) direct server return: tcpdump on the client's eth0 during a 90-request
# burst; frames with IP source = VIP must come from node2's and node3's MACs.
# Needs and leaves: the base state (changes nothing).

scenario_b() {
  header "(b) DSR: replies from $NH_VIP come straight from the backends, not via node1"
  need_base b || return
  if dsr_capture b 21000 90; then
    pass b "VIP-sourced frames by source MAC: $DSR_NUMBERS"
  else
    fail b "expected VIP-sourced frames from node2 and node3 MACs: $DSR_NUMBERS"
  fi
}
