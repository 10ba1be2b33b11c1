#!/usr/bin/env bash
# Every test: install what is missing, check formatting and lints, run the
# unit tests, the BPF packet tests (BPF_PROG_TEST_RUN), the end-to-end
# network-namespace harness and the kernel lane (Debian's 6.1 and 6.12 kernels
# in QEMU guests, scripts/kernel-lane.sh). Exits non-zero on any failure.
# Needs root.
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: run as root (BPF programs and network namespaces)" >&2
  exit 1
fi
./scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets -- -D warnings
echo "== cargo test (unit, config, table, BPF packet fixtures, hash identity, replay)"
cargo test --all-targets
echo "== static binary (scripts/build-static.sh) and netns harness with it (real traffic)"
out=$(scripts/build-static.sh)
sed '$d' <<<"$out"
BIN=$(tail -n 1 <<<"$out")
echo "static binary: $BIN"
echo "== QUIC example server and client next to it (the harness's quic scenario runs them)"
scripts/build-static.sh --example quic_server --example quic_client >/dev/null
netns-harness/run.sh --nilb "$BIN"
echo "== kernel lane: Debian 12's own kernels (6.1, 6.12) in QEMU guests with virtio-net, real traffic"
scripts/kernel-lane.sh --nilb "$BIN"
echo "test.sh: all tests passed"
