#!/usr/bin/env bash
# Side-by-side dataplane benchmark of two hirt binaries: runs `hirt bench dataplane --json` and
# `hirt bench udp --json` with each binary in turn, ROUNDS times (A B A B ...), so that both
# see the same machine state, and prints the table of scripts/ab-table.py (median of each
# figure, ratio B/A).
#
#   sudo scripts/ab-bench.sh OLD_BINARY NEW_BINARY [ROUNDS] [OUT_DIR]
#
# AB_BENCHES (default "dataplane udp") picks the benches; AB_DATAPLANE_ARGS adds flags to
# `hirt bench dataplane` (e.g. "--rounds 3").
set -euo pipefail
a=${1:?usage: ab-bench.sh OLD_BINARY NEW_BINARY [ROUNDS] [OUT_DIR]}
b=${2:?usage: ab-bench.sh OLD_BINARY NEW_BINARY [ROUNDS] [OUT_DIR]}
rounds=${3:-2}
out=${4:-target/ab-bench}
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
    for side in a b; do
        bin=$a
        [ "$side" = b ] && bin=$b
        for bench in ${AB_BENCHES:-dataplane udp}; do
            echo "round $i, $side: $bin bench $bench" >&2
            extra=""
            [ "$bench" = dataplane ] && extra=${AB_DATAPLANE_ARGS:-}
            # shellcheck disable=SC2086
            "$bin" bench "$bench" --json $extra >"$out/$bench-$side-$i.json"
        done
    done
done
python3 "$(dirname "$0")/ab-table.py" "$out"
