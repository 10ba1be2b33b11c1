#!/usr/bin/env bash
# Long hostile-input run of both BPF programs (tests/fuzz_packets/): random,
# mutated and swept frames through the XDP balancer and the TC second-chance
# program with BPF_PROG_TEST_RUN, each checked against the test's reference
# parser (verdicts, "nothing malformed is encapsulated, decapsulated or
# forwarded", counters, exact output bytes, per-service/backend statistics),
# IPv4 and IPv6 (client frames to IPv6 VIPs for XDP, GUE protocol 41 for TC),
# over an IPv4 cluster network and then over an IPv6 one (outer IPv6 GUE with
# 16-byte hops; NILB_FUZZ_CLUSTER6_PACKETS more packets per program).
# Prints the packets per program, the IPv6 ones and the IPv6-cluster ones
# among them, the verdict and counter totals (and the IPv6 cluster's on their
# own), and every violation; exits non-zero on any violation. Needs root.
#
#   scripts/fuzz.sh              # 2,000,000 packets per program, 1,000,000 of them IPv6,
#                                # then 1,000,000 over the IPv6 cluster network
#   NILB_FUZZ_PACKETS=200000 NILB_FUZZ_SEED=42 scripts/fuzz.sh   # half IPv6
#   NILB_FUZZ_PACKETS=300000 NILB_FUZZ_IPV6_PACKETS=100000 scripts/fuzz.sh
#   NILB_FUZZ_CLUSTER6_PACKETS=0 scripts/fuzz.sh  # the IPv4 cluster network only
#   NILB_FUZZ_THREADS=4 scripts/fuzz.sh           # workers per program (default: CPUs)
#
# A failure prints the seed and each failing frame as hex; to rerun one frame:
#   NILB_FUZZ_PROGRAM=xdp NILB_FUZZ_FRAME=<hex> cargo test --test fuzz_packets -- --nocapture
# (with NILB_FUZZ_CLUSTER=6 for a frame of the IPv6 cluster network's share)
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [ "$(id -u)" -ne 0 ]; then
  echo "fuzz.sh: run as root (BPF test runs, network namespaces)" >&2
  exit 1
fi

export NILB_FUZZ_PACKETS="${NILB_FUZZ_PACKETS:-2000000}"
export NILB_FUZZ_IPV6_PACKETS="${NILB_FUZZ_IPV6_PACKETS:-$((NILB_FUZZ_PACKETS / 2))}"
export NILB_FUZZ_CLUSTER6_PACKETS="${NILB_FUZZ_CLUSTER6_PACKETS:-1000000}"
export NILB_FUZZ_THREADS="${NILB_FUZZ_THREADS:-$(nproc)}"
export NILB_FUZZ_SEED="${NILB_FUZZ_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}"

echo "== building tests/fuzz_packets/"
cargo test --test fuzz_packets --no-run 2>&1 | tail -n 2

echo "== fuzzing: $NILB_FUZZ_PACKETS packets per program ($NILB_FUZZ_IPV6_PACKETS of them IPv6) and $NILB_FUZZ_CLUSTER6_PACKETS over the IPv6 cluster network, $NILB_FUZZ_THREADS worker(s) each, seed $NILB_FUZZ_SEED"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
set +e
# One program at a time, each with NILB_FUZZ_THREADS workers in their own
# network namespaces.
cargo test --test fuzz_packets -- --nocapture --test-threads=1 fuzz_ >"$log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))

# Everything the fuzzer printed (summary lines, violations with their frames).
sed -n '/^fuzz /,/^test /p' "$log" | grep -v '^test ' || true
echo
echo "== summary (seed $NILB_FUZZ_SEED, ${elapsed} s)"
grep -E '^fuzz (xdp|tc)( \(IPv6 cluster\))?: ([0-9]+ packets|violations)' "$log" || true
if [ "$rc" -ne 0 ]; then
  echo "fuzz.sh: FAILED (cargo test exit $rc); the end of the log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
echo "fuzz.sh: no violations"
