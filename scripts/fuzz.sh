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
  # go test -fuzz fails with "context deadline exceeded" and no input when
  # the time runs out while it is still gathering the corpus's baseline
  # coverage on a busy machine; that is not a finding, so such a run is
  # tried once more. A real finding writes its input and fails at once.
  for try in 1 2; do
    out="$(go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" 2>&1)" && { echo "$out"; break; }
    echo "$out"
    if [ "$try" = 1 ] && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
      echo "== $pkg $name: the time ran out before fuzzing began; once more"
      continue
    fi
    failed=1
    break
  done
done
exit "$failed"
