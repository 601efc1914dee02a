#!/usr/bin/env bash
# redis.sh — a redis-server on 127.0.0.1 as a plain process, for vigil's budgets.
#
#   deploy/redis/redis.sh install   install Debian's redis-server when missing (as root)
#   deploy/redis/redis.sh start     install if needed, start, wait for PONG, print the version
#   deploy/redis/redis.sh stop      SIGTERM, wait for a clean exit, SIGKILL after the timeout
#   deploy/redis/redis.sh status    exit 0 when a Redis answers PING on REDIS_PORT, else 1
#   deploy/redis/redis.sh cluster-start   a Redis Cluster of masters on REDIS_CLUSTER_PORTS, each a
#                                   redis-server of its own (REDIS_DIR/<port>), slots assigned
#                                   by redis-cli --cluster create; waits for cluster_state:ok
#   deploy/redis/redis.sh cluster-stop    stop every node of REDIS_CLUSTER_PORTS
#
# Settings (environment): REDIS_PORT (6379), REDIS_DIR (${VIGIL_STATE:-~/.local/state/vigil}/redis),
# REDIS_APPENDONLY (yes|no, default yes), REDIS_START_TIMEOUT (20 s), REDIS_STOP_TIMEOUT (20 s),
# REDIS_CLUSTER (yes: start this one node cluster-enabled), REDIS_CLUSTER_PORTS ("7000 7001 7002"),
# REDIS_CLUSTER_BUS_OFFSET (10000: a node's cluster bus listens on its port plus this).
# This script owns the process and its directory; what vigil stores in Redis is pipeline/redis/.
set -euo pipefail

REDIS_PORT="${REDIS_PORT:-6379}"
VIGIL_STATE="${VIGIL_STATE:-$HOME/.local/state/vigil}"
REDIS_DIR="${REDIS_DIR:-$VIGIL_STATE/redis}"
REDIS_APPENDONLY="${REDIS_APPENDONLY:-yes}"
REDIS_START_TIMEOUT="${REDIS_START_TIMEOUT:-20}"
REDIS_STOP_TIMEOUT="${REDIS_STOP_TIMEOUT:-20}"

pidfile="$REDIS_DIR/redis.pid"
logfile="$REDIS_DIR/redis.log"

die() { echo "redis.sh: $*" >&2; exit 1; }
say() { echo "redis.sh: $*"; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Send one inline command to 127.0.0.1:REDIS_PORT and print the reply's lines (2 s bound).
ask() {
  local line
  exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" || return 1
  printf '%s\r\n' "$1" >&3
  while IFS= read -r -t 2 line <&3; do
    line="${line%$'\r'}"
    echo "$line"
    [[ "$1" == PING ]] && break
    [[ -z "$line" && "$1" == "INFO server" ]] && break
  done
  exec 3<&-
}

answers() { [[ "$(ask PING 2>/dev/null || true)" == "+PONG" ]]; }

server_version() { ask "INFO server" 2>/dev/null | sed -n 's/^redis_version://p' | head -n 1; }

our_pid() {
  [[ -f "$pidfile" ]] || return 0
  local pid; pid="$(cat "$pidfile")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 0
  # Redis sets its process title to "redis-server 127.0.0.1:PORT": ours, on this port.
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "redis-server.*:$REDIS_PORT\b"; then echo "$pid"; fi
}

install() {
  command -v redis-server >/dev/null 2>&1 && return 0
  [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1 ||
    die "redis-server not found: install it (apt-get install redis-server) or put it on PATH"
  say "installing Debian's redis-server"
  # Keep the package's init script from starting a second server on 6379.
  local policy=/usr/sbin/policy-rc.d created=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
    </dev/null >/tmp/vigil-redis-install.log 2>&1 || rc=$?
  [[ -n "$created" ]] && rm -f "$policy"
  [[ $rc -eq 0 ]] || die "apt-get install redis-server failed: see /tmp/vigil-redis-install.log"
}

start() {
  local pid; pid="$(our_pid)"
  if [[ -n "$pid" ]] && answers; then
    say "already running (pid $pid) on 127.0.0.1:$REDIS_PORT: Redis $(server_version)"; return 0
  fi
  case "$REDIS_APPENDONLY" in yes|no) ;; *) die "REDIS_APPENDONLY=$REDIS_APPENDONLY: use yes or no";; esac
  install
  port_busy "$REDIS_PORT" && die "port $REDIS_PORT is in use: stop what listens there or set REDIS_PORT"
  mkdir -p "$REDIS_DIR"
  rm -f "$pidfile"
  local cluster=()
  if [[ "${REDIS_CLUSTER:-no}" == yes ]]; then
    cluster=(--cluster-enabled yes --cluster-config-file "$REDIS_DIR/nodes.conf"
      --cluster-node-timeout 5000 --cluster-port $((REDIS_PORT + ${REDIS_CLUSTER_BUS_OFFSET:-10000})))
  fi
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$REDIS_DIR" --daemonize yes \
    --pidfile "$pidfile" --logfile "$logfile" --appendonly "$REDIS_APPENDONLY" --save "" \
    "${cluster[@]}" </dev/null >/dev/null 2>&1 || { tail -n 5 "$logfile" >&2 || true; die "redis-server did not start: see $logfile"; }
  local deadline=$((SECONDS + REDIS_START_TIMEOUT))
  until answers; do
    if ((SECONDS >= deadline)); then
      tail -n 10 "$logfile" >&2 || true
      die "Redis not up within ${REDIS_START_TIMEOUT}s: see $logfile"
    fi
    sleep 0.2
  done
  say "Redis $(server_version) up on 127.0.0.1:$REDIS_PORT (pid $(cat "$pidfile"), appendonly $REDIS_APPENDONLY, dir $REDIS_DIR)"
}

stop() {
  local pid; pid="$(our_pid)"
  if [[ -z "$pid" ]]; then rm -f "$pidfile"; say "not running (dir $REDIS_DIR)"; return 0; fi
  local deadline=$((SECONDS + REDIS_STOP_TIMEOUT))
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    say "redis-server (pid $pid) did not exit within ${REDIS_STOP_TIMEOUT}s: killed"
  fi
  rm -f "$pidfile"
  say "stopped (pid $pid)"
}

status() {
  if answers; then say "Redis $(server_version) answers on 127.0.0.1:$REDIS_PORT"; return 0; fi
  say "no Redis answers on 127.0.0.1:$REDIS_PORT"
  return 1
}

cluster_ports() {
  [[ -n "${REDIS_CLUSTER_PORTS:-}" ]] || die "set REDIS_CLUSTER_PORTS to the nodes' ports (\"7000 7001 7002\")"
  echo "$REDIS_CLUSTER_PORTS"
}

cluster_start() {
  local port nodes=() base="$REDIS_DIR"
  command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found: it ships with redis-server (apt-get install redis-tools)"
  for port in $(cluster_ports); do
    REDIS_PORT="$port" REDIS_DIR="$base/$port" REDIS_CLUSTER=yes bash "${BASH_SOURCE[0]}" start
    nodes+=("127.0.0.1:$port")
  done
  local first="${nodes[0]#*:}"
  if ! redis-cli -p "$first" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
      </dev/null >"$base/cluster-create.log" 2>&1 || die "redis-cli --cluster create failed: see $base/cluster-create.log"
  fi
  local deadline=$((SECONDS + REDIS_START_TIMEOUT))
  for port in $(cluster_ports); do
    until redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; do
      ((SECONDS < deadline)) || die "the cluster is not ok within ${REDIS_START_TIMEOUT}s (node $port)"
      sleep 0.2
    done
  done
  say "Redis Cluster of ${#nodes[@]} masters up on ${nodes[*]}"
}

cluster_stop() {
  local port base="$REDIS_DIR"
  for port in $(cluster_ports); do
    REDIS_PORT="$port" REDIS_DIR="$base/$port" bash "${BASH_SOURCE[0]}" stop
  done
}

case "${1:-}" in
  install) install;;
  cluster-start) cluster_start;;
  cluster-stop) cluster_stop;;
  start) start;;
  stop) stop;;
  status) status;;
  version) install; redis-server --version;;
  *) die "usage: redis.sh install|start|stop|status|version|cluster-start|cluster-stop";;
esac
