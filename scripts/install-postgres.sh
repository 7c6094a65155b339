#!/usr/bin/env bash
# Installs the PostgreSQL server binaries from the distribution's packages when
# they are missing. Idempotent: does nothing when initdb and postgres exist.
# QueueBox runs its own throwaway clusters from them (it never touches a
# system cluster).
set -euo pipefail

have_server() {
  [ -n "${QUEUEBOX_PG_BINDIR:-}" ] && [ -x "$QUEUEBOX_PG_BINDIR/postgres" ] && return 0
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if have_server; then
  exit 0
fi

echo "PostgreSQL server binaries not found; installing the distribution's package ..." >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get here. Install the PostgreSQL server package (initdb, postgres) with your package manager, or set QUEUEBOX_PG_BINDIR to the folder that holds them." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "error: installing packages needs root; run: apt-get install -y postgresql" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The package "postgresql" pulls the distribution's current major version and
# creates the "postgres" user that the server runs as. Its own cluster is not
# needed; QueueBox never uses it.
$SUDO apt-get install -y -qq postgresql >/dev/null
have_server || { echo "error: the install finished but initdb/postgres are still missing" >&2; exit 1; }
echo "PostgreSQL server installed." >&2
