#!/usr/bin/env bash
# The project's test command (README). Installs what the tests need (scripts/setup.sh), then:
# formatting and lint checks, the committed BPF objects against a rebuild from their C sources,
# a short run of every fuzz target, and unit, property, known-answer, simulation and namespace
# end-to-end tests for the whole workspace.
#
# Root is needed to install packages and for the namespace tests; without it those tests report
# themselves as ignored. With CI=true a step that cannot run (no cargo-fuzz, no clang) fails the
# run instead of being skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=${CI:-false}
skip() {
    if [ "$ci" = true ]; then
        echo "FAIL: $1 (CI does not skip steps)"
        exit 1
    fi
    echo "SKIPPED: $1"
}

./scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings

if [ -x scripts/bpf-build.sh ]; then
    echo "== BPF objects match their sources"
    if command -v clang >/dev/null 2>&1; then
        ./scripts/bpf-build.sh --check
    else
        skip "BPF object check: clang is not installed"
    fi
fi

if [ "${HIRT_SKIP_FUZZ:-0}" = 1 ]; then
    echo "SKIPPED: fuzz smoke runs (HIRT_SKIP_FUZZ=1)"
elif command -v cargo-fuzz >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
    for target in $(cargo +nightly fuzz list); do
        echo "== fuzz: $target (${HIRT_FUZZ_SECONDS:-15}s)"
        # New inputs go to a scratch dir; the committed seed corpus is only read.
        scratch="target/fuzz-corpus/$target"
        mkdir -p "$scratch" "fuzz/corpus/$target"
        cargo +nightly fuzz run "$target" "$scratch" "fuzz/corpus/$target" -- \
            -max_total_time="${HIRT_FUZZ_SECONDS:-15}" \
            -rss_limit_mb=4096 >"target/fuzz-$target.log" 2>&1 \
            || { tail -n 40 "target/fuzz-$target.log"; exit 1; }
    done
else
    skip "fuzz smoke runs: cargo-fuzz or a nightly toolchain is missing (scripts/setup.sh installs them)"
fi

echo "== cargo test"
# The lab and dataplane end-to-end tests start the real `hirt` binary in namespaces.
cargo build --release -p hirt-cli
cargo test --workspace --release
