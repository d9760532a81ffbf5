#!/usr/bin/env bash
# Builds hirt's BPF objects (crates/linux/bpf/*.bpf.c -> crates/linux/bpf/*.bpf.o) with clang.
#
# The objects are committed and embedded into the binary, so building hirt needs no clang;
# this script is for changing a program. `--check` rebuilds into a temporary directory and
# fails if the bytes differ from the committed objects (CI runs it).
#
# The output is deterministic: compiled from inside crates/linux/bpf with relative file names,
# DWARF stripped (the .BTF and .BTF.ext sections that loaders need stay). The bytes depend on
# the toolchain: Debian 12's clang 14, libbpf-dev 1.1 (bpf_helpers.h) and linux-libc-dev 6.1
# (linux/bpf.h, whose types go into the BTF). The clang major version is checked below.
#
# Adding a program: add its .bpf.c to PROGRAMS.
#
# Needs: clang, llvm (llvm-strip), libbpf-dev (bpf/bpf_helpers.h), linux-libc-dev.
set -euo pipefail

PROGRAMS=(
    reuseport_steer
    sid_filter
)
CLANG_MAJOR=14

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=crates/linux/bpf

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

for tool in clang llvm-strip; do
    if ! command -v "$tool" >/dev/null; then
        echo "bpf-build: $tool not found (apt-get install -y clang llvm libbpf-dev)" >&2
        exit 1
    fi
done
major=$(clang -dumpversion | cut -d. -f1)
if [ "$major" != "$CLANG_MAJOR" ]; then
    echo "bpf-build: clang $major; the committed objects are built with clang $CLANG_MAJOR" \
        "(other versions give other bytes)" >&2
    exit 1
fi
if [ ! -f /usr/include/bpf/bpf_helpers.h ]; then
    echo "bpf-build: bpf/bpf_helpers.h not found (apt-get install -y libbpf-dev)" >&2
    exit 1
fi
# asm/types.h, which linux/bpf.h includes, lives in the multiarch directory.
multiarch=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null ||
    echo "$(uname -m)-linux-gnu")

out="$root/$src"
if $check; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi

cd "$root/$src"
for prog in "${PROGRAMS[@]}"; do
    clang -O2 -g -target bpf -mcpu=v3 -Wall -Werror \
        -idirafter "/usr/include/$multiarch" \
        -fdebug-compilation-dir=. -fdebug-prefix-map="$root/$src"=. \
        -c "$prog.bpf.c" -o "$out/$prog.bpf.o"
    llvm-strip -g "$out/$prog.bpf.o"
done

if $check; then
    status=0
    for prog in "${PROGRAMS[@]}"; do
        if ! cmp -s "$out/$prog.bpf.o" "$root/$src/$prog.bpf.o"; then
            echo "bpf-build --check: $src/$prog.bpf.o differs from what $src/$prog.bpf.c" \
                "builds to; run scripts/bpf-build.sh and commit the object" \
                "(toolchain: $(clang --version | head -1))" >&2
            status=1
        fi
    done
    [ $status = 0 ] && echo "bpf-build --check: ${#PROGRAMS[@]} object(s) match their sources"
    exit $status
fi
echo "bpf-build: built ${PROGRAMS[*]/%/.bpf.o} in $src"
