#!/usr/bin/env bash
# A fuzz campaign: every cargo-fuzz target (or the ones named) runs for a given time, several at
# once over the cores; then each corpus is minimised (`cargo fuzz cmin`; inputs already
# committed are kept) and left under fuzz/corpus/<target>/ for committing; executions, coverage (libFuzzer's `cov` edges and `ft`
# features), corpus size and crashes per target go into a results file (markdown table).
#
#   scripts/fuzz-campaign.sh [-t SECONDS] [-r RUNS] [-s SANITIZER] [-j JOBS] [-o RESULTS]
#                            [--commit] [TARGET...]
#
#   -t SECONDS  time per target (default 3600)
#   -r RUNS     stop a target after this many executions (whichever of -t and -r comes first)
#   -s SANITIZER  address (default) or none: without AddressSanitizer the targets run 5-15x
#               faster (safe Rust needs it least); long campaigns run both
#   -j JOBS     targets running at once (default: the number of cores)
#   -o RESULTS  results file (default docs/results/fuzz-campaign-<UTC date>.md); appended to
#   --commit    commit the minimised corpora and the results file afterwards
#
# Needs a nightly toolchain and cargo-fuzz (scripts/setup.sh installs both). Crash inputs stay
# in fuzz/artifacts/<target>/; the script exits non-zero when any target crashed. CI keeps its
# short smoke runs; this is for long runs on an idle machine.
set -euo pipefail

secs=3600
runs=-1
sanitizer=address
jobs=$(nproc)
results=""
commit=0
targets=()
while (($#)); do
    case "$1" in
        -t) secs=$2; shift 2 ;;
        -r) runs=$2; shift 2 ;;
        -s) sanitizer=$2; shift 2 ;;
        -j) jobs=$2; shift 2 ;;
        -o) results=$2; shift 2 ;;
        --commit) commit=1; shift ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
results=${results:-$root/docs/results/fuzz-campaign-$(date -u +%F).md}
case "$results" in /*) ;; *) results=$root/$results ;; esac
((${#targets[@]})) || mapfile -t targets < <(cargo +nightly fuzz list)

# Each sanitizer keeps its own build, so switching does not rebuild the other.
target_dir=target
[ "$sanitizer" = address ] || target_dir=target-$sanitizer
echo "building ${#targets[@]} targets (sanitizer: $sanitizer)" >&2
for t in "${targets[@]}"; do
    cargo +nightly fuzz build -O -s "$sanitizer" --target-dir "$target_dir" "$t" >"${TMPDIR:-/tmp}/fuzz-build-$t.log" 2>&1 || { echo "$t: build failed (log: ${TMPDIR:-/tmp}/fuzz-build-$t.log)" >&2; exit 1; }
done
bin_dir=$(dirname "$(find "$target_dir" -path '*/release/*' -type f -name "${targets[0]}" | head -1)")

logs=$(mktemp -d)
run_target() {
    local t=$1
    mkdir -p "corpus/$t" "artifacts/$t"
    local before
    before=$(find "corpus/$t" -type f | wc -l)
    local start=$SECONDS rc=0
    "$bin_dir/$t" "corpus/$t" -max_total_time="$secs" -runs="$runs" -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/" >"$logs/$t.log" 2>&1 || rc=$?
    echo "$t $rc $before $((SECONDS - start))" >"$logs/$t.done"
}
export -f run_target
export bin_dir secs runs logs

echo "running: ${targets[*]} (${secs}s each, $jobs at once)" >&2
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_target {}'

crashed=0
{
    echo
    echo "## Fuzz campaign $(date -u '+%F %H:%M UTC'): ${secs} s per target, $jobs at once, sanitizer $sanitizer"
    echo
    echo "Machine: $(nproc) cores ($(uname -m)), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)."
    echo "Command: \`scripts/fuzz-campaign.sh -t $secs -r $runs -s $sanitizer -j $jobs ${targets[*]}\`"
    echo
    echo "| target | seconds | executions | exec/s | cov (edges) | ft | corpus before | after cmin | crashes |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
} >>"$results"
for t in "${targets[@]}"; do
    read -r _ rc before took <"$logs/$t.done"
    log=$logs/$t.log
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    rate=$(grep -m1 'stat::average_exec_per_sec' "$log" | awk '{print $2}')
    last=$(grep -E '#[0-9]+.*cov: ' "$log" | tail -1)
    cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
    crashes=$(find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' \) | wc -l)
    if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
        crashed=1
        echo "$t: exit $rc, $crashes crash inputs in fuzz/artifacts/$t (log: $log)" >&2
    fi
    # Minimise: keep the smallest set of inputs with the same coverage.
    cargo +nightly fuzz cmin -O -s "$sanitizer" --target-dir "$target_dir" "$t" "corpus/$t" >"$logs/$t.cmin.log" 2>&1 ||
        echo "$t: cmin failed (log: $logs/$t.cmin.log)" >&2
    # Inputs already committed (hand-written seeds among them) stay; cmin trims the new finds.
    git -C "$root" ls-files -d -z -- "fuzz/corpus/$t" | xargs -0 -r git -C "$root" checkout --
    after=$(find "corpus/$t" -type f | wc -l)
    echo "| $t | $took | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | $before | $after | $crashes |" >>"$results"
done
echo "results: $results (logs in $logs)" >&2

if ((commit)); then
    cd "$root"
    git add fuzz/corpus "$results"
    git commit -q -m "fuzz: minimised corpora and results of a ${secs} s campaign" || true
fi
exit "$crashed"
