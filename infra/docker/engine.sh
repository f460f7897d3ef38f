#!/usr/bin/env bash
# A local Docker engine for a machine that reaches Debian's packages but no image
# registry and must keep test traffic on the loopback: Debian's docker.io, started with
# no bridge and no firewall rules, so containers run with `--network host` only.
#   infra/docker/engine.sh up       # install docker.io if missing, start dockerd, wait
#   infra/docker/engine.sh down     # stop the dockerd this script started
#   infra/docker/engine.sh status   # exit 0 when an engine answers on the socket
# An engine already answering on the socket (Docker Desktop, a system service) is used
# as it is and never stopped by `down`. Needs root (dockerd does).
set -euo pipefail

state_dir=${POS_STATE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/.state}/docker
pid_file=$state_dir/dockerd.pid
log_file=$state_dir/dockerd.log
socket=/var/run/docker.sock

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

started_here() { [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }

up() {
  if answers; then
    echo "engine: Docker $(docker version --format '{{.Server.Version}}') answers on $socket"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "engine: no Docker engine answers on $socket, and starting one needs root" >&2
    exit 1
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "engine: installing Debian's docker.io ..." >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  fi
  mkdir -p "$state_dir"
  # No bridge, no iptables/NAT, no forwarding: nothing leaves the host's own
  # interfaces, and containers share the host's network namespace (host networking).
  setsid dockerd --host "unix://$socket" --iptables=false --ip6tables=false \
    --bridge=none --ip-forward=false --ip-masq=false >"$log_file" 2>&1 </dev/null &
  echo $! >"$pid_file"
  for _ in $(seq 1 120); do
    if answers; then
      echo "engine: dockerd $(docker version --format '{{.Server.Version}}') started (log: $log_file)"
      return 0
    fi
    kill -0 "$(cat "$pid_file")" 2>/dev/null || break
    sleep 0.5
  done
  echo "engine: dockerd did not answer; its log:" >&2
  tail -20 "$log_file" >&2
  exit 1
}

down() {
  if ! started_here; then
    rm -f "$pid_file"
    echo "engine: no dockerd started by this script is running"
    return 0
  fi
  local pid
  pid=$(cat "$pid_file")
  kill -TERM "$pid"
  # dockerd stops its containers first (up to their stop timeouts), then containerd.
  for _ in $(seq 1 240); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pid_file"; echo "engine: stopped"; return 0; }
    sleep 0.5
  done
  echo "engine: dockerd (pid $pid) did not stop within 120 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pid_file"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) answers ;;
  -h|--help|"")
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    [ -n "${1:-}" ] ;;
  *) echo "engine: unknown command '$1' (up, down, status)" >&2; exit 2 ;;
esac
