#!/bin/sh
# guest-lane.sh - the guest's side of the kernel lane's traffic test (busybox sh).
# scripts/kernel-lane.sh puts it into the guest's /work and runs it through the
# control channel:
#
#   sh guest-lane.sh httpd                 busybox httpd on :80 and :8091 (every address,
#                                          IPv4 and IPv6), body "node1\n", /healthz "ok",
#                                          /big "node1\n" and 4 MiB (slowget.py)
#   sh guest-lane.sh start CONFIG STATE ADDR   nilb run in the background (log /var/log/nilb.log,
#                                          pid /run/nilb.pid)
#   sh guest-lane.sh alive                 exit 0 while that nilb runs
#   sh guest-lane.sh exit                  its exit status, once it exited
#   sh guest-lane.sh hup                   SIGHUP to it
#   sh guest-lane.sh stop [SECONDS]        SIGTERM, wait (bounded); prints "exit N" (N 255: killed)
#   sh guest-lane.sh why                   why it failed: nilb's error lines and the end of the
#                                          verifier log (the refused instruction and its reason)
#   sh guest-lane.sh attached              what is attached to eth0 (XDP, tc ingress)
#   sh guest-lane.sh put FILE B64          write FILE from base64
# the real ip and tc, not busybox's applets (see /init)
# shellcheck source=/dev/null
. /etc/kl-profile
LOG=/var/log/nilb.log
PIDF=/run/nilb.pid
EXITF=/run/nilb.exit
name=${KL_NAME:-node1}

case $1 in
  httpd)
    mkdir -p /www
    echo "$name" >/www/index.html
    echo ok >/www/healthz
    # a long download for the held connections on node1 (slowget.py): the name, then 4 MiB
    { echo "$name"; dd if=/dev/zero bs=4096 count=1024 2>/dev/null; } >/www/big
    httpd -p 80 -h /www || exit 1
    httpd -p 8091 -h /www || exit 1
    ;;
  start)
    cfg=$2 st=$3 addr=$4
    mkdir -p "$(dirname "$st")"
    rm -f "$st" "$PIDF" "$EXITF"
    # a subshell stays nilb's parent and records its exit status
    (
      /usr/local/bin/nilb run --config "$cfg" --interface eth0 --node-address "$addr" --state-file "$st" >"$LOG" 2>&1 &
      echo $! >"$PIDF"
      wait $!
      echo $? >"$EXITF"
    ) </dev/null >/dev/null 2>&1 &
    i=0
    while [ ! -s "$PIDF" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    echo "started nilb (pid $(cat "$PIDF"))"
    ;;
  alive)
    [ -s "$PIDF" ] && [ ! -s "$EXITF" ]
    ;;
  exit)
    cat "$EXITF" 2>/dev/null
    ;;
  hup)
    kill -HUP "$(cat "$PIDF")"
    ;;
  stop)
    pid=$(cat "$PIDF" 2>/dev/null) || { echo "exit none"; exit 1; }
    kill -TERM "$pid" 2>/dev/null
    i=0
    while [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && [ $i -lt "$((${2:-15} * 10))" ]; do
      sleep 0.1
      i=$((i + 1))
    done
    if [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then
      kill -KILL "$pid"
      echo "exit 255"
    else
      i=0
      while [ ! -s "$EXITF" ] && [ $i -lt 20 ]; do sleep 0.1; i=$((i + 1)); done
      echo "exit $(cat "$EXITF" 2>/dev/null || echo unknown)"
    fi
    rm -f "$PIDF"
    ;;
  why)
    sed 's/\x1b\[[0-9;]*m//g' "$LOG" >/tmp/nilb.plain
    # nilb's own error lines and libbpf's summary lines
    grep -E 'error|failed|not found|refus|ERROR' /tmp/nilb.plain | grep -v '^[0-9]*: ' | cut -c1-300 | tail -n 8
    # the verifier's verdict: the last lines of each program's load log
    awk '/BEGIN PROG LOAD LOG/ { n = 0; inlog = 1; prog = $0; sub(/.*prog /, "", prog); sub(/:.*/, "", prog); next }
         /END PROG LOAD LOG/ { print "verifier on " prog " (last lines of its log):"
                               for (i = (n > 4 ? n - 3 : 1); i <= n; i++) print "  " substr(a[i], 1, 300)
                               inlog = 0; next }
         inlog && NF { a[++n] = $0 }' /tmp/nilb.plain | tail -n 15
    ;;
  attached)
    xdp=$(ip -d link show dev eth0 | grep -o 'prog/xdp[a-z]* id [0-9]*' | head -n 1)
    echo "xdp: ${xdp:-none}; tc ingress: $(tc filter show dev eth0 ingress 2>/dev/null | grep -c .) lines"
    ;;
  put)
    mkdir -p "$(dirname "$2")"
    printf '%s\n' "$3" | base64 -d >"$2.tmp" && mv -f "$2.tmp" "$2"
    ;;
  *)
    echo "guest-lane.sh: unknown command $1" >&2
    exit 2
    ;;
esac
