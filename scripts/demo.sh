#!/usr/bin/env bash
# The demo: install what is missing, build nilb, then send real HTTP requests
# from a client namespace through a VIP balanced by nilb across three backend
# namespaces, and print which backend served which share. Needs root.
set -euo pipefail
source "$(dirname "$0")/env.sh"
./scripts/setup.sh
cargo build --release
exec netns-harness/run.sh --demo --nilb target/release/nilb
