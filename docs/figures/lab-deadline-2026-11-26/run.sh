#!/bin/bash
# lab starlink 10 kB HTTP: the lab's tunnel arguments vs deadline auto with repair timers
cd /tmp
for seed in 1 2 3; do
for ta in "" "--deadline auto --repair-delay-ms 5 --repair-retries 1" "--deadline auto --repair-delay-ms 1 --repair-retries 1" "--deadline auto --repair-delay-ms 1 --repair-retries 3"; do
  /work/helpers/low /tmp/hirt-lab-bin lab --profile starlink --workload http --size 10k --json --tunnel-args "$ta" --seed $seed > /dev/null 2>&1
  f=$(ls -td /tmp/hirt-results/*/ | head -1)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]+"summary.json"))["summary"]; print(sys.argv[2], "|", sys.argv[3], "|", " ".join(f"{k}={d.get(k)}" for k in ["baseline_p99_ms","fec_p99_ms","p99_ratio","overhead","unrecoverable"]))' $f "$seed" "${ta:-lab default}"
done; done
