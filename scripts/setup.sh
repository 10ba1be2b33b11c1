#!/usr/bin/env bash
# Install everything nilb's build, tests and demo need on a fresh Debian 12
# machine. Idempotent: installs only missing packages. Needs root.
#
#   build: clang-19 clang llvm libelf-dev zlib1g-dev pkg-config make gcc libclang-dev
#          (clang-19 compiles the BPF programs: the QUIC-LB decoder's kernel
#          pointers need its BTF type tags; libclang feeds bindgen)
#   tools: bpftool (regenerating vmlinux.h)
#   tests: iproute2 ethtool tcpdump iputils-ping procps util-linux python3 curl iperf3
#          file (static check), gnuplot-nox (dynamic-weights plot),
#          wrk nginx-light (harness scenario chain: HTTP load through weight changes)
#          bird2 etcd-server (harness ecmp scenarios: BGP router, shared tables)
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (installs packages)" >&2
  exit 1
fi

PACKAGES=(
  clang-19 clang llvm libelf-dev zlib1g-dev pkg-config make gcc libclang-dev
  bpftool
  iproute2 ethtool tcpdump iputils-ping procps util-linux python3 curl iperf3
  file gnuplot-nox wrk nginx-light
  # the ecmp harness scenarios: BIRD on the router and on every balancer
  # (Debian's bird2 service, if started, runs its own harmless default config)
  bird2
  # the ecmp harness scenarios: one etcd member the balancers share their
  # tables through (cluster.etcd; Debian's etcd-server service, if started,
  # listens on localhost only and is not used)
  etcd-server
  # scripts/kernel-lane.sh: Debian's own kernels in QEMU guests (software
  # emulation where KVM cannot run them) with a busybox initramfs; xz-utils and
  # zstd unpack the kernels' compressed vmlinux
  qemu-system-x86 busybox-static xz-utils zstd
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup.sh: all packages present"
fi

if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH"
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup.sh: cargo not found; install the Rust toolchain (rustup) first" >&2
  exit 1
fi
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$c" || echo "setup.sh: warning: cargo $c unavailable" >&2
  fi
done

# The kernel features nilb needs; say plainly what is missing.
[ -r /sys/kernel/btf/vmlinux ] || echo "setup.sh: warning: no kernel BTF (/sys/kernel/btf/vmlinux)" >&2
echo "setup.sh: done"
