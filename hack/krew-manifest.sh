#!/usr/bin/env bash
# Writes the krew plugin manifest of a release to standard output:
#   hack/krew-manifest.sh TAG REPOSITORY DIR > inpool.yaml
# TAG is the release (vX.Y.Z), REPOSITORY its GitHub owner/name, DIR holds the archives of
# hack/plugin-archive.sh (kubectl-inpool_TAG_OS_ARCH.tar.gz). One platform per archive, each
# with the archive's release download URL and sha256, so krew installs exactly what was built.
set -euo pipefail
if [ "$#" -ne 3 ]; then
  echo "usage: $0 TAG REPOSITORY DIR" >&2
  exit 2
fi
tag=$1 repository=$2 dir=$3
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1"; else shasum -a 256 "$1"; fi | cut -d' ' -f1
}
cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: inpool
spec:
  version: ${tag}
  homepage: https://github.com/${repository}
  shortDescription: Show inpool's IP pools and claims, and why one waits
  description: |
    Read-only views of the Cluster API IPAM provider inpool's pools and claims,
    answered from the API with your kubeconfig: pool counts and conditions,
    claims with their place in a pool's queue, which claim holds an address,
    and what a claim is waiting for. Output as a table, JSON or YAML.
  platforms:
YAML
found=0
for archive in "$dir"/kubectl-inpool_"${tag}"_*_*.tar.gz; do
  [ -e "$archive" ] || continue
  found=$((found + 1))
  name=$(basename "$archive")
  platform=${name#kubectl-inpool_"${tag}"_}
  platform=${platform%.tar.gz}
  cat <<YAML
  - selector:
      matchLabels:
        os: ${platform%_*}
        arch: ${platform#*_}
    uri: https://github.com/${repository}/releases/download/${tag}/${name}
    sha256: $(sha256 "$archive")
    files:
    - from: kubectl-inpool
      to: .
    - from: LICENSE
      to: .
    bin: kubectl-inpool
YAML
done
if [ "$found" -eq 0 ]; then
  echo "$0: no archive kubectl-inpool_${tag}_OS_ARCH.tar.gz in $dir" >&2
  exit 1
fi
