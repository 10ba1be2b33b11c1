#!/usr/bin/env bash
# Build nilb as one fully static binary (static-pie, glibc, libbpf + libelf +
# zlib linked in), for bare metal: copy it anywhere and run it.
#
#   scripts/build-static.sh            -> target/x86_64-unknown-linux-gnu/release/nilb
#   scripts/build-static.sh --example quic_server   extra cargo arguments: build those instead
#
# Needs the Debian packages of scripts/setup.sh (libelf-dev and zlib1g-dev
# provide the static archives; libbpf is vendored by libbpf-sys). nilb resolves no host names, so
# static glibc's NSS limits do not matter.
set -euo pipefail
source "$(dirname "$0")/env.sh"
TARGET=${TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
export LIBBPF_SYS_LIBRARY_PATH=${LIBBPF_SYS_LIBRARY_PATH:-/usr/lib/$(gcc -print-multiarch)}
export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static"
cargo build --release --locked --features static --target "$TARGET" "$@"
BIN=target/$TARGET/release/nilb
if ! file "$BIN" | grep -Eq 'static(-pie)? linked|statically linked'; then
  echo "build-static.sh: $BIN is not statically linked:" >&2
  file "$BIN" >&2
  exit 1
fi
echo "build-static.sh: $(file -b "$BIN" | cut -d, -f1-3)"
echo "$BIN"
