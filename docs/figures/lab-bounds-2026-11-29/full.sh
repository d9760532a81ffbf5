#!/bin/bash
# full.sh BIN TAG SEED WORKLOAD-ARGS...: the runs without FEC, with FEC and without loss
bin=$1; tag=$2; seed=$3; shift 3
$bin lab --profile starlink --seed $seed --lossless --json --quiet "$@" > $tag-s$seed.json 2>$tag-s$seed.err
d=$(ls -td hirt-results/*/ | head -1)
mkdir -p ms; for f in $d/*-ms.txt; do cp $f ms/$tag-s$seed-$(basename $f); done
python3 - $tag $seed <<'PY'
import json,sys
tag,seed=sys.argv[1:]
s=json.load(open(f'{tag}-s{seed}.json'))['summary']
print(f"{tag} s{seed} nofec p50 {s['baseline_p50_ms']:.1f} p99 {s['baseline_p99_ms']:.1f} | fec p50 {s['fec_p50_ms']:.1f} p99 {s['fec_p99_ms']:.1f} | lossless p50 {s['lossless_p50_ms']:.1f} p99 {s['lossless_p99_ms']:.1f} | ratio {s['p99_ratio']:.2f} bound {s['p99_ratio_bound']:.2f} | ovh {100*s['overhead']:.1f}% bytes {100*s['overhead_bytes']:.1f}% unrec {s['unrecoverable']}")
PY
