#!/bin/bash
# mbx.sh BIN TAG SEED [LAB ARGS...]: one 1 MB x 16 lab run (without FEC, then with it) into TAG-sSEED.json
bin=$1; tag=$2; s=$3; shift 3
$bin lab --profile starlink --workload http --size 1M --connections 16 --duration 40s --seed "$s" \
    --json --quiet "$@" > "$tag-s$s.json" 2> "$tag-s$s.err"
