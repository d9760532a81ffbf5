#!/usr/bin/env bash
# The project's test command (README): unit, property, known-answer, simulation and namespace
# end-to-end tests for the whole workspace, plus a short run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

# Short fuzz smoke runs (needs nightly + cargo-fuzz; skipped with a note when absent).
if [ "${HIRT_SKIP_FUZZ:-0}" != 1 ] && command -v cargo-fuzz >/dev/null 2>&1 && [ -d fuzz ] \
    && rustup toolchain list | grep -q nightly; then
    for target in $(cargo +nightly fuzz list 2>/dev/null); do
        echo "fuzz: $target (${HIRT_FUZZ_SECONDS:-15}s)"
        # New inputs go to a scratch dir; the committed seed corpus is only read.
        scratch="target/fuzz-corpus/$target"
        mkdir -p "$scratch" "fuzz/corpus/$target"
        cargo +nightly fuzz run "$target" "$scratch" "fuzz/corpus/$target" -- \
            -max_total_time="${HIRT_FUZZ_SECONDS:-15}" \
            -rss_limit_mb=4096 >"target/fuzz-$target.log" 2>&1 \
            || { tail -n 40 "target/fuzz-$target.log"; exit 1; }
    done
else
    echo "fuzz: skipped (cargo-fuzz or nightly not installed)"
fi

# The lab and dataplane end-to-end tests start the real `hirt` binary in namespaces.
cargo build --release -p hirt-cli
cargo test --workspace --release
