#!/bin/bash
# run.sh BIN TAG SEED WORKLOAD-ARGS... -- TUNNEL-ARGS
bin=$1; tag=$2; seed=$3; shift 3
w=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do w+=("$1"); shift; done; shift
ta="$*"

if [ -n "$ta" ]; then
$bin lab --profile starlink --seed $seed --fec on --json --quiet "${w[@]}" --tunnel-args "$ta" > $tag-s$seed.json 2>$tag-s$seed.err
else
$bin lab --profile starlink --seed $seed --fec on --json --quiet "${w[@]}" > $tag-s$seed.json 2>$tag-s$seed.err
fi
d=$(ls -td hirt-results/*/ | head -1)
cp $(ls $d/*-fec-ms.txt | grep -v no-fec) $tag-s$seed-ms.txt
cp $d/*hirt-status.json $tag-s$seed-status.json
python3 - $tag $seed <<'PY'
import json,sys
tag,seed=sys.argv[1:]
d=json.load(open(f'{tag}-s{seed}.json'))['summary']; fs=d['details']['fec_stats']
v=sorted(float(x) for x in open(f'{tag}-s{seed}-ms.txt').read().split()); n=len(v); q=lambda p: v[min(n-1,int(p*n))]
st=json.load(open(f'{tag}-s{seed}-status.json'))
per=[]
for e in st:
    for s in e['status']['status']['streams']:
        per.append('%d/%d(t%d)'%(s['repairs_sent'],s['enc_packets_in'],s['repairs_timer']))
print(f'{tag} s{seed} n={n} p50 {q(.5):.1f} p90 {q(.9):.1f} p99 {d["fec_p99_ms"]:.1f} >56 {100*sum(x>56 for x in v)/n:.2f}% >70 {100*sum(x>70 for x in v)/n:.2f}% ovh {100*fs["overhead"]:.1f}% bytes {100*fs.get("repair_bytes",0)/max(1,fs.get("source_bytes",1)):.1f}% rec {fs["recovered"]} unrec {fs["unrecoverable"]} held {fs["held"]} rdp99 {fs["recovery_delay_p99_ms"]} ', ' '.join(per))
PY
