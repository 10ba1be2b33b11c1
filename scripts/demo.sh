#!/usr/bin/env bash
# The demo: install what is missing, build nilb, then send real HTTP requests
# from a client namespace through a VIP balanced by nilb across three backend
# namespaces, and print which backend served which share. Needs root.
# Arguments go to netns-harness/run.sh: `scripts/demo.sh --keep-logs` keeps the
# run's directory (nilb's logs, the config, JSON); its path is printed.
set -euo pipefail
source "$(dirname "$0")/env.sh"
./scripts/setup.sh
cargo build --release
exec netns-harness/run.sh --demo --nilb target/release/nilb "$@"
