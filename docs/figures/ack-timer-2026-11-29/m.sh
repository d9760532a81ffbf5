#!/bin/bash
# m.sh TAG BIN SEED: one 1 MB x 16 FEC run
tag=$1; bin=$2; s=$3

$bin lab --profile starlink --workload http --size 1M --connections 16 --duration 40s --seed $s --fec on --json --quiet > $tag-s$s.json 2>$tag-s$s.err
python3 - $tag $s <<'PY'
import json,sys
tag,s=sys.argv[1:]
d=json.load(open(f'{tag}-s{s}.json'))['summary'];fs=d['details']['fec_stats']
print(tag,s,'p50 %.0f p99 %.0f'%(d['fec_p50_ms'],d['fec_p99_ms']),'req',d['details']['fec']['requests'],'gp %.1f'%d['details']['fec']['goodput_mbps'],'qd',d['details']['fec_link']['queue_drops'],'ovh %.1f%%'%(100*fs['overhead']),'held',fs['held'],'skip',fs['order_skipped'],'hopeless',fs.get('order_hopeless','-'),'unrec',fs['unrecoverable'],'rec',fs['recovered'])
PY
