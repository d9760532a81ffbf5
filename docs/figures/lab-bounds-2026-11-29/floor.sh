#!/bin/bash
# floor.sh BIN TAG SEED WORKLOAD-ARGS...: the run without FEC and the lossless run
bin=$1; tag=$2; seed=$3; shift 3
$bin lab --profile starlink --seed $seed --fec off --lossless --json --quiet "$@" > $tag-s$seed.json 2>$tag-s$seed.err
python3 - $tag $seed <<'PY'
import json,sys
tag,seed=sys.argv[1:]
d=json.load(open(f'{tag}-s{seed}.json'))['summary']['details']
b=d['baseline']; l=d['lossless']
print(f"{tag} s{seed} baseline p50 {b['p50_ms']:.1f} p99 {b['p99_ms']:.1f} n={b['requests']} lossless p50 {l['p50_ms']:.1f} p90 {l['p90_ms']:.1f} p99 {l['p99_ms']:.1f} n={l['requests']} ratio-bound {b['p99_ms']/l['p99_ms']:.2f}")
PY
