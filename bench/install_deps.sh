#!/usr/bin/env bash
# Installs what `make bench` needs outside the Python venv: wrk, the C load generator
# (from Debian's packages). Idempotent: does nothing when wrk is already on PATH.
# Fails loudly (non-zero, message on stderr) when it cannot install it.
set -euo pipefail

if command -v wrk >/dev/null 2>&1; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "bench/install_deps.sh: wrk is not on PATH and apt-get is missing; install wrk by hand" >&2
  exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "bench/install_deps.sh: installing wrk needs root (or sudo)" >&2
    exit 1
  fi
fi

echo "bench/install_deps.sh: installing wrk (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update -qq >/dev/null; then
  echo "bench/install_deps.sh: apt-get update failed" >&2
  exit 1
fi
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends wrk >/dev/null; then
  echo "bench/install_deps.sh: apt-get install wrk failed" >&2
  exit 1
fi
if ! command -v wrk >/dev/null 2>&1; then
  echo "bench/install_deps.sh: wrk still not on PATH after install" >&2
  exit 1
fi
