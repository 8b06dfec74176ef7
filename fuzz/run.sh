#!/usr/bin/env bash
# Fuzzes the pool-spec parser and the allocator for a bounded time on stable rustc.
#
#   fuzz/run.sh [seconds]      (default 30)
#
# Installs cargo-fuzz into ~/.cargo/bin once (about 2.5 minutes on 2 cores), builds the target
# (about 2 minutes the first time, libFuzzer included), then runs it. Exits non-zero on a crash,
# a timeout or a build failure; the crashing input is written to fuzz/artifacts/parse_spec/.
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
# target and links libFuzzer (compiled from C++ by libfuzzer-sys).
mkdir -p "$fuzz_dir/corpus/parse_spec"
cd "$fuzz_dir/.."
cargo fuzz run parse_spec --sanitizer none \
    --target-dir "${FUZZ_TARGET_DIR:-fuzz/target}" \
    fuzz/corpus/parse_spec fuzz/seeds/parse_spec \
    -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict=fuzz/parse_spec.dict -print_final_stats=1
