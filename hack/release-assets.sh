#!/usr/bin/env bash
# Makes a release's assets and notes from the checkout, as .github/workflows/release.yml does
# (it calls this script), so that a dry run here makes what a release publishes:
#   hack/release-assets.sh TAG IMAGE REPOSITORY DIST NOTES
# TAG is the release (vX.Y.Z or vX.Y.Z-rc.N), IMAGE the controller image without its tag
# (ghcr.io/OWNER/inpool), REPOSITORY the GitHub owner/name, DIST a directory that already holds
# the kubectl-inpool archives of hack/plugin-archive.sh (and their SBOMs), NOTES the file to
# write the release notes to. kustomize is $KUSTOMIZE, else the one on PATH.
#
# Writes into DIST: ipam-components.yaml (config/default with the tag's image),
# metadata.yaml, the krew manifest inpool.yaml, and checksums.txt of every file in DIST. The
# checkout is not changed: kustomize edits a copy of config/ and crds/. Signing and attesting
# need the workflow's identity and stay in the workflow.
set -euo pipefail
if [ "$#" -ne 5 ]; then
  echo "usage: $0 TAG IMAGE REPOSITORY DIST NOTES" >&2
  exit 2
fi
tag=$1 image=$2 repository=$3 dist=$4 notes=$5
root=$(cd "$(dirname "$0")/.." && pwd)
kustomize=${KUSTOMIZE:-kustomize}

if ! compgen -G "$dist/kubectl-inpool_${tag}_*.tar.gz" >/dev/null; then
  echo "error: no kubectl-inpool archive of $tag in $dist (hack/plugin-archive.sh makes them)" >&2
  exit 1
fi

# The components, rendered from a copy with the tag's image.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -R "$root/config" "$root/crds" "$work/"
(cd "$work/config/default" && "$kustomize" edit set image "controller=$image:$tag")
"$kustomize" build "$work/config/default" > "$dist/ipam-components.yaml"
if ! grep -q "image: $image:$tag\$" "$dist/ipam-components.yaml"; then
  echo "error: ipam-components.yaml does not name $image:$tag" >&2
  exit 1
fi
cp "$root/config/clusterctl/metadata.yaml" "$dist/metadata.yaml"

"$root/hack/krew-manifest.sh" "$tag" "$repository" "$dist" > "$dist/inpool.yaml"

(cd "$dist" && rm -f checksums.txt && sha256sum -- * > "$work/checksums.txt" \
  && mv "$work/checksums.txt" checksums.txt)

identity="https://github.com/$repository/.github/workflows/release.yml@refs/tags/$tag"
issuer=https://token.actions.githubusercontent.com
{
  # CHANGELOG.md's section for the tag, if it has one: Keep a Changelog heads it
  # "## [X.Y.Z] - YYYY-MM-DD" (or "## [X.Y.Z-rc.N] - ..."), the tag without its "v".
  awk -v version="${tag#v}" '/^## / { inside = ($2 == "[" version "]") } inside' "$root/CHANGELOG.md"
  echo
  echo "## Install"
  echo
  echo "- Image: \`$image:$tag\` (linux/amd64, linux/arm64)"
  echo "- clusterctl: \`ipam-components.yaml\` and \`metadata.yaml\` below, as an IPAM provider's repository (\`https://github.com/$repository/releases/$tag/ipam-components.yaml\`)"
  echo "- kustomize: \`https://github.com/$repository//config/default?ref=$tag\` (then set the image to \`$image:$tag\`)"
  echo "- kubectl plugin: \`kubectl krew install --manifest-url=https://github.com/$repository/releases/download/$tag/inpool.yaml\`"
  echo
  echo "## Verify"
  echo
  echo "- The image's signature: \`cosign verify $image:$tag --certificate-identity $identity --certificate-oidc-issuer $issuer\`"
  echo "- The assets: \`cosign verify-blob --bundle checksums.txt.sigstore.json --certificate-identity $identity --certificate-oidc-issuer $issuer checksums.txt\`, then \`sha256sum --ignore-missing -c checksums.txt\`"
  echo "- Build provenance: \`gh attestation verify oci://$image:$tag --repo $repository\`, and \`gh attestation verify FILE --repo $repository\` for an asset"
} > "$notes"
