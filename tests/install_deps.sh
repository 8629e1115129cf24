#!/usr/bin/env bash
# Installs what the tests need outside the Python venv: redis-server (Debian's package), which
# the store tests start on a free loopback port of their own (tests/redis_server.py).
# Idempotent and quick: does nothing when redis-server is already on PATH. Never starts the
# system's redis service. Fails loudly (non-zero, message on stderr) when it cannot install.
set -euo pipefail

NAME="tests/install_deps.sh"
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "$NAME: redis-server is not on PATH and apt-get is missing; install redis-server by hand" >&2
  exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "$NAME: installing redis-server needs root (or sudo)" >&2
    exit 1
  fi
fi

# The package's maintainer scripts start the service through invoke-rc.d (or
# deb-systemd-invoke), both of which ask /usr/sbin/policy-rc.d first; exit code 101 means
# "do not start". A policy the machine already has is left as it is.
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\n# written by %s while it installs redis-server\nexit 101\n' "$NAME" |
    "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod 755 "$POLICY"
  trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi

install_redis() {
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends redis-server >/dev/null
}

echo "$NAME: installing redis-server (apt-get)" >&2
if ! install_redis; then
  # A fresh machine may have no package lists yet, or stale ones.
  echo "$NAME: retrying after apt-get update" >&2
  if ! "${SUDO[@]}" apt-get update -qq >/dev/null; then
    echo "$NAME: apt-get update failed" >&2
    exit 1
  fi
  if ! install_redis; then
    echo "$NAME: apt-get install redis-server failed" >&2
    exit 1
  fi
fi
if ! command -v redis-server >/dev/null 2>&1; then
  echo "$NAME: redis-server still not on PATH after install" >&2
  exit 1
fi
