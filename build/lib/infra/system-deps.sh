#!/usr/bin/env bash
# Install the system packages the local runtime needs, if missing: OpenJDK 17
# (Kafka, Cassandra and Spark run on it; Cassandra 5.0 refuses newer JDKs) and
# Maven (fetches their jars). Debian/Ubuntu via apt; elsewhere, say what to install.
# Arguments name optional tools whose command and Debian package share a name, needed
# by one target only (e.g. `infra/system-deps.sh chromium` for the screenshots).
set -euo pipefail

need=()
if ! ls /usr/lib/jvm/*17*/bin/java >/dev/null 2>&1 && [ -z "${POS_JAVA_HOME:-}" ]; then
  need+=(openjdk-17-jdk-headless)
fi
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v python3.11 >/dev/null 2>&1 || need+=(python3.11 python3.11-venv)
for tool in "$@"; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
# As root, apt-get directly; otherwise through sudo when there is one (it may ask for
# the password); without either, say what to install.
as_root=()
[ "$(id -u)" = 0 ] || as_root=(sudo)
if command -v apt-get >/dev/null 2>&1 && { [ ${#as_root[@]} -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then
  echo "system-deps: installing ${need[*]} ..." >&2
  ${as_root[@]+"${as_root[@]}"} apt-get update -qq
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "system-deps: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
  exit 1
fi
