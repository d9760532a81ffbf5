#!/bin/bash
# bulk.sh BIN TAG [TUNNEL-ARGS]: the wan1 bulk goodput, lossless / no FEC / FEC
bin=$1; tag=$2; shift 2
if [ -n "$*" ]; then
$bin lab --profile wan1 --workload bulk --lossless --duration 30s --json --quiet --tunnel-args "$*" > $tag.json 2>$tag.err
else
$bin lab --profile wan1 --workload bulk --lossless --duration 30s --json --quiet > $tag.json 2>$tag.err
fi
python3 - $tag <<'PY'
import json,sys
tag=sys.argv[1]
s=json.load(open(f'{tag}.json'))['summary']
print(tag,'lossless %.2f nofec %.2f fec %.2f Mbit/s: %.1f%% of lossless, ovh %.2f%% unrec %d aqm %s'%(s['lossless_goodput_mbps'],s['baseline_goodput_mbps'],s['fec_goodput_mbps'],100*s['fec_goodput_mbps']/s['lossless_goodput_mbps'],100*s['overhead'],s['unrecoverable'],s.get('aqm_drops','-')))
PY
