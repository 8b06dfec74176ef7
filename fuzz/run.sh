#!/usr/bin/env bash
# Fuzzes the pool-spec parsers and the allocators (IP pools: parse_spec; prefix pools:
# parse_prefix_spec) for a bounded time each, on stable rustc.
#
#   fuzz/run.sh [seconds]      (default 30)
#
# Installs cargo-fuzz into ~/.cargo/bin once (about 2.5 minutes on 2 cores), builds the target
# (about 2 minutes the first time, libFuzzer included), then runs it. Exits non-zero on a crash,
# a timeout or a build failure; the crashing input is written to fuzz/artifacts/<target>/.
#
# FUZZ_TARGET_DIR moves the build directory (default fuzz/target), e.g. to a cache outside a
# fresh CI clone so that libFuzzer is not rebuilt on every run.
set -euo pipefail

seconds="${1:-30}"
cargo_fuzz_version="0.13.2"
fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

if ! cargo fuzz --version 2>/dev/null | grep -qF "$cargo_fuzz_version"; then
    cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked
fi

# `--sanitizer none` needs no nightly features: plain stable rustc builds the sancov-instrumented
# target and links libFuzzer (compiled from C++ by libfuzzer-sys). Each target runs `seconds`.
cd "$fuzz_dir/.."
for target in parse_spec parse_prefix_spec; do
    mkdir -p "$fuzz_dir/corpus/$target"
    echo "=== $target: ${seconds}s"
    cargo fuzz run "$target" --sanitizer none \
        --target-dir "${FUZZ_TARGET_DIR:-fuzz/target}" \
        "fuzz/corpus/$target" "fuzz/seeds/$target" \
        -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -dict=fuzz/parse_spec.dict -print_final_stats=1
done
