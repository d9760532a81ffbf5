#!/bin/bash
# calibrate.sh BIN LOSS SEED... : for each seed, the losses the encoder's model of lost answers
# expects outside the deadline (allocation.py) against those the run had (lost - recovered in
# time), at the design point (10 kpps, one-way 25 ms, deadline 2 RTT). BIN: a build with
# spare-debug.patch. Run from the repository root.
BIN=$1; LOSS=$2; shift 2
DIR=$(dirname "$0"); TMP=$(mktemp -d)
for s in "$@"; do
  HIRT_SPARE_DEBUG=1 "$BIN" sim --loss "$LOSS" --scheme ours --deadline 2rtt --packets 100000 \
    --repair-delay off --seed "$s" --rate 10000 --delay 25ms --json 2>"$TMP/$s.log" >"$TMP/$s.json"
  model=$(python3 "$DIR/allocation.py" "$TMP/$s.log" | awk 'NR == 1 {print $NF}')
  python3 -c "import json; r=json.load(open('$TMP/$s.json')); print('seed $s lost', r['lost'], 'model $model', 'observed', r['lost'] - r['recovered_in_time'], 'overhead %.4f' % r['overhead'])"
done
rm -r "$TMP"
