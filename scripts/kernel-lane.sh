#!/usr/bin/env bash
# kernel-lane.sh - run nilb on Debian 12's own kernels in QEMU guests with a
# virtio-net NIC (native XDP), with real traffic from the host.
#
#   scripts/kernel-lane.sh --nilb PATH                      the full lane: every kernel
#                                                           (6.1 and 6.12), traffic checks,
#                                                           a summary table; exit 1 on any failure
#   scripts/kernel-lane.sh --kernel 6.12 --nilb PATH --cmd 'nilb --help'
#                                                           boot that kernel, run the shell
#                                                           command in the guest (busybox sh, in
#                                                           /work), print its output, exit with
#                                                           its status
#   scripts/kernel-lane.sh --kernel 6.1 --nilb PATH --put nilb.yaml --cmd 'nilb check --config nilb.yaml'
#
# Options:
#   --kernel K      6.1 (linux-image-amd64), 6.12 (linux-image-6.12-amd64) or a package
#                   name linux-image-...; repeat for several (default: 6.1 and 6.12)
#   --nilb PATH     the static nilb (scripts/build-static.sh prints its path); default
#                   target/x86_64-unknown-linux-gnu/release/nilb
#   --cmd CMD       run CMD in the guest instead of the traffic test (repeat --kernel to
#                   run it on several; exit status: the first non-zero one)
#   --put FILE      copy FILE (or a directory) into the guest's /work (repeatable)
#   --accel A       auto (default), kvm or tcg. auto: KVM only where it runs ordinary
#                   guests (not on a PVM host: kvm_pvm), else TCG (software emulation)
#   --smp N         guest vCPUs (default 2); the NIC gets 2N queue pairs
#   --tcg-thread T  single (default) or multi: TCG's threads (multi races with the
#                   kernel's code patching: int3 oopses at boot)
#   --mem MB        guest memory (default 768)
#   --boot-timeout S  seconds for a guest to boot and answer (default 120)
#   --cmd-timeout S   seconds for --cmd (default 120)
#   --keep-logs     keep the run's directory (console logs, nilb logs, captures)
#   --allow-fail K  kernel K's failures are printed (XFAIL) but do not fail the lane (a
#                   kernel nilb is known not to load on yet); if every check of K passes
#                   the lane says so (XPASS) and still exits 0 (repeatable)
#
# Everything it needs it installs or fetches itself: qemu-system-x86 and busybox-static
# (scripts/setup.sh), the kernel packages (apt-get download, cached with their extracted
# files under /var/cache/nilb/kernel-lane). It creates network namespaces named
# kl<pid>-* (a bridge and the guests' taps live in kl<pid>-sw) and removes them, the
# guests and every process it started on exit (also on error or Ctrl-C). Needs root.
# The checks, the guests and the findings: netns-harness/kernel-lane/README.md.
# shellcheck source-path=SCRIPTDIR/..
# shellcheck disable=SC2001 # sed over multi-line text is clearer here
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$REPO/netns-harness
KL=$HERE/kernel-lane
CACHE=${NILB_KERNEL_LANE_CACHE:-/var/cache/nilb/kernel-lane}
# shellcheck source=netns-harness/lib.sh
source "$HERE/lib.sh"

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; /^# shellcheck/d; s/^# \{0,1\}//'; }

KERNELS=()
NILB=""
CMD=""
HAVE_CMD=0
PUTS=()
ACCEL=auto
SMP=2
MEM=768
BOOT_TIMEOUT=120
CMD_TIMEOUT=120
KEEP=0
ALLOW_FAIL=()
# TCG: one host thread for all vCPUs by default. Multi-threaded TCG (QEMU 7.2) races
# with the kernel's live code patching (text_poke_bp): a vCPU still runs a stale
# translation holding the temporary int3 ("Oops: int3" in sched_clock_cpu at boot,
# seen on 6.12 about once in ten boots with -smp 2)
TCG_THREAD=${KL_TCG_THREAD:-single}
while (($#)); do
  case $1 in
    --kernel) KERNELS+=("${2:?--kernel needs a version}"); shift 2 ;;
    --nilb) NILB=${2:?--nilb needs a path}; shift 2 ;;
    --cmd) CMD=${2?--cmd needs a command}; HAVE_CMD=1; shift 2 ;;
    --put) PUTS+=("${2:?--put needs a file}"); shift 2 ;;
    --accel) ACCEL=${2:?}; shift 2 ;;
    --smp) SMP=${2:?}; shift 2 ;;
    --tcg-thread) TCG_THREAD=${2:?}; shift 2 ;;
    --mem) MEM=${2:?}; shift 2 ;;
    --boot-timeout) BOOT_TIMEOUT=${2:?}; shift 2 ;;
    --cmd-timeout) CMD_TIMEOUT=${2:?}; shift 2 ;;
    --keep-logs) KEEP=1; shift ;;
    --allow-fail) ALLOW_FAIL+=("${2:?--allow-fail needs a kernel}"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "kernel-lane: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#KERNELS[@]})) || KERNELS=(6.1 6.12)
# (each kernel once, in the order given)
mapfile -t KERNELS < <(printf '%s\n' "${KERNELS[@]}" | awk '!seen[$0]++')
case $ACCEL in auto | kvm | tcg) ;; *) echo "kernel-lane: --accel auto|kvm|tcg" >&2; exit 2 ;; esac
if [[ $(id -u) != 0 ]]; then
  echo "kernel-lane: run as root (network namespaces, taps, package installs)" >&2
  exit 2
fi
NILB=${NILB:-$REPO/target/x86_64-unknown-linux-gnu/release/nilb}
[[ $NILB == /* ]] || NILB=$PWD/$NILB
if [[ ! -x $NILB ]]; then
  echo "kernel-lane: no nilb binary at $NILB (scripts/build-static.sh, then --nilb PATH)" >&2
  exit 2
fi
for f in "${PUTS[@]}"; do
  [[ -e $f ]] || { echo "kernel-lane: --put $f: no such file" >&2; exit 2; }
done

log() { printf 'kernel-lane: %s\n' "$*"; }

# ------------------------------------------------------------------ packages and kernels

ensure_packages() {
  local p missing=()
  for p in qemu-system-x86 busybox-static xz-utils zstd iproute2 python3 tcpdump; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$NH_OUT/apt.log" 2>&1 ||
    { DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$NH_OUT/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$NH_OUT/apt.log" 2>&1; } ||
    { log "could not install ${missing[*]}:"; tail -n 5 "$NH_OUT/apt.log"; return 1; }
}

APT_UPDATED=0
# kernel_pkg K [offline-ok]: the image package for K (6.1 | 6.12 | linux-image-...);
# offline-ok: if apt-cache cannot tell, the newest one in the cache
kernel_pkg() {
  local meta dep glob
  case $1 in
    linux-image-*) echo "$1"; return 0 ;;
    6.1) meta=linux-image-amd64 glob='6.1.0-[0-9]*-amd64' ;;
    6.12) meta=linux-image-6.12-amd64 glob='6.12.[0-9]*+deb12-amd64' ;;
    *) log "unknown kernel $1 (6.1, 6.12 or a linux-image-... package)" >&2; return 1 ;;
  esac
  dep=$(apt-cache depends "$meta" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n 1)
  if [[ -z $dep && ${2:-} == offline-ok ]]; then
    # offline: the newest one already in the cache
    dep=$(find "$CACHE" -maxdepth 1 -type d -name "x-linux-image-$glob" -printf '%f\n' 2>/dev/null | sed 's/^x-//' | sort -V | tail -n 1)
    [[ -n $dep ]] && log "apt-cache does not know $meta; using the cached $dep" >&2
  fi
  [[ -n $dep ]] || { log "cannot resolve $meta to a kernel package" >&2; return 1; }
  echo "$dep"
}

# fetch_kernel PKG: download and extract PKG into $CACHE/x-PKG (kept); sets KDIR, KVER, VMLINUZ
fetch_kernel() {
  local pkg=$1 deb
  KDIR=$CACHE/x-$pkg
  mkdir -p "$CACHE" || return 1
  if [[ ! -f $KDIR/.complete ]]; then
    deb=$(find "$CACHE" -maxdepth 1 -name "${pkg}_*.deb" | sort -V | tail -n 1)
    if [[ -z $deb ]]; then
      log "downloading $pkg"
      (cd "$CACHE" && apt-get download "$pkg") >>"$NH_OUT/apt.log" 2>&1 ||
        { log "apt-get download $pkg failed:"; tail -n 5 "$NH_OUT/apt.log"; return 1; }
      deb=$(find "$CACHE" -maxdepth 1 -name "${pkg}_*.deb" | sort -V | tail -n 1)
    fi
    if ! { rm -rf "$KDIR" && mkdir -p "$KDIR" && dpkg-deb -x "$deb" "$KDIR"; }; then
      log "dpkg-deb -x $deb failed"
      return 1
    fi
    touch "$KDIR/.complete"
    # the extracted tree is what later runs use; older builds of the same series go
    rm -f -- "$deb"
    prune_cache "$pkg"
  fi
  VMLINUZ=$(find "$KDIR/boot" -name 'vmlinuz-*' | head -n 1)
  KVER=${VMLINUZ##*/vmlinuz-}
  [[ -f $VMLINUZ && -d $KDIR/lib/modules/$KVER ]] || { log "no vmlinuz/modules in $KDIR"; return 1; }
  # QEMU boots the uncompressed ELF vmlinux straight through its PVH entry point
  # (CONFIG_PVH): no firmware, no real-mode set-up, no decompression under TCG
  # (about 6 s less per boot); the bzImage is the fallback
  [[ -f $KDIR/vmlinux ]] || extract_vmlinux "$VMLINUZ" "$KDIR/vmlinux" ||
    log "could not extract an ELF vmlinux from $VMLINUZ; booting the bzImage"
  [[ -f $KDIR/vmlinux ]] && VMLINUZ=$KDIR/vmlinux
  return 0
}

# prune_cache PKG: remove the cached trees and packages of PKG's series other than PKG
# (linux-image-6.1.0-N-amd64 for other N; linux-image-6.12.N+deb12-amd64 for other N)
series_of() { sed -E 's/^(linux-image-[0-9]+\.[0-9]+\.0-)[0-9]+(-.*)$/\1N\2/; t; s/^(linux-image-[0-9]+\.[0-9]+\.)[0-9]+(\+.*)$/\1N\2/' <<<"$1"; }
prune_cache() {
  local pkg=$1 series f p
  series=$(series_of "$pkg")
  [[ $series == *N* ]] || return 0
  for f in "$CACHE"/x-linux-image-* "$CACHE"/linux-image-*.deb; do
    [[ -e $f ]] || continue
    p=${f##*/}
    p=${p#x-}
    p=${p%%_*}
    [[ $p != "$pkg" && $(series_of "$p") == "$series" ]] || continue
    log "removing the older $p from the cache ($f)"
    rm -rf -- "$f"
  done
}

# extract_vmlinux BZIMAGE OUT: the kernel's compressed payload (xz or zstd) as an ELF
# that carries a PVH note (Xen note type 18), like the kernel's scripts/extract-vmlinux
extract_vmlinux() {
  local img=$1 out=$2 pos
  grep -qx 'CONFIG_PVH=y' "$(dirname "$img")/config-$KVER" 2>/dev/null || return 1
  for pos in $(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd|\xfd7zXZ\x00' "$img" | cut -d: -f1 | head -n 8); do
    tail -c +$((pos + 1)) "$img" | zstd -dcq 2>/dev/null >"$out.tmp"
    [[ $(head -c 4 "$out.tmp" | od -An -c | tr -d ' ') == 177ELF ]] && break
    tail -c +$((pos + 1)) "$img" | xz -dcq 2>/dev/null >"$out.tmp"
    [[ $(head -c 4 "$out.tmp" | od -An -c | tr -d ' ') == 177ELF ]] && break
  done
  if [[ -s $out.tmp && $(head -c 4 "$out.tmp" | od -An -c | tr -d ' ') == 177ELF ]]; then
    mv -f "$out.tmp" "$out"
    return 0
  fi
  rm -f "$out.tmp"
  return 1
}

# ------------------------------------------------------------------ initramfs

# The modules the guest loads (with their dependencies, in order); built-in ones are skipped.
GUEST_MODULES=(virtio_pci virtio_net sch_ingress cls_bpf)

# mod_file NAME: the module file of NAME under the kernel's tree (relative), empty if none
mod_file() {
  local m=$1 alt
  alt=${m//_/-}
  find "$KDIR/lib/modules/$KVER/kernel" \( -name "$m.ko" -o -name "$m.ko.*" -o -name "$alt.ko" -o -name "$alt.ko.*" \) \
    -printf '%P\n' 2>/dev/null | head -n 1
}
# mod_resolve NAME: append NAME's dependencies, then NAME, to MODS (files, relative)
mod_resolve() {
  local m=$1 f deps d
  [[ " ${MOD_SEEN[*]} " == *" $m "* ]] && return 0
  MOD_SEEN+=("$m")
  f=$(mod_file "$m")
  if [[ -z $f ]]; then
    if grep -qE "/${m//_/[_-]}\.ko$" "$KDIR/lib/modules/$KVER/modules.builtin" 2>/dev/null; then
      return 0
    fi
    log "module $m: neither a module file nor built into $KVER"
    return 1
  fi
  deps=$(mod_cat "$KDIR/lib/modules/$KVER/kernel/$f" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n 1)
  for d in ${deps//,/ }; do
    mod_resolve "$d" || return 1
  done
  MODS+=("$f")
}
mod_cat() {
  case $1 in
    *.xz) xz -dc "$1" ;;
    *.zst) zstd -dc "$1" ;;
    *.gz) gzip -dc "$1" ;;
    *) cat "$1" ;;
  esac
}

# copy_bin ROOT PATH: PATH and the libraries ldd names, at the same paths under ROOT
copy_bin() {
  local root=$1 bin=$2 lib
  install -D -m 0755 "$bin" "$root/usr/local/sbin/${bin##*/}" || return 1
  for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*'); do
    [[ -e $root$lib ]] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

# build_base_initramfs OUT: busybox, ip, tc, bpftool, /init and the NIC's modules of $KDIR/$KVER
build_base_initramfs() {
  local out=$1 root m b
  root=$NH_OUT/root-$KVER
  rm -rf "$root"
  mkdir -p "$root"/{bin,sbin,etc,lib,lib64,usr/bin,usr/sbin,usr/local/bin,usr/local/sbin,work,proc,sys,dev,tmp,run} || return 1
  install -m 0755 /bin/busybox "$root/bin/busybox" || return 1
  install -m 0755 "$KL/init" "$root/init" || return 1
  for b in ip tc bpftool; do
    b=$(command -v "$b" 2>/dev/null) || continue
    copy_bin "$root" "$b" || return 1
  done
  MODS=() MOD_SEEN=()
  for m in "${GUEST_MODULES[@]}"; do
    mod_resolve "$m" || return 1
  done
  : >"$root/etc/kl-modules"
  for m in "${MODS[@]}"; do
    local dst=${m%.xz}
    dst=${dst%.zst}
    dst=${dst%.gz}
    mkdir -p "$root/lib/modules/$(dirname "$dst")"
    mod_cat "$KDIR/lib/modules/$KVER/kernel/$m" >"$root/lib/modules/$dst" || return 1
    echo "$dst" >>"$root/etc/kl-modules"
  done
  sed 's#.*/##' "$root/etc/kl-modules" >"$NH_OUT/modules-$KVER"
  (cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null) >"$out" || return 1
  rm -rf "$root"
}

# build_run_initramfs OUT: the static nilb and the --put files (an uncompressed cpio
# appended to the base one; the kernel unpacks concatenated archives in order)
build_run_initramfs() {
  local out=$1 root=$NH_OUT/root-run f
  rm -rf "$root"
  mkdir -p "$root/usr/local/bin" "$root/work" || return 1
  install -m 0755 "$NILB" "$root/usr/local/bin/nilb" || return 1
  for f in "${PUTS[@]}" "${LANE_PUTS[@]}"; do
    cp -a "$f" "$root/work/" || return 1
  done
  (cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null) >"$out" || return 1
  rm -rf "$root"
}

# ------------------------------------------------------------------ acceleration

# accel_args: QEMU's -accel/-cpu for ACCEL (auto: KVM only if it runs ordinary guests)
KVM_OK=""
choose_accel() {
  case $ACCEL in
    tcg) KVM_OK=0 ;;
    kvm) KVM_OK=1 ;;
    auto)
      if [[ ! -r /dev/kvm || ! -w /dev/kvm ]]; then
        KVM_OK=0 ACCEL_WHY="no usable /dev/kvm"
      elif [[ -d /sys/module/kvm_pvm ]] || grep -qs '^kvm_pvm ' /proc/modules; then
        KVM_OK=0 ACCEL_WHY="/dev/kvm is a PVM host (kvm_pvm): it hangs ordinary guest kernels"
      else
        KVM_OK=1 ACCEL_WHY="/dev/kvm usable (a guest that does not answer within 30 s is retried with TCG)"
      fi
      ;;
  esac
}
accel_args() {
  if [[ $KVM_OK == 1 ]]; then
    echo "-accel kvm -cpu host"
  else
    echo "-accel tcg,thread=${TCG_THREAD} -cpu max"
  fi
}

# ------------------------------------------------------------------ guests

declare -A GUEST_PID=() GUEST_SOCK=() GUEST_CONSOLE=()
LANE_PUTS=()

# guest_start NAME NETNS TAP MAC APPEND: boot a guest of $VMLINUZ with initrd $INITRD whose
# virtio-net NIC is the multi-queue tap TAP in NETNS (created here); its control socket
# is $NH_OUT/NAME.sock, its console $NH_OUT/console-NAME.log
guest_start() {
  local name=$1 ns=$2 tap=$3 mac=$4 append=$5 q=${KL_QUEUES:-$((2 * SMP))} sock log
  sock=$NH_OUT/$name.sock
  log=$NH_OUT/console-$name.log
  rm -f "$sock"
  nh_run ip -n "$ns" tuntap add dev "$tap" mode tap multi_queue || return 1
  nh_run ip -n "$ns" link set "$tap" master br0 || return 1
  nh_run ip -n "$ns" link set "$tap" mtu "${TAP_MTU:-1500}" || return 1
  nh_run ip -n "$ns" link set "$tap" up || return 1
  # shellcheck disable=SC2046 # accel_args is word-split on purpose
  ip netns exec "$ns" timeout -k 5 "${GUEST_MAX_SECONDS:-600}" \
    qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
    -machine pc $(accel_args) -smp "$SMP" -m "$MEM" \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "console=ttyS0 ${KL_QUIET:-} panic=-1 random.trust_cpu=on mitigations=off $append" \
    -serial "file:$log" \
    -chardev "socket,id=ctl,path=$sock,server=on,wait=off" -serial chardev:ctl \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no,queues=$q" \
    -device "virtio-net-pci,netdev=n0,mac=$mac,mq=on,vectors=$((2 * q + 2))" \
    </dev/null >"$NH_OUT/qemu-$name.log" 2>&1 7>&- 8>&- &
  GUEST_PID[$name]=$!
  NH_PID_DESC[$!]="qemu $name"
  NH_STARTED=$((NH_STARTED + 1))
  GUEST_SOCK[$name]=$sock
  GUEST_CONSOLE[$name]=$log
}

# guest_wait_ready NAME TIMEOUT: until the guest answers on its control channel (sets
# BOOT_S, seconds since GUEST_T0); gives up early if QEMU exits (a panic: -no-reboot)
guest_wait_ready() {
  local name=$1 end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    if nh_local "$NH_PY" "$KL/guestctl.py" ready "${GUEST_SOCK[$name]}" 2; then
      BOOT_S=$(nh_calc "${EPOCHREALTIME/,/.} - ${GUEST_T0/,/.}")
      return 0
    fi
    if ! nh_alive "${GUEST_PID[$name]}"; then
      log "QEMU exited before the guest answered: $(tail -n 3 "$NH_OUT/qemu-$name.log" | tr '\n' ' ')"
      break
    fi
  done
  BOOT_S=$(nh_calc "${EPOCHREALTIME/,/.} - ${GUEST_T0/,/.}")
  return 1
}

# gx NAME TIMEOUT CMD...: run a shell command line in the guest; its output to stdout, its status
gx() {
  local name=$1 t=$2
  shift 2
  nh_local "$NH_PY" "$KL/guestctl.py" run "${GUEST_SOCK[$name]}" "$t" "$*"
}

# guest_stop NAME: poweroff, then (bounded) SIGTERM
guest_stop() {
  local name=$1 pid=${GUEST_PID[$1]:-}
  [[ -n $pid ]] || return 0
  "$NH_PY" "$KL/guestctl.py" send "${GUEST_SOCK[$name]}" "poweroff -f" >/dev/null 2>&1
  nh_wait_until 5 nh_not_alive "$pid" || nh_stop "$pid" TERM 5
  wait "$pid" 2>/dev/null
  unset "NH_PID_DESC[$pid]" "GUEST_PID[$name]"
}

console_tail() { [[ -f $1 ]] && tail -n "${2:-20}" "$1" | tr -d '\r' | sed 's/^/    | /'; }

# boot_kernel K NAME NETNS TAP MAC APPEND: resolve, fetch, build, start and wait; sets BOOT_S
boot_kernel() {
  local k=$1 name=$2 pkg
  if ! pkg=$(kernel_pkg "$k" 2>/dev/null) || ! fetch_kernel "$pkg"; then
    # no or stale package lists (the archive moved on to a newer ABI): update once and
    # resolve again; offline, the newest cached kernel of the series will do
    if ((APT_UPDATED == 0)); then
      log "$k: updating the package lists (apt-get update)"
      APT_UPDATED=1
      apt-get update -q >>"$NH_OUT/apt.log" 2>&1 || log "apt-get update failed (offline?)"
    fi
    pkg=$(kernel_pkg "$k" offline-ok) || return 1
    fetch_kernel "$pkg" || return 1
  fi
  local base=$NH_OUT/base-$KVER.cpio run=$NH_OUT/run.cpio
  if [[ ! -f $base ]]; then
    build_base_initramfs "$base" || { log "could not build the initramfs for $KVER"; return 1; }
  fi
  [[ -f $run ]] || build_run_initramfs "$run" || { log "could not build the run's initramfs"; return 1; }
  INITRD=$NH_OUT/initrd-$name.cpio
  cat "$base" "$run" >"$INITRD" || return 1
  log "$k: $pkg ($KVER), initramfs $(($(stat -c %s "$INITRD") / 1048576)) MiB, modules: $(tr '\n' ' ' <"$NH_OUT/modules-$KVER")"
  GUEST_T0=$EPOCHREALTIME
  guest_start "$name" "$3" "$4" "$5" "$6" || return 1
  local t=$BOOT_TIMEOUT
  [[ $KVM_OK == 1 && $ACCEL == auto ]] && ((t > 30)) && t=30
  if ! guest_wait_ready "$name" "$t"; then
    if [[ $KVM_OK == 1 && $ACCEL == auto ]]; then
      log "$k: no answer within ${t}s under KVM; retrying with TCG from now on"
      guest_stop "$name"
      ip -n "$3" link del "$4" 2>/dev/null
      KVM_OK=0
      GUEST_T0=$EPOCHREALTIME
      guest_start "$name" "$3" "$4" "$5" "$6" || return 1
      guest_wait_ready "$name" "$BOOT_TIMEOUT" && return 0
    fi
    log "$k: the guest did not answer (boot timeout ${t}s); console (panics and oopses, then its end):"
    tr -d '\r' <"${GUEST_CONSOLE[$name]}" | grep -E 'Kernel panic|Oops|BUG:|RIP:' | head -n 6 | sed 's/^/    ! /'
    console_tail "${GUEST_CONSOLE[$name]}" 20
    return 1
  fi
}

# ------------------------------------------------------------------ main

exec 7>&1 8>&2
on_signal() {
  echo "kernel-lane: interrupted by SIG$1; cleaning up" >&7
  NH_KEEP_OUT=1
  exit "$2"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
# (the bulky files go even when the logs are kept: initramfs images, the nilb copy)
trap 'rm -f -- "$NH_OUT"/*.cpio "$NH_OUT/nilb"; nh_cleanup >&7 2>&8' EXIT
NILB_HARNESS_PREFIX=kl$$
nh_init "${TMPDIR:-/tmp}" || { echo "kernel-lane: cannot create the output directory" >&2; exit 1; }
((KEEP)) && NH_KEEP_OUT=1
ensure_packages || exit 1
choose_accel
log "output $NH_OUT, accel: $([[ $KVM_OK == 1 ]] && echo kvm || echo "tcg (${ACCEL_WHY:-asked})")"

# --cmd: one guest per kernel on a bridge (namespace kl<pid>-sw, bridge 10.77.0.1/24)
if ((HAVE_CMD)); then
  nh_netns_add sw || exit 1
  SW=$(nh_ns sw)
  nh_run ip -n "$SW" link add br0 type bridge stp_state 0 forward_delay 0 || exit 1
  nh_run ip -n "$SW" addr add 10.77.0.1/24 dev br0 || exit 1
  nh_run ip -n "$SW" link set br0 up || exit 1
  final=0
  for k in "${KERNELS[@]}"; do
    name=cmd-${k//[^a-zA-Z0-9.]/_}
    if ! boot_kernel "$k" "$name" "$SW" tap0 02:77:00:00:00:11 "kl.host=guest kl.ip=10.77.0.11/24"; then
      final=${final/#0/1}
      NH_KEEP_OUT=1
      ip -n "$SW" link del tap0 2>/dev/null
      continue
    fi
    nic=down
    ip netns exec "$SW" ping -q -c 1 -W 2 10.77.0.11 >/dev/null 2>&1 && nic="up (ping from the host side ok)"
    log "$k: booted in ${BOOT_S}s ($KVER); eth0 $nic"
    echo "----- output of the command on $KVER"
    gx "$name" "$CMD_TIMEOUT" "$CMD"
    rc=$?
    echo "----- exit status $rc on $KVER"
    ((rc == 124)) && log "$k: (124: no answer within --cmd-timeout ${CMD_TIMEOUT}s, or the command's own)"
    [[ $final == 0 && $rc != 0 ]] && final=$rc
    guest_stop "$name"
    ip -n "$SW" link del tap0 2>/dev/null
  done
  exit "$final"
fi

# ------------------------------------------------------------------ the traffic test
# Topology (namespaces kl<pid>-*, made by lib.sh's nh_build_topology for the host side):
#
#   client 10.77.0.2/24, 2001:db8:77::2/64; routes VIP 10.77.0.100 via 10.77.0.11,
#          VIP6 2001:db8:77:ff::80 via 2001:db8:77::11
#   sw:    bridge br0 (mtu 1600) + veths to client, node2, node3 + tap0 (the guest's NIC)
#   node1  = the QEMU guest: 10.77.0.11/24, 2001:db8:77::11/64, VIPs on lo, forwarding on
#            eth0 (virtio-net, mtu 1600); balancer (XDP) and backend (busybox httpd :80,
#            :8091); nilb run --node-address 10.77.0.11
#   node2, node3 = namespaces on the host kernel: 10.77.0.12/.13, VIPs on lo, backend.py on
#            :80 and :8091, nilb run (the same static binary)
#
# Per kernel: boot, nilb on the three nodes, then the checks (each PASS/FAIL/-):
#   start   nilb runs in the guest and is ready (its state file carries its pid)
#   spread  60 new connections through the VIP spread by weights 1:1:2 (dist.py, chi-square)
#   gue     the GUE frames the guest sent (captured on tap0) match the wire format
#           (gue_check.py), with inner TCP to the VIP
#   held    12 held keep-alive connections on node2 and node3 survive a weight change to
#           8:1:1 + SIGHUP (the moved buckets' new first hop, the guest, sends their
#           packets on by second chance): 0 resets, every one answered by its backend,
#           the guest's tc_forward counter moved
#   prev    4 slow downloads (4 MiB) from the guest's httpd, started at 1:1:2, survive
#           the change to 8:1:1 and then to 1:8:8 (the guest loses most of its buckets:
#           node2/node3 send their packets on to it, the previous owner): all complete
#   nat     20 connections to the NAT service 10.77.0.11:8090 (mode nat, target 8091)
#   ipv6    30 connections to the IPv6 VIP, by weight
#   stop    SIGTERM: nilb exits 0 and leaves no XDP program or tc filter on eth0
LANE_REQUESTS=${KL_REQUESTS:-60}
((LANE_REQUESTS <= 600)) || LANE_REQUESTS=600
KIDX=0
HOLD_WEIGHTS=(8 1 1)
PREV_WEIGHTS=(1 8 8)
CHECKS=(start spread nat ipv6 held prev gue stop)
declare -A RES=()
declare -A BOOTS=() FEAT=() KVERS=() FOFF=() FOBJ=() KFAILED=()
LANE_FAILED=0
HOST_NILB_OK=""

# shellcheck source=netns-harness/harness.sh
source "$HERE/harness.sh"
XDP_MODE=""
READY_TIMEOUT=${NILB_READY_TIMEOUT:-30}
GUEST_READY_TIMEOUT=${KL_GUEST_READY_TIMEOUT:-180}
NH_HEALTH_CHECK=http

res() {
  RES[$1,$2]=$3
  if [[ $3 == FAIL ]]; then
    if [[ " ${ALLOW_FAIL[*]} " == *" $1 "* ]]; then KFAILED[$1]=1; else LANE_FAILED=1; fi
  fi
  printf '  %-6s %-4s %s\n' "$2" "$3" "${4:-}"
}

# gput NAME FILE [DEST]: write FILE to DEST (default: the same path) in the guest
gput() { gx "$1" 30 "sh /work/guest-lane.sh put '${3:-$2}' '$(base64 -w0 <"$2")'"; }

lane_config() { # lane_config W1 W2 W3: web (IPv4), web6 and natweb at these weights
  local b="" n i=0
  for n in "${NH_NODES[@]}"; do
    i=$((i + 1))
    b+=$'\n'"      - {dip: ${NH_NODE_IP[$n]}, hostname: $n, weight: ${!i}}"
  done
  WEB6=1
  CLUSTER_EXTRA="" EXTRA_SERVICES=""
  if [[ ${KL_NAT:-1} == 1 ]]; then
    CLUSTER_EXTRA="  nat: {max_flows: 65536, udp_timeout_ms: 3000}"
    EXTRA_SERVICES="  - name: natweb"$'\n'"    vip: ${NH_NODE_IP[node1]}"$'\n'"    port: 8090"$'\n'"    protocol: tcp"
    EXTRA_SERVICES+=$'\n'"    mode: nat"$'\n'"    target_port: 8091"$'\n'"    health_check: {http: {uri: /healthz}}"$'\n'"    backends:$b"
  fi
  write_config "$@"
}

lane_topology() {
  local n
  NH_NODES=(node2 node3)
  NH_BALANCER_FORWARDING=0 # node1 is the guest: its forwarding is set by its /init (kl.fwd=1)
  nh_build_topology || return 1
  NH_NODES=(node1 node2 node3)
  SW=$(nh_ns sw)
  TAP_MTU=$NH_NODE_MTU
  for n in node2 node3; do
    nh_bg "backend $n" "$NH_OUT/backend-$n.log" "$n" "$NH_PY" "$HERE/backend.py" --name "$n" --port 80 --port 8091
    BACKEND_PID[$n]=$NH_BG_PID
    BACKEND_LOG[$n]=$NH_OUT/backend-$n.log
  done
  for n in node2 node3; do
    nh_wait_until 10 test_listening "$NH_OUT/backend-$n.log" 2 || { log "backend.py on $n did not start"; return 1; }
  done
  # a bpffs per host node for the pins (nilb stats of node2/node3 from here: the harness's way)
  for n in node2 node3; do
    nh_mount_bpffs "$NH_OUT/bpf-$n" || return 1
    PIN_DIR[$n]=$NH_OUT/bpf-$n/nilb
  done
}

guest_nilb_ready() { # 0 once the guest's nilb is ready or dead (GN_DEAD=1)
  if ! gx "$GN" 20 "sh /work/guest-lane.sh alive" >/dev/null 2>&1; then
    GN_DEAD=1
    return 0
  fi
  [[ $(st get "$(state_of node1)" "d['pid']" 2>/dev/null) =~ ^[0-9]+$ ]]
}

# guest_counters REGEX: "name=value ..." of the guest daemon's non-zero counters matching REGEX
guest_counters() {
  gx "$GN" 30 "nilb stats --json" 2>/dev/null | "$NH_PY" "$HERE/results.py" counters - "$1" 2>/dev/null
}

hold_start() { # hold_start NODE SPORT_BASE: keep-alive connections that landed on NODE
  local n=$1
  rm -f "$NH_OUT/hold-$n.state" "$NH_OUT/hold.go"
  nh_bg "hold client ($n)" "$NH_OUT/hold-$n.log" client timeout 200 "$NH_PY" "$HERE/client.py" hold \
    --host "$NH_VIP" --port 80 --count 60 --sport-base "$2" --timeout 5 --want-backend "$n" --want-count 6 \
    --state "$NH_OUT/hold-$n.state" --go "$NH_OUT/hold.go" --go-timeout 150 --rounds 3 --interval 0.5 \
    --max-seconds 120 --out "$NH_OUT/hold-$n.json"
  HOLD_PID[$n]=$NH_BG_PID
}
declare -A HOLD_PID=()

lane_kernel() {
  local k=$1 out rc n nums why hosts_ok=1 pcap tpid
  # the client's source ports: a block of 1000 per kernel (a 4-tuple of the kernel before
  # may still be in TIME_WAIT): +0 sanity, +10 nat, +40 ipv6, +100/+200 held on node2/
  # node3, +300 slow downloads, +400 spread (up to 600 requests)
  SP=$((20000 + 1000 * KIDX))
  KIDX=$((KIDX + 1))
  GN=node1-${k//[^a-zA-Z0-9.]/_}
  echo
  echo "=== kernel $k"
  for n in "${CHECKS[@]}"; do RES[$k,$n]=-; done
  lane_config 1 1 2
  nilb_check || { res "$k" start FAIL "nilb check (host) rejected the lane's config"; return 1; }
  if ! boot_kernel "$k" "$GN" "$SW" tap0 "${NH_MAC_SET[node1]}" \
    "kl.host=node1 kl.ip=${NH_NODE_IP[node1]}/$NH_PREFIX_LEN kl.ip6=${NH_NODE_IP6[node1]}/$NH_PREFIX_LEN6 kl.vip=$NH_VIP kl.vip6=$NH_VIP6 kl.fwd=1 kl.mtu=$NH_NODE_MTU"; then
    BOOTS[$k]=fail
    res "$k" start FAIL "the guest did not boot"
    return 1
  fi
  BOOTS[$k]=$BOOT_S KVERS[$k]=$KVER
  log "$k: booted in ${BOOT_S}s ($KVER, $([[ $KVM_OK == 1 ]] && echo kvm || echo "tcg, -smp $SMP"))"
  export KL_GUEST_SOCK=${GUEST_SOCK[$GN]} KL_GUEST_STATE
  KL_GUEST_STATE=$(state_of node1)
  gput "$GN" "$CFG" >/dev/null || { res "$k" start FAIL "could not copy the config into the guest"; return 1; }
  gx "$GN" 20 "sh /work/guest-lane.sh httpd" >/dev/null || { res "$k" start FAIL "busybox httpd did not start in the guest"; return 1; }
  # connectivity before nilb: the client reaches the guest's own address and every node
  for n in node1 node2 node3; do
    nh_wait_until 10 nh_fg client ping -q -c 1 -W 1 "${NH_NODE_IP[$n]}" >/dev/null ||
      { res "$k" start FAIL "client cannot ping $n (${NH_NODE_IP[$n]})"; return 1; }
  done
  cl burst --host "${NH_NODE_IP[node1]}" --port 80 --count 3 --sport-base "$SP" --max-seconds 20
  [[ $(json - 'd["by_backend"].get("node1",0)' <<<"$OUT") == 3 ]] ||
    { res "$k" start FAIL "HTTP to the guest's own address failed: $OUT"; return 1; }

  # nilb on the host's backends (node2, node3)
  for n in node2 node3; do
    start_nilb_on "$n"
  done
  for n in node2 node3; do
    if ! wait_ready "$n" >"$NH_OUT/ready-$n.log" 2>&1; then
      hosts_ok=0
      why=$(grep -E 'error|failed|disallowed|invalid' "$NH_OUT/nilb-$n.log" | grep -v '^[0-9]*: ' | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-200 | tail -n 3)
      log "$k: nilb on $n (host kernel $(uname -r)) is not ready:"
      sed 's/^/    | /' <<<"$why"
      grep -B3 'END PROG LOAD LOG' "$NH_OUT/nilb-$n.log" | grep -v 'END PROG LOAD LOG\|^--$' | cut -c1-200 | sed 's/^/    | verifier: /' | tail -n 3
    fi
  done
  [[ $HOST_NILB_OK == 0 ]] || HOST_NILB_OK=$hosts_ok
  ((hosts_ok)) || log "$k: the host's backends have no working nilb: GUE to them is not decapsulated (the checks through them fail)"

  # what nilb finds in this kernel (`nilb features`, where the binary has it)
  if gx "$GN" 20 "nilb --help" 2>/dev/null | grep -q '^ *features '; then
    gx "$GN" 120 "nilb features" >"$NH_OUT/features-$k.txt" 2>&1
    FOFF[$k]=$(awk '$2 == "off" { printf "%s%s", s, $1; s = ", " }' "$NH_OUT/features-$k.txt")
    FOBJ[$k]=$(grep -m1 '^BPF object' "$NH_OUT/features-$k.txt" | cut -c1-200)
    log "$k: nilb features: off: ${FOFF[$k]:-none}; ${FOBJ[$k]:-no BPF object line}"
  fi

  # nilb in the guest
  out=$(gx "$GN" 30 "sh /work/guest-lane.sh start '$CFG' '$KL_GUEST_STATE' ${NH_NODE_IP[node1]}")
  log "$k: $out"
  GN_DEAD=0
  local t0=$SECONDS
  nh_wait_until "$GUEST_READY_TIMEOUT" guest_nilb_ready
  FEAT[$k]=$(gx "$GN" 20 "sed 's/\x1b\[[0-9;]*m//g' /var/log/nilb.log | grep -i feature | cut -c1-240")
  if ((GN_DEAD)) || ! guest_nilb_ready; then
    rc=$(gx "$GN" 10 "sh /work/guest-lane.sh exit")
    why=$(gx "$GN" 30 "sh /work/guest-lane.sh why")
    res "$k" start FAIL "nilb $( ((GN_DEAD)) && echo "exited (status ${rc:-?})" || echo "not ready within ${GUEST_READY_TIMEOUT}s") on $KVER"
    sed 's/^/    | /' <<<"$why"
    gx "$GN" 20 "sed 's/\x1b\[[0-9;]*m//g' /var/log/nilb.log" >"$NH_OUT/nilb-node1-$k.log" 2>&1
    [[ -n ${FEAT[$k]} ]] && sed 's/^/    feature: /' <<<"${FEAT[$k]}"
    lane_end_kernel
    return 1
  fi
  # (the kernel says when virtio_net's XDP_TX has too few queues of its own)
  out=$(gx "$GN" 10 "dmesg | grep -c 'locked tx mode'")
  res "$k" start PASS "ready after $((SECONDS - t0)) s; eth0: $(gx "$GN" 10 "sh /work/guest-lane.sh attached"); XDP_TX $([[ $out == 0 ]] && echo "in its own queues (no locked mode in the kernel log)" || echo "LOCKED (kernel log)")"
  out=$(gx "$GN" 10 "sed 's/\x1b\[[0-9;]*m//g' /var/log/nilb.log | grep -E ' WARN ' | grep -v 'kernel feature off' | cut -c1-260")
  [[ -n $out ]] && sed 's/^/    nilb warns: /' <<<"$out"
  [[ -n ${FEAT[$k]} ]] && sed 's/^/    feature: /' <<<"${FEAT[$k]}"
  if ! st_wait node1 60 "$(settled_expr)"; then
    log "$k: node1's table did not settle within 60 s: $WAIT_SUMMARY"
  else
    log "$k: node1 state: $WAIT_SUMMARY"
  fi

  # GUE frames the guest sends, captured on its tap for every check below
  pcap=$NH_OUT/gue-$k.pcap
  PCAP=$pcap
  nh_bg "tcpdump on tap0" "$NH_OUT/tcpdump-$k.log" sw timeout 900 tcpdump -i tap0 -nn -U --immediate-mode -Z root \
    -s 256 -c 50000 -w "$pcap" "udp dst port 19523"
  tpid=$NH_BG_PID
  nh_wait_until 10 grep -qs 'listening on' "$NH_OUT/tcpdump-$k.log" || log "$k: tcpdump did not start"

  # spread
  local resf=$NH_OUT/burst-$k.json
  cl burst --host "$NH_VIP" --port 80 --count "$LANE_REQUESTS" --sport-base $((SP + 400)) --timeout 3 \
    --max-seconds 120 --max-consecutive-failures 10 --out "$resf"
  "$NH_PY" "$HERE/dist.py" --result "$resf" --weights "$(weights_str)" >"$NH_OUT/dist-$k.txt"
  rc=$?
  nums=$(tail -n 1 "$NH_OUT/dist-$k.txt")
  nums=${nums#SUMMARY * }
  if ((rc == 0)); then res "$k" spread PASS "$nums"; else
    res "$k" spread FAIL "$nums"
    echo "    node1's counters: $(guest_counters '.')" | cut -c1-1500
  fi

  # nat
  [[ ${KL_NAT:-1} == 1 ]] && cl burst --host "${NH_NODE_IP[node1]}" --port 8090 --count 20 --sport-base $((SP + 10)) --timeout 3 \
    --max-seconds 60 --max-consecutive-failures 10
  out=$OUT
  if [[ ${KL_NAT:-1} != 1 ]]; then
    res "$k" nat - "(KL_NAT=0: no NAT service)"
  elif [[ $(json - 'd["ok"]' <<<"$out") == 20 && $(json - 'len([b for b, c in d["by_backend"].items() if c])' <<<"$out") -ge 2 ]]; then
    res "$k" nat PASS "20/20 to ${NH_NODE_IP[node1]}:8090, by backend $(json - 'd["by_backend"]' <<<"$out")"
  else
    res "$k" nat FAIL "$out"
  fi

  # ipv6
  resf=$NH_OUT/burst6-$k.json
  cl burst --host "$NH_VIP6" --port 80 --count 30 --sport-base $((SP + 40)) --timeout 3 \
    --max-seconds 60 --max-consecutive-failures 10 --out "$resf"
  "$NH_PY" "$HERE/dist.py" --result "$resf" --weights "$(weights_str)" >"$NH_OUT/dist6-$k.txt"
  rc=$?
  nums=$(tail -n 1 "$NH_OUT/dist6-$k.txt")
  nums=${nums#SUMMARY * }
  if ((rc == 0)); then res "$k" ipv6 PASS "[$NH_VIP6]:80 $nums"; else
    res "$k" ipv6 FAIL "[$NH_VIP6]:80 $nums"
    echo "    node1's counters: $(guest_counters '.')" | cut -c1-1500
  fi

  # held connections across a weight change
  lane_held "$k"

  # the frames
  sleep 0.3
  nh_stop "$tpid" TERM 5
  out=$("$NH_PY" "$KL/gue_check.py" --src "${NH_NODE_IP[node1]}" --vip "$NH_VIP" --vip "$NH_VIP6" \
    --vip "${NH_NODE_IP[node1]}" --client "$NH_CLIENT_IP" --client "$NH_CLIENT_IP6" \
    --dst "${NH_NODE_IP[node2]}" --dst "${NH_NODE_IP[node3]}" "$pcap")
  rc=$?
  if ((rc == 0)) && [[ $(json - 'd["tcp_to_vip"]' <<<"$out") -gt 0 ]]; then
    res "$k" gue PASS "$(json - '"%d frames, all valid: to %s, hops %s, inner IPv4 %d IPv6 %d, second-chance forwards %d, health probes %d (%d with a non-zero outer ID)" % (d["frames"], d["by_dst"], d["hops"], d["inner4"], d["inner6"], d["forwards"], d["probes"], d["probe_nonzero_id"])' <<<"$out")"
  else
    res "$k" gue FAIL "$out"
  fi

  lane_end_kernel
}

lane_held() {
  local k=$1 n ok=1 nums="" t fwd out
  rm -f "$NH_OUT/slow.state" "$NH_OUT/slow.until" "$NH_OUT/slow.json"
  for n in node2 node3; do hold_start "$n" $((SP + 100 * (${n#node} - 1))); done
  # slow downloads from the guest's httpd (no keep-alive there): they live across both changes
  nh_bg "slowget (node1)" "$NH_OUT/slow.log" client timeout 300 "$NH_PY" "$KL/slowget.py" \
    --host "$NH_VIP" --port 80 --path /big --want node1 --want-count 4 --count 60 --sport-base $((SP + 300)) \
    --state "$NH_OUT/slow.state" --until "$NH_OUT/slow.until" --rate-kib 32 --max-seconds 240 --out "$NH_OUT/slow.json"
  SLOW_PID=$NH_BG_PID
  for n in node2 node3; do
    if ! nh_wait_until 120 test -s "$NH_OUT/hold-$n.state"; then
      ok=0
      nums+="$n: the held connections did not open; "
    fi
  done
  nh_wait_until 120 test -s "$NH_OUT/slow.state" || log "$k: the slow downloads from node1 did not start"
  for n in node2 node3; do
    nums+="$n: $(json "$NH_OUT/hold-$n.state" 'd["established"]') held; "
  done
  gx "$GN" 20 "nilb stats --json" >"$NH_OUT/stats-node1-before-$k.json" 2>/dev/null
  lane_reweight "${HOLD_WEIGHTS[@]}" || ok=0
  nums+="$LANE_REWEIGHT; "
  touch "$NH_OUT/hold.go"
  for n in node2 node3; do
    nh_wait_until 90 nh_not_alive "${HOLD_PID[$n]}"
    nh_stop "${HOLD_PID[$n]}" TERM 5 >/dev/null
    if [[ -f $NH_OUT/hold-$n.json ]]; then
      nums+="$n: $(json "$NH_OUT/hold-$n.json" '"%d/%d answered by their backend, %d resets" % (d["ok"], d["connections"], d["resets"])'); "
      [[ $(json "$NH_OUT/hold-$n.json" 'd["ok"] == d["connections"] and d["resets"] == 0') == True ]] || ok=0
    else
      nums+="$n: no result ($(tail -n 1 "$NH_OUT/hold-$n.log")); "
      ok=0
    fi
  done
  gx "$GN" 20 "nilb stats --json" >"$NH_OUT/stats-node1-after-$k.json" 2>/dev/null
  fwd=$("$NH_PY" "$HERE/results.py" delta "$NH_OUT/stats-node1-before-$k.json" "$NH_OUT/stats-node1-after-$k.json" tc_forward 2>/dev/null)
  nums+="node1 (the guest) forwarded ${fwd:-?} packets by second chance (tc_forward)"
  # (8:1:1 moves most of node2's and node3's buckets to node1: the held connections'
  # packets must have gone through its TC)
  [[ ${fwd:-0} =~ ^[0-9]+$ && $fwd -gt 0 ]] || ok=0
  if ((ok)); then res "$k" held PASS "$nums"; else res "$k" held FAIL "$nums"; fi

  # prev: the guest as the previous owner: node1 loses most of its buckets while the slow
  # downloads run; node2/node3 (first hops now) send their packets on to the guest
  ok=1 nums="node1: $(json "$NH_OUT/slow.state" 'd["kept"]' 2>/dev/null || echo 0) downloads; "
  lane_reweight "${PREV_WEIGHTS[@]}" || ok=0
  nums+="$LANE_REWEIGHT; "
  touch "$NH_OUT/slow.until"
  nh_wait_until 120 nh_not_alive "$SLOW_PID"
  nh_stop "$SLOW_PID" TERM 5 >/dev/null
  out=$(tail -n 1 "$NH_OUT/slow.log")
  if [[ $(json - 'd["connections"] == 4 and d["ok"] == 4 and d["resets"] == 0' <<<"$out") == True ]]; then
    nums+="$(json - '"%d/%d downloads of 4 MiB complete, %d resets, %.0f s" % (d["ok"], d["connections"], d["resets"], d["seconds"])' <<<"$out")"
  else
    nums+="downloads: $out"
    ok=0
  fi
  # the frames node2 and node3 sent on to the guest (the capture on tap0 is still running;
  # tcpdump -U has written them): valid GUE with the next hop index moved on
  local src f=0 g
  sleep 0.3
  for src in "${NH_NODE_IP[node2]}" "${NH_NODE_IP[node3]}"; do
    g=$("$NH_PY" "$KL/gue_check.py" --src "$src" --vip "$NH_VIP" --vip "$NH_VIP6" --vip "${NH_NODE_IP[node1]}" \
      --client "$NH_CLIENT_IP" --client "$NH_CLIENT_IP6" --dst "${NH_NODE_IP[node1]}" "$PCAP")
    if [[ $(json - 'd["bad"]' <<<"$g") != 0 ]]; then
      nums+="; bad GUE from $src: $(json - 'd["errors"]' <<<"$g")"
      ok=0
    fi
    f=$((f + $(json - 'd["forwards"]' <<<"$g" || echo 0)))
  done
  nums+="; second-chance forwards to the guest seen on tap0: $f"
  for n in node2 node3; do
    nums+="; $n: $(counters_matching "$n" 'forward|second_chance|unknown|drop' | cut -c1-300)"
  done
  ((f > 0)) || ok=0
  if ((ok)); then res "$k" prev PASS "$nums"; else res "$k" prev FAIL "$nums"; fi
}

# lane_reweight W1 W2 W3: the config with these weights into the guest, SIGHUP to every
# nilb, wait until node1 settles on them; LANE_REWEIGHT says how it went
lane_reweight() {
  local n t
  lane_config "$@"
  if ! gput "$GN" "$CFG" >/dev/null || ! gx "$GN" 10 "sh /work/guest-lane.sh hup" >/dev/null; then
    LANE_REWEIGHT="could not give the guest's nilb weights $(weights_ratio)"
    return 1
  fi
  for n in node2 node3; do [[ -n ${NILB_PID[$n]:-} ]] && nh_alive "${NILB_PID[$n]}" && kill -HUP "${NILB_PID[$n]}"; done
  t=$SECONDS
  if st_wait node1 90 "$(settled_expr)"; then
    LANE_REWEIGHT="weights $(weights_ratio) settled in $((SECONDS - t)) s"
  else
    LANE_REWEIGHT="weights $(weights_ratio) did not settle within 90 s ($WAIT_SUMMARY)"
    return 1
  fi
}

# lane_end_kernel: stop nilb in the guest (the stop check), the host's nilbs, the guest
lane_end_kernel() {
  local out n
  if gx "$GN" 10 "sh /work/guest-lane.sh alive" >/dev/null 2>&1; then
    out=$(gx "$GN" 40 "sh /work/guest-lane.sh stop 20; sh /work/guest-lane.sh attached")
    if grep -q '^exit 0$' <<<"$out" && grep -q 'xdp: none; tc ingress: 0 lines' <<<"$out"; then
      res "$K" stop PASS "$(tr '\n' ' ' <<<"$out")"
    else
      res "$K" stop FAIL "$(tr '\n' ' ' <<<"$out")"
    fi
    gx "$GN" 20 "sed 's/\x1b\[[0-9;]*m//g' /var/log/nilb.log" >"$NH_OUT/nilb-node1-$K.log" 2>&1
  elif [[ ${RES[$K,start]:-} == PASS ]]; then
    res "$K" stop FAIL "nilb exited during the checks (status $(gx "$GN" 10 "sh /work/guest-lane.sh exit"))"
    gx "$GN" 30 "sh /work/guest-lane.sh why" | sed 's/^/    | /'
    gx "$GN" 20 "sed 's/\x1b\[[0-9;]*m//g' /var/log/nilb.log" >"$NH_OUT/nilb-node1-$K.log" 2>&1
  fi
  for n in node2 node3; do
    if [[ -n ${NILB_PID[$n]:-} ]]; then
      nh_stop "${NILB_PID[$n]}" TERM 15
      unset "NILB_PID[$n]"
      RETIRED_LOGS=$((RETIRED_LOGS + 1))
      retire_log "$n" "$K"
    fi
  done
  guest_stop "$GN"
  ip -n "$SW" link del tap0 2>/dev/null
}

summary() {
  local k c line
  echo
  echo "=== kernel lane summary ($((SECONDS - LANE_T0)) s; $([[ $KVM_OK == 1 ]] && echo kvm || echo "tcg, -smp $SMP"); host backends: nilb on $(uname -r)$([[ $HOST_NILB_OK == 0 ]] && echo ", NOT loading"))"
  line=$(printf '%-8s %-26s %-7s' kernel version boot_s)
  for c in "${CHECKS[@]}"; do line+=$(printf ' %-6s' "$c"); done
  echo "$line"
  for k in "${KERNELS[@]}"; do
    line=$(printf '%-8s %-26s %-7s' "$k" "${KVERS[$k]:-?}" "${BOOTS[$k]:-?}")
    for c in "${CHECKS[@]}"; do line+=$(printf ' %-6s' "${RES[$k,$c]:--}"); done
    if [[ " ${ALLOW_FAIL[*]} " == *" $k "* ]]; then
      if [[ -n ${KFAILED[$k]:-} ]]; then line+="  XFAIL (--allow-fail)"; else line+="  XPASS (--allow-fail $k no longer needed)"; fi
    fi
    echo "$line"
  done
  for k in "${KERNELS[@]}"; do
    echo "$k features:"
    if [[ -n ${FOFF[$k]+set} ]]; then
      echo "  off (nilb features): ${FOFF[$k]:-none}"
      echo "  ${FOBJ[$k]:-(no BPF object line)}"
    fi
    if [[ -n ${FEAT[$k]:-} ]]; then
      sed 's/^/  nilb run: /' <<<"${FEAT[$k]}"
    else
      echo "  nilb run: no start-up line names a feature"
    fi
  done
}

LANE_T0=$SECONDS
log "kernels: ${KERNELS[*]}; nilb $NILB; ${LANE_REQUESTS} requests per spread check"
CFG=$NH_OUT/nilb.yaml
LANE_PUTS=("$KL/guest-lane.sh")
# the host's nilbs run from a copy (a rebuild during the lane cannot change them)
cp "$NILB" "$NH_OUT/nilb" || exit 1
export KL_HOST_NILB=$NH_OUT/nilb
NILB=$NH_OUT/nilb
export NH_NILB=$KL/nilb-via-guest NH_PY
lane_topology || { NH_KEEP_OUT=1; log "could not build the topology (see $NH_OUT/setup.log)"; exit 1; }
log "topology: namespaces ${NH_CREATED_NS[*]}"
for K in "${KERNELS[@]}"; do
  lane_kernel "$K"
done
summary
if [[ $HOST_NILB_OK == 0 ]]; then
  echo "kernel-lane: nilb did not start on the host's backends ($(uname -r)): the checks through node2/node3 cannot pass"
  LANE_FAILED=1
fi
npass=0 nfail=0
for k in "${KERNELS[@]}"; do
  for c in "${CHECKS[@]}"; do
    case ${RES[$k,$c]:-} in
      PASS) npass=$((npass + 1)) ;;
      FAIL | "") nfail=$((nfail + 1)) ;;
    esac
  done
done
echo "kernel-lane: $npass passed, $nfail failed"
if ((LANE_FAILED)); then
  NH_KEEP_OUT=1
  echo "kernel-lane: FAILED (logs kept in $NH_OUT)"
  exit 1
fi
xf=""
for k in "${!KFAILED[@]}"; do xf+=" $k"; done
echo "kernel-lane: all checks passed${xf:+ (failures allowed by --allow-fail on:$xf)}"
