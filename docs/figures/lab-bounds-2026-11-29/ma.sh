#!/bin/bash
# ma.sh BIN TAG SEED [TUNNEL-ARGS]: one 1 MB x 16 FEC run
bin=$1; tag=$2; s=$3; shift 3
if [ -n "$*" ]; then
$bin lab --profile starlink --workload http --size 1M --connections 16 --duration 40s --seed $s --fec on --json --quiet --tunnel-args "$*" > $tag-s$s.json 2>$tag-s$s.err
else
$bin lab --profile starlink --workload http --size 1M --connections 16 --duration 40s --seed $s --fec on --json --quiet > $tag-s$s.json 2>$tag-s$s.err
fi
d=$(ls -td hirt-results/*/ | head -1); cp $d/*hirt-status.json $tag-s$s-status.json
python3 - $tag $s <<'PY'
import json,sys
tag,s=sys.argv[1:]
d=json.load(open(f'{tag}-s{s}.json'))['summary'];x=d['details'];fs=x['fec_stats'];f=x['fec']
st=json.load(open(f'{tag}-s{s}-status.json'))
aqm=sum(t.get('aqm_drops',0) for e in st for t in e['status']['status']['streams'])
print(tag,s,'fec p50 %.0f p99 %.0f n %d gp %.1f'%(f['p50_ms'],f['p99_ms'],f['requests'],f['goodput_mbps']),'| qd %d ovh %.1f%% bytes %.1f%% unrec %d aqm %d'%(x['fec_link']['queue_drops'],100*fs['overhead'],100*fs['repair_bytes']/fs['source_bytes'],fs['unrecoverable'],aqm))
PY
