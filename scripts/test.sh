#!/usr/bin/env bash
# Brings up what the tests need and runs them:
#   - the PostgreSQL server binaries (installed when missing);
#   - Chromium for the admin page's browser test (installed when missing);
#   - podman and runc for the container image's test, and systemd-analyze for
#     the systemd unit's (installed when missing: scripts/install-podman.sh);
#   - one throwaway PostgreSQL cluster (initdb into a temporary folder, a free
#     loopback port, durability off), stopped and removed when the tests end,
#     whatever their outcome. Each test takes its own schema or database in it.
#     It runs with wal_level=logical, so that relays can listen for wake-ups,
#     and with room for many replicas' WAL senders and temporary slots.
#   - RabbitMQ (installed when missing), the system server on 127.0.0.1:5672,
#     started when nothing listens there, and left running afterwards like any
#     system service. Tests use it with unique exchange and queue names; the
#     tests that restart a server start a private node of their own.
#     QUEUEBOX_TEST_AMQP_URL points them at another server instead.
#   - a temporary folder for the tests (TMPDIR) inside the cluster's folder:
#     what they write there (the binaries they build, browser profiles,
#     private broker nodes) goes with it, even from a test binary that
#     -timeout killed before its clean-up ran.
#   - NATS and Kafka need nothing here: the tests run them in-process (the
#     NATS server's Go module, franz-go's kfake), and the binary's broker
#     tests run kfake as a small command built from internal/testkafka/kfake.
# Arguments are passed to `go test` (default: ./...).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-postgres.sh
scripts/install-chromium.sh
scripts/install-podman.sh
# The browser test fails, rather than skips, when the browser is missing.
export QUEUEBOX_CHROMIUM="${QUEUEBOX_CHROMIUM:-/usr/bin/chromium}"

bindir="${QUEUEBOX_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)}"
dir="$(mktemp -d /tmp/queuebox-test-XXXXXX)"
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$dir"
  as_pg=(runuser -u postgres --)
fi
cleanup() {
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
mkdir -m 1777 "$dir/tmp"
export TMPDIR="$dir/tmp"

"${as_pg[@]}" "$bindir/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-sync --no-instructions >/dev/null
# Durability off for tests; QUEUEBOX_TEST_DURABLE=1 (make bench) keeps the
# server's defaults so that figures mean what they would in production.
settings="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
if [ "${QUEUEBOX_TEST_DURABLE:-}" = "1" ]; then settings=""; fi
# What internal/pgcluster gives its clusters too (walArgs there).
wal="-c wal_level=logical -c max_wal_senders=64 -c max_replication_slots=64"
port=""
for _ in 1 2 3 4 5; do
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo $((20000 + RANDOM % 20000)))"
  if "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -w -t 60 -l "$dir/server.log" \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 $wal $settings" \
      start >/dev/null; then
    break
  fi
  port=""
done
[ -n "$port" ] || { echo "error: the test PostgreSQL did not start:" >&2; cat "$dir/server.log" >&2; exit 1; }
export QUEUEBOX_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
echo "test PostgreSQL on port $port ($dir)" >&2

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
if [ -z "${QUEUEBOX_TEST_AMQP_URL:-}" ] && ! port_open 127.0.0.1 5672; then
  scripts/install-rabbitmq.sh
  # A second -detached while a server is starting exits quietly; the probe
  # below waits for whichever one gets there.
  echo "starting RabbitMQ (rabbitmq-server -detached) ..." >&2
  if [ "$(id -u)" -eq 0 ]; then rabbitmq-server -detached >/dev/null 2>&1 || true
  else sudo -n rabbitmq-server -detached >/dev/null 2>&1 || true; fi
  for _ in $(seq 1 240); do port_open 127.0.0.1 5672 && break; sleep 0.25; done
  port_open 127.0.0.1 5672 || { echo "error: RabbitMQ did not open 127.0.0.1:5672 within 60 s; see /var/log/rabbitmq/" >&2; exit 1; }
  echo "RabbitMQ on 127.0.0.1:5672" >&2
fi

if [ $# -eq 0 ]; then set -- ./...; fi
go test "$@"
