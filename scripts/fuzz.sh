#!/usr/bin/env bash
# Runs every fuzz test of the module (func FuzzXxx in a _test.go file) for
# FUZZTIME each (default 10s): `make fuzz`, or `make fuzz FUZZTIME=10m` for a
# longer hunt, or one test: scripts/fuzz.sh ./bootstrap FuzzParse.
# A crasher is written to the package's testdata/fuzz/<FuzzName>/ and then
# runs with every `go test` as a regression test: commit it with the fix.
# The fuzz tests that need no database run without one; go test's -fuzz
# takes one package and one test at a time, hence the loop.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
if [ $# -eq 2 ]; then
  targets=("$1:$2")
else
  targets=()
  while IFS=: read -r file _ line; do
    name="$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$line")"
    targets+=("./$(dirname "$file"):$name")
  done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | sort)
fi
failed=0
for t in "${targets[@]}"; do
  pkg="${t%%:*}"; name="${t##*:}"
  echo "== $pkg $name ($fuzztime)"
  if ! go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime"; then
    failed=1
  fi
done
exit "$failed"
