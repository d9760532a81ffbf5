#!/bin/bash
# mb.sh BIN TAG SEED: one 1 MB x 16 run, without FEC and with it
bin=$1; tag=$2; s=$3
$bin lab --profile starlink --workload http --size 1M --connections 16 --duration 40s --seed $s --json --quiet > $tag-s$s.json 2>$tag-s$s.err
python3 - $tag $s <<'PY'
import json,sys
tag,s=sys.argv[1:]
d=json.load(open(f'{tag}-s{s}.json'))['summary'];x=d['details'];fs=x['fec_stats']
b=x['baseline'];f=x['fec']
print(tag,s,'nofec p50 %.0f p99 %.0f n %d gp %.1f'%(b['p50_ms'],b['p99_ms'],b['requests'],b['goodput_mbps']),'| fec p50 %.0f p99 %.0f n %d gp %.1f'%(f['p50_ms'],f['p99_ms'],f['requests'],f['goodput_mbps']),'| qd %d/%d ovh %.1f%% bytes %.1f%% unrec %d'%(x['baseline_link']['queue_drops'],x['fec_link']['queue_drops'],100*fs['overhead'],100*fs['repair_bytes']/fs['source_bytes'],fs['unrecoverable']))
PY
