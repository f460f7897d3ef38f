#!/usr/bin/env bash
# A Python 3.11 base image made from Debian packages, for a Docker host that reaches
# Debian's mirror but no image registry (so no `python:3.11-slim-bookworm` from Docker
# Hub). The pipeline image builds on it with `make image PYTHON_IMAGE=<this tag>`.
#   infra/docker/local-base.sh [TAG]     # default: pos-python:3.11-bookworm
# It starts the local engine first if none answers (infra/docker/engine.sh), then:
# mmdebstrap (minbase bookworm + python3, venv, ca-certificates) | docker import.
# The host's apt sources and access settings are carried over, and so are its locally
# added CA certificates (/usr/local/share/ca-certificates): behind a TLS-inspecting
# egress, pip and Maven inside a build fail without them. About 1 minute; a no-op when
# the tag exists (REBUILD=1 forces it).
set -euo pipefail
tag=${1:-pos-python:3.11-bookworm}
case "$tag" in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)

"$here/engine.sh" up >&2
if [ -z "${REBUILD:-}" ] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "local-base: $tag exists (REBUILD=1 rebuilds it)" >&2
  exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "local-base: installing mmdebstrap ..." >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi

# The host's own mirror definition (deb822 or one-line), else Debian's default mirror.
mirror=http://deb.debian.org/debian
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  if [ -s "$f" ] && grep -q '^[^#]' "$f"; then mirror=$f; break; fi
done
# Access settings the host's apt needs to reach that mirror (proxy, date checks of a
# frozen snapshot), written into the image so its own `apt-get` works the same way.
aptopts=()
while IFS= read -r line; do aptopts+=(--aptopt="$line"); done < <(
  apt-config dump | grep -E '^Acquire::((http|https)::Proxy|Check-Valid-Until|Check-Date) ' || true)

started=$(date +%s)
mmdebstrap --variant=minbase --mode=root --format=tar --quiet \
  --include=ca-certificates,python3,python3-venv,python-is-python3 \
  "${aptopts[@]}" \
  --customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share' \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm - "$mirror" \
  | docker import \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["python3"]' \
      --message "Debian bookworm minbase + python3 (infra/docker/local-base.sh)" \
      - "$tag" >/dev/null
echo "local-base: built $tag in $(( $(date +%s) - started )) s: $(docker run --rm --network host "$tag" python --version)" >&2
