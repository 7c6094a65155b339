#!/usr/bin/env bash
# Installs RabbitMQ from the distribution's packages when it is missing.
# Idempotent: does nothing when rabbitmq-server is installed. The install does
# not start the server: scripts/test.sh starts it when the tests need it.
set -euo pipefail

have_server() {
  [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || command -v rabbitmq-server >/dev/null 2>&1
}

if have_server; then
  exit 0
fi

echo "RabbitMQ not found; installing the distribution's package ..." >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get here. Install rabbitmq-server with your package manager, or point the tests at a running server with QUEUEBOX_TEST_AMQP_URL=amqp://user:password@host:5672/" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "error: installing packages needs root; run: apt-get install -y rabbitmq-server" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq rabbitmq-server >/dev/null
have_server || { echo "error: the install finished but rabbitmq-server is still missing" >&2; exit 1; }
echo "RabbitMQ installed." >&2
