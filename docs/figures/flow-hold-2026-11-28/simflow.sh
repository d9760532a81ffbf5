#!/bin/bash
# usage: simflow.sh LOSS RATE FLOWS EXTRA...
loss=$1; rate=$2; flows=$3; shift 3
for sc in stream flow; do
/work/main/target/release/hirt sim --loss $loss --rate $rate --delay 25ms --packets 300000 --in-order 30ms --flows $flows --in-order-scope $sc "$@" --json 2>/dev/null | python3 -c "
import json,sys; d=json.load(sys.stdin); d=d.get('report',d)
print(f\"$loss $rate flows $flows $sc: lost {d['lost']} recovered {d['recovered_ratio']:.4f} ovh {100*d['overhead']:.1f}% held {d['held']} hold p50 {d['hold_delay_p50_ms']:.2f} p99 {d['hold_delay_p99_ms']:.2f} ms passed {d['order_passed']} flow_reordered {d['flow_reordered']} skipped {d['order_skipped']}\")"
done
