#!/usr/bin/env bash
# A single-node Ceph RADOS Gateway on loopback, for the tests and the bench:
# a production S3 server (Debian 12's Ceph 16.2.15) beside moto, the mock.
#
#   scripts/rgw.sh up <dir> [--owner <pid>] [--memory <bytes>]
#       Brings up one monitor, one OSD that keeps objects in its memory
#       (memstore) and radosgw (beast) on a free port, all under <dir>
#       (which must be new or empty), makes an S3 user, waits until S3
#       answers, and prints one line of JSON:
#       {"endpoint": "http://127.0.0.1:<port>", "accessKeyId": ..., "secretAccessKey": ..., "region": "us-east-1", "dir": <dir>}
#       --owner: stop everything when that process ends (a test runner that
#       dies before its teardown leaves nothing behind).
#       --memory: what the OSD may hold (memstore's device size); default 4G.
#   scripts/rgw.sh down <dir>
#       Stops radosgw, the OSD, then the monitor (each by its pid file, and
#       waits for it), and removes <dir>. Quiet when nothing is running.
#
# No systemd here: every daemon forks into the background with a pid file
# under <dir>, and `ceph`/`radosgw-admin` find the cluster through
# CEPH_CONF=<dir>/ceph.conf. Settings that matter, each measured
# (docs/object-storage.md, "Ceph RGW"): cephx off, so `ms mon client mode =
# crc` (else radosgw loops on authentication and never opens its port);
# `tcp_nodelay=1` on beast (else one small answer in three waits 40 ms for
# Nagle); `paxos propose interval = 0.1` (else every pool radosgw makes at
# its first start costs 1-2 s); `mon data avail crit = 0` (a fullish disk
# would stop the monitor). No ceph-mgr: S3 does not need it.
set -euo pipefail

usage() { echo "usage: scripts/rgw.sh up <dir> [--owner <pid>] [--memory <bytes>] | down <dir>" >&2; exit 2; }
[ $# -ge 2 ] || usage
command=$1 dir=$2
shift 2

# Daemons in the order they stop: the gateway, the OSD, the monitor last.
DAEMONS=(client.rgw osd.0 mon.a)

stop() {
  local dir=$1
  [ -d "$dir" ] || return 0
  if [ -f "$dir/run/reaper.pid" ]; then
    local reaper
    reaper=$(cat "$dir/run/reaper.pid")
    # Only a process that is still this directory's reaper.
    if [ -n "$reaper" ] && grep -qa -- "reap" "/proc/$reaper/cmdline" 2>/dev/null && grep -qa -- "$dir" "/proc/$reaper/cmdline" 2>/dev/null; then
      kill "$reaper" 2>/dev/null || true
    fi
  fi
  for daemon in "${DAEMONS[@]}"; do
    local file="$dir/run/$daemon.pid"
    [ -f "$file" ] || continue
    local pid
    pid=$(cat "$file")
    # Only a process that is still this daemon (its command line names this directory's config).
    if [ -n "$pid" ] && grep -qa -- "$dir/ceph.conf" "/proc/$pid/cmdline" 2>/dev/null; then
      # SIGKILL: the cluster's data is thrown away with <dir>, so there is nothing to flush, and each
      # daemon takes about 2 s to act on a SIGTERM.
      kill -9 "$pid" 2>/dev/null || true
      while running "$pid"; do sleep 0.02; done
    fi
  done
  rm -rf "$dir"
}

# Alive, not a zombie: a killed daemon's ports and memory are free once it is one (init reaps it later).
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The last lines of every log, for a bring-up that failed.
show_logs() {
  for log in "$dir"/log/*.log; do
    [ -f "$log" ] && { echo "--- $log (last lines)" >&2; tail -n 5 "$log" >&2; }
  done
}

# Polls a check until it succeeds (0), the daemon whose pid file is given is gone, or a long while (1, with `why`): a
# guard, not a timing.
wait_for() {
  local what=$1 pidfile=$2; shift 2
  for _ in $(seq 1200); do
    "$@" >/dev/null 2>&1 && return 0
    if [ -f "$pidfile" ] && ! running "$(cat "$pidfile")"; then why="$what exited"; return 1; fi
    sleep 0.1
  done
  why="$what did not become ready"
  return 1
}

# RGW's own answer to an anonymous GET /, not whatever else might listen there.
rgw_answers() {
  curl -sf "http://127.0.0.1:$1/" | grep -q ListAllMyBucketsResult
}

up() {
  local owner="" memory=$((4 * 2 ** 30))
  while [ $# -gt 0 ]; do
    case $1 in
      --owner) owner=$2; shift 2 ;;
      --memory) memory=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  for tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool curl; do
    command -v "$tool" >/dev/null || { echo "rgw: $tool not found: npm run setup installs Ceph (radosgw ceph-mon ceph-osd) and curl" >&2; exit 1; }
  done
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || { echo "rgw: $dir is not empty" >&2; exit 1; }
  dir=$(cd "$dir" && pwd)
  export CEPH_CONF="$dir/ceph.conf"
  # A port found free can be taken before a daemon binds it (other tests run here too): then again, on other ports.
  why=""
  for _ in 1 2 3; do
    if bring_up "$memory"; then
      if [ -n "$owner" ]; then
        # The reaper: when the owner ends without bringing the cluster down, it does. In a session of its own, as
        # the daemons are (they leave the caller's): whatever kills the caller's process group (a test runner's
        # timeout, a stopped bench) would end a reaper left in it, and leave the daemons running. (A background job
        # of a script leads no process group, so setsid runs it as it is: $! is the reaper.)
        setsid bash "${BASH_SOURCE[0]}" reap "$dir" "$owner" </dev/null >/dev/null 2>&1 &
        echo $! >"$dir/run/reaper.pid"
      fi
      printf '{"endpoint": "http://127.0.0.1:%s", "accessKeyId": "%s", "secretAccessKey": "%s", "region": "us-east-1", "dir": "%s"}\n' "$rgw_port" "$access" "$secret" "$dir"
      return 0
    fi
    show_logs
    stop "$dir"
    mkdir -p "$dir"
  done
  echo "rgw: $why" >&2
  rm -rf "$dir"
  exit 1
}

# One bring-up on fresh ports under $dir (CEPH_CONF set): sets rgw_port, access and secret; or `why`, and returns 1.
bring_up() {
  local memory=$1 fsid mon_port uuid
  mkdir -p "$dir/run" "$dir/log" "$dir/mon" "$dir/osd" "$dir/rgw"
  fsid=$(cat /proc/sys/kernel/random/uuid)
  mon_port=$(free_port)
  rgw_port=$(free_port)
  # Everything the daemons write stays under $dir: their logs, and the monitor's cluster and audit logs too.
  cat >"$CEPH_CONF" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
public addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
log to stderr = false
err to stderr = false
mon cluster log file = $dir/log/cluster.log
keyring = $dir/keyring
mon allow pool size one = true
mon allow pool delete = true
mon data avail crit = 0
mon data avail warn = 0
paxos propose interval = 0.1
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = $memory
[mon.a]
mon data = $dir/mon
[osd.0]
osd data = $dir/osd
[client.rgw]
rgw data = $dir/rgw
rgw frontends = beast endpoint=127.0.0.1:$rgw_port tcp_nodelay=1
EOF
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. >/dev/null
  monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon --mkfs -i a --monmap "$dir/monmap" --conf "$CEPH_CONF" >/dev/null 2>&1 || { why="ceph-mon --mkfs failed"; return 1; }
  ceph-mon -i a --conf "$CEPH_CONF" </dev/null >/dev/null 2>&1 || { why="ceph-mon did not start"; return 1; }
  wait_for "the monitor" "$dir/run/mon.a.pid" ceph --conf "$CEPH_CONF" --connect-timeout 5 mon stat || return 1
  uuid=$(cat /proc/sys/kernel/random/uuid)
  ceph --conf "$CEPH_CONF" osd new "$uuid" 0 >/dev/null 2>&1 || { why="ceph osd new failed"; return 1; }
  ceph-osd -i 0 --mkfs --osd-uuid "$uuid" --conf "$CEPH_CONF" >/dev/null 2>&1 || { why="ceph-osd --mkfs failed"; return 1; }
  ceph-osd -i 0 --conf "$CEPH_CONF" </dev/null >/dev/null 2>&1 || { why="ceph-osd did not start"; return 1; }
  wait_for "the OSD" "$dir/run/osd.0.pid" osd_up || return 1
  radosgw -n client.rgw --conf "$CEPH_CONF" </dev/null >/dev/null 2>&1 || { why="radosgw did not start"; return 1; }
  wait_for "radosgw" "$dir/run/client.rgw.pid" rgw_answers "$rgw_port" || return 1
  access=RGW$(head -c 10 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr 'a-f' 'A-F')
  secret=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  radosgw-admin --conf "$CEPH_CONF" user create --uid redirfs --display-name redirfs --access-key "$access" --secret-key "$secret" >/dev/null 2>&1 ||
    { why="radosgw-admin user create failed"; return 1; }
}

osd_up() {
  ceph --conf "$CEPH_CONF" --connect-timeout 5 osd dump --format json | grep -q '"up":1'
}

# Stops the cluster under <dir> once the process <owner> has ended (started by `up --owner`, not for use by hand).
reap() {
  [ $# -eq 1 ] || usage
  trap '' HUP
  while kill -0 "$1" 2>/dev/null; do sleep 1; done
  rm -f "$dir/run/reaper.pid"
  stop "$dir"
}

case $command in
  up) up "$@" ;;
  reap) reap "$@" ;;
  down) stop "$dir" ;;
  *) usage ;;
esac
