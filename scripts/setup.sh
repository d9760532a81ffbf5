#!/usr/bin/env bash
# Installs what hirt's tests, benches and lab need on a fresh Debian 12 machine, and nothing
# when it is all there already. Called by scripts/test.sh; safe to run again.
#
# - Debian packages: iproute2/iputils-ping/nftables/ethtool for the namespace end-to-end tests
#   and benches; clang/llvm/libbpf-dev to rebuild the BPF programs and check the committed
#   objects; tshark to decode our SRH bytes with an independent dissector; libisal-dev for the
#   side-by-side codec bench; iperf3, mosquitto, wrk and h2load for the lab's workloads.
# - Rust: rustfmt and clippy for the stable toolchain, a nightly toolchain and cargo-fuzz for
#   the fuzz targets.
#
# Without root nothing is installed: the missing pieces are listed, and the tests that need
# them report themselves as ignored.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
    iproute2 iputils-ping nftables ethtool kmod procps
    clang llvm libbpf-dev
    tshark libisal-dev
    iperf3 mosquitto mosquitto-clients wrk nghttp2-client
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: missing Debian packages (install as root): ${missing[*]}"
    fi
fi

if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 \
        || echo "setup: could not add rustfmt/clippy to the stable toolchain"
    if ! rustup toolchain list | grep -q '^nightly'; then
        rustup toolchain install nightly --profile minimal >/dev/null 2>&1 \
            || echo "setup: could not install a nightly toolchain (needed by cargo-fuzz)"
    fi
fi

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "setup: installing cargo-fuzz"
    cargo install cargo-fuzz --locked -q || echo "setup: cargo-fuzz could not be installed"
fi
