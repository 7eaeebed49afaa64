#!/usr/bin/env bash
# Issue 27's proof that the suite passes on a busy machine: ROUNDS times, `CI=true bash .ci/run` on a fresh clone
# of HEAD while a second fresh clone runs `CI=true make test` beside it; prints each round's tails.
#   bash bench/busy_machine.sh [ROUNDS]        (about 25-30 minutes a round on 2 cores)
# Start it as you like (a terminal, nohup … &): the suite restores SIGINT itself (tests/conftest.py).
set -u
rounds=${1:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kit-busy-XXXXXX")
git clone -q "$here" "$work/a" && git clone -q "$here" "$work/b"
echo "commit $(git -C "$work/a" log --oneline -1)"
for d in "$work/a" "$work/b"; do (cd "$d" && make install e2e-tools-if-reachable >/dev/null 2>&1); done
passed=0
for round in $(seq 1 "$rounds"); do
  echo "=== round $round $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd "$work/b" && CI=true make test >"$work/b-$round.log" 2>&1; echo "rc $?" >>"$work/b-$round.log") &
  beside=$!
  (cd "$work/a" && CI=true bash .ci/run >"$work/a-$round.log" 2>&1; echo "rc $?" >>"$work/a-$round.log")
  wait "$beside"
  for side in a b; do echo "--- $side"; grep -E "passed|failed|^FAILED|^ERROR|^rc " "$work/$side-$round.log" | tail -8; done
  grep -q "^rc 0$" "$work/a-$round.log" && passed=$((passed + 1))
done
echo "=== $passed of $rounds rounds passed (logs in $work)"
