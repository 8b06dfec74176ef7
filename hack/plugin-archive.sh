#!/usr/bin/env bash
# Packs a kubectl-inpool binary as a release archive for krew:
#   hack/plugin-archive.sh BINARY OS ARCH TAG OUT_DIR
# writes OUT_DIR/kubectl-inpool_TAG_OS_ARCH.tar.gz holding kubectl-inpool and LICENSE at its top
# level (the files hack/krew-manifest.sh names) and prints its path. OS and ARCH are krew's
# (and Go's) names: linux or darwin, amd64 or arm64. Runs on Linux and macOS (GNU or BSD tar).
set -euo pipefail
if [ "$#" -ne 5 ]; then
  echo "usage: $0 BINARY OS ARCH TAG OUT_DIR" >&2
  exit 2
fi
binary=$1 os=$2 arch=$3 tag=$4 out=$5
root=$(cd "$(dirname "$0")/.." && pwd)
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
install -m 0755 "$binary" "$staging/kubectl-inpool"
install -m 0644 "$root/LICENSE" "$staging/LICENSE"
mkdir -p "$out"
archive="$out/kubectl-inpool_${tag}_${os}_${arch}.tar.gz"
tar -czf "$archive" -C "$staging" kubectl-inpool LICENSE
echo "$archive"
