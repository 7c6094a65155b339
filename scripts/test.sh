#!/usr/bin/env bash
# Brings up what the tests need and runs them:
#   - the PostgreSQL server binaries (installed when missing);
#   - Chromium for the admin page's browser test (installed when missing);
#   - one throwaway PostgreSQL cluster (initdb into a temporary folder, a free
#     loopback port, durability off), stopped and removed when the tests end,
#     whatever their outcome. Each test takes its own schema or database in it.
# Arguments are passed to `go test` (default: ./...).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-postgres.sh
scripts/install-chromium.sh

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

"${as_pg[@]}" "$bindir/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-sync --no-instructions >/dev/null
# Durability off for tests; QUEUEBOX_TEST_DURABLE=1 (make bench) keeps the
# server's defaults so that figures mean what they would in production.
settings="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
if [ "${QUEUEBOX_TEST_DURABLE:-}" = "1" ]; then settings=""; fi
port=""
for _ in 1 2 3 4 5; do
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo $((20000 + RANDOM % 20000)))"
  if "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -w -t 60 -l "$dir/server.log" \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 $settings" \
      start >/dev/null; then
    break
  fi
  port=""
done
[ -n "$port" ] || { echo "error: the test PostgreSQL did not start:" >&2; cat "$dir/server.log" >&2; exit 1; }
export QUEUEBOX_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
echo "test PostgreSQL on port $port ($dir)" >&2

if [ $# -eq 0 ]; then set -- ./...; fi
go test "$@"
