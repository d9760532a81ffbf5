#!/bin/bash
# grids.sh BIN TAG [deadline-grid.py args]: the 2 RTT grid at 1/10/100 kpps and one-way
# delays 5/25/300 ms for one binary; writes grids/TAG-RATE-DELAY.json.
# Run from the repository root, e.g.
#   docs/figures/single-answers-2026-11-29/grids.sh target/release/hirt after
#   docs/figures/single-answers-2026-11-29/grids.sh target/release/hirt w200-after --window 200 --answer-reach grown
#   docs/figures/single-answers-2026-11-29/grids.sh target/release/hirt so100-after --seed-offset 100
set -e
BIN=$1; TAG=$2; shift 2
OUT=$(dirname "$0")/grids
for r in 1000 10000 100000; do for d in 5ms 25ms 300ms; do
  python3 scripts/deadline-grid.py $r $d --hirt "$BIN" --out "$OUT/$TAG-$r-$d.json" "$@" | sed "s/^/$TAG /"
done; done
