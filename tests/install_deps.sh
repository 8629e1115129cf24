#!/usr/bin/env bash
# Installs what the tests need outside the Python venv, from Debian's packages:
#   redis-server  the store tests start one on a free loopback port (tests/redis_server.py)
#   redis-cli     joins three of them into a Redis Cluster (tests/redis_cluster.py); Debian's
#                 redis-tools, which redis-server depends on
#   prometheus    the dashboard test starts one scraping a gateway (tests/prometheus_server.py)
#   nginx         the rig runs one in front of two gateways (deploy/rig/), from a config of its
#                 own in a temporary directory: the system's nginx service is never used
#   ss            reads a listening socket's accept-queue depth (tests/server/test_listen_backlog.py)
#   tinyproxy     the egress tests start one as the forward proxy in front of fake upstreams
#                 (tests/upstream/test_egress_*.py), from a config in a temporary directory
#   initdb        with postgres and pg_isready, from Debian's postgresql: the request-log tests
#                 make a cluster in a temporary directory and start its server on a free
#                 loopback port (tests/postgres_server.py); the package's own cluster service
#                 is never started. Debian keeps these in /usr/lib/postgresql/<N>/bin, off PATH
#   chromium      the console's browser tests (tests/console/) drive it headless through
#                 Playwright's own driver (in the playwright wheel): no browser is downloaded
#   chromedriver  from chromium-driver, the WebDriver of that same chromium build, for a
#                 WebDriver client (Selenium) against it; never Selenium Manager's downloads
# Idempotent and quick: does nothing when every binary is already on PATH. Never starts the
# system's services. Fails loudly (non-zero, message on stderr) when it cannot install.
set -euo pipefail

NAME="tests/install_deps.sh"
# binary on PATH -> the Debian package that provides it
declare -A PACKAGE_OF=(
  [redis-server]=redis-server [redis-cli]=redis-tools [prometheus]=prometheus [nginx]=nginx
  [ss]=iproute2 [tinyproxy]=tinyproxy [chromium]=chromium [chromedriver]=chromium-driver
)

MISSING=()
for binary in "${!PACKAGE_OF[@]}"; do
  if ! command -v "$binary" >/dev/null 2>&1; then
    MISSING+=("${PACKAGE_OF[$binary]}")
  fi
done
# initdb is off PATH on Debian: look where the package puts it
postgres_installed() {
  command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
if ! postgres_installed; then
  MISSING+=(postgresql)
fi
if [ "${#MISSING[@]}" -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "$NAME: ${MISSING[*]} not on PATH and apt-get is missing; install them by hand" >&2
  exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "$NAME: installing ${MISSING[*]} needs root (or sudo)" >&2
    exit 1
  fi
fi

# The packages' maintainer scripts start their services through invoke-rc.d (or
# deb-systemd-invoke), both of which ask /usr/sbin/policy-rc.d first; exit code 101 means
# "do not start". A policy the machine already has is left as it is.
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\n# written by %s while it installs packages\nexit 101\n' "$NAME" |
    "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod 755 "$POLICY"
  trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi

install_missing() {
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null
}

echo "$NAME: installing ${MISSING[*]} (apt-get)" >&2
if ! install_missing; then
  # A fresh machine may have no package lists yet, or stale ones.
  echo "$NAME: retrying after apt-get update" >&2
  if ! "${SUDO[@]}" apt-get update -qq >/dev/null; then
    echo "$NAME: apt-get update failed" >&2
    exit 1
  fi
  if ! install_missing; then
    echo "$NAME: apt-get install ${MISSING[*]} failed" >&2
    exit 1
  fi
fi
for binary in "${!PACKAGE_OF[@]}"; do
  if ! command -v "$binary" >/dev/null 2>&1; then
    echo "$NAME: $binary still not on PATH after installing ${PACKAGE_OF[$binary]}" >&2
    exit 1
  fi
done
if ! postgres_installed; then
  echo "$NAME: initdb still not found after installing postgresql" >&2
  exit 1
fi
