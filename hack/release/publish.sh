#!/usr/bin/env bash
# Publishes what `make release` wrote to DIST: pushes the image index (crane push of the OCI
# layout) and the chart (helm push to an OCI registry), signs both with cosign (keyless in the
# release workflow: the GitHub OIDC token), attests the image's CycloneDX SBOM to it, and creates
# the GitHub release with DIST's files. The release workflow (.github/workflows/release.yaml)
# runs it with no flags; --dry-run prints every command with the real digests and files from
# DIST and runs none (test/release TestReleaseReproducible runs it so). The other flags publish
# to a registry of your own (test/publish runs them against a registry on 127.0.0.1).
#
# Usage: hack/release/publish.sh [--dry-run] [--registry HOST[/PATH]] [--key FILE] [--no-tlog]
#                                [--plain-http] [--no-github-release] DIST
#   --registry R         push the image to R/configmap-attacher and the chart to oci://R/charts
#                        (instead of IMAGE_REPO and CHART_REPO)
#   --key FILE           sign with this cosign private key (cosign generate-key-pair; its
#                        password in COSIGN_PASSWORD) instead of keyless
#   --no-tlog            with --key: upload nothing to the transparency log (Rekor; cosign
#                        signs with a signing config that names no service); verify then
#                        with cosign verify --key cosign.pub --insecure-ignore-tlog
#   --plain-http         the registry speaks HTTP, not HTTPS (crane --insecure, helm
#                        --plain-http, cosign --allow-http-registry)
#   --no-github-release  stop after the registry: no `gh release create`
# Env:   VERSION (the tag, required), IMAGE_REPO (default ghcr.io/configmap-attacher/configmap-attacher),
#        CHART_REPO (default oci://ghcr.io/configmap-attacher/charts), CRANE, HELM, COSIGN, GH (the
#        binaries; default from PATH), GITHUB_OUTPUT (when set: image-digest= and chart-digest=
#        for the provenance steps).
set -euo pipefail
usage="usage: hack/release/publish.sh [--dry-run] [--registry HOST[/PATH]] [--key FILE] [--no-tlog] [--plain-http] [--no-github-release] DIST"
dry=0 registry="" key="" tlog=1 plain=0 ghrelease=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --registry) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; registry=${2%/}; shift ;;
    --registry=*) registry=${1#*=}; registry=${registry%/} ;;
    --key) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; key=$2; shift ;;
    --key=*) key=${1#*=} ;;
    --no-tlog) tlog=0 ;;
    --plain-http) plain=1 ;;
    --no-github-release) ghrelease=0 ;;
    -*) echo "publish: unknown flag $1" >&2; echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }
dist=${1%/}
: "${VERSION:?VERSION (the release tag, e.g. v0.2.0) is required}"
if [ -n "$registry" ]; then
  [[ "$registry" != *://* ]] || { echo "publish: --registry $registry: give HOST[:PORT][/PATH] without a scheme (e.g. registry.example.com/team)" >&2; exit 2; }
  IMAGE_REPO="$registry/configmap-attacher" CHART_REPO="oci://$registry/charts"
fi
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/configmap-attacher/configmap-attacher}
CHART_REPO=${CHART_REPO:-oci://ghcr.io/configmap-attacher/charts}
CRANE=${CRANE:-crane} HELM=${HELM:-helm} COSIGN=${COSIGN:-cosign} GH=${GH:-gh}
if [ -n "$key" ]; then
  [ -f "$key" ] || { echo "publish: --key $key: no such file (make one with cosign generate-key-pair)" >&2; exit 2; }
fi

# The extra arguments of each tool; none by default (the workflow's keyless, HTTPS, Rekor path).
crane_flags=() helm_flags=() cosign_flags=()
[ -z "$key" ] || cosign_flags+=(--key "$key")
[ $tlog -eq 1 ] || [ -n "$key" ] || { echo "publish: --no-tlog needs --key: keyless signing needs Fulcio and Rekor" >&2; exit 2; }
if [ $plain -eq 1 ]; then
  crane_flags+=(--insecure) helm_flags+=(--plain-http) cosign_flags+=(--allow-http-registry)
fi

fail() { echo "publish: $*" >&2; exit 1; }
layout="$dist/configmap-attacher-image.oci"
chart="$dist/configmap-attacher-${VERSION#v}.tgz"
sbom="$dist/configmap-attacher-image.cdx.json"
[ -f "$layout/index.json" ] || fail "$layout/index.json missing: run make release VERSION=$VERSION first"
digest=$(tr -d '[:space:]' < "$layout.digest" 2>/dev/null) || fail "$layout.digest missing: run make release VERSION=$VERSION first"
[[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "$layout.digest: \"$digest\" is not a sha256 digest"
# Before anything is tagged: the layout holds exactly that index, one manifest whose blob has
# that sha256 (the layout directory is not in checksums.txt; crane pushes what index.json lists).
[ "$(grep -o '"digest"' "$layout/index.json" | wc -l)" -eq 1 ] && grep -q "\"$digest\"" "$layout/index.json" ||
  fail "$layout/index.json does not list exactly $digest: rebuild with make release"
[ "sha256:$(sha256sum < "$layout/blobs/sha256/${digest#sha256:}" 2>/dev/null | cut -d' ' -f1)" = "$digest" ] ||
  fail "$layout: the blob of $digest is missing or changed: rebuild with make release"
[ -f "$chart" ] || fail "$chart missing: dist/ is not the release of $VERSION (make release VERSION=$VERSION)"
[ -f "$sbom" ] || fail "$sbom missing: run make release VERSION=$VERSION first"
[ -f "$dist/changelog.md" ] || fail "$dist/changelog.md missing"
# Every file the release lists is uploaded, and each must still have its recorded sha256.
(cd "$dist" && sha256sum --check --quiet checksums.txt) || fail "$dist/checksums.txt does not match the files: rebuild with make release"
mapfile -t assets < <(awk -v d="$dist" '$2 !~ /\// {print d "/" $2}' "$dist/checksums.txt")
assets+=("$dist/checksums.txt")
chart_layer="sha256:$(sha256sum "$chart" | cut -d' ' -f1)"

show() { printf '+'; printf ' %q' "$@"; } # prints a command as run prints it
run() { # prints the command; runs it unless --dry-run
  show "$@"; printf '\n'
  [ $dry -eq 1 ] || "$@"
}

if [ $tlog -eq 0 ]; then
  # cosign v3 signs by a signing config (the services it uses); one with none uploads nothing.
  signing_config=$(mktemp); trap 'rm -f "$signing_config"' EXIT
  run "$COSIGN" signing-config create --no-default-fulcio --no-default-rekor --no-default-oidc --no-default-tsa --out "$signing_config"
  cosign_flags+=(--signing-config "$signing_config")
fi

echo "# image $IMAGE_REPO:$VERSION, index $digest"
if [ $dry -eq 1 ]; then
  run "$CRANE" push "${crane_flags[@]}" "$layout" "$IMAGE_REPO:$VERSION"
else
  pushed=$("$CRANE" push "${crane_flags[@]}" "$layout" "$IMAGE_REPO:$VERSION" | tail -n1)
  show "$CRANE" push "${crane_flags[@]}" "$layout" "$IMAGE_REPO:$VERSION"; echo " -> $pushed"
  # crane prints REPO@DIGEST: the registry must hold exactly the index make release built.
  [ "${pushed##*@}" = "$digest" ] || fail "crane pushed $pushed, but $layout.digest says $digest"
fi
run "$COSIGN" sign --yes "${cosign_flags[@]}" "$IMAGE_REPO@$digest"
run "$COSIGN" attest --yes "${cosign_flags[@]}" --type cyclonedx --predicate "$sbom" "$IMAGE_REPO@$digest"

echo "# chart $(basename "$chart") (layer $chart_layer) to $CHART_REPO"
chart_ref="${CHART_REPO#oci://}/configmap-attacher"
if [ $dry -eq 1 ]; then
  run "$HELM" push "${helm_flags[@]}" "$chart" "$CHART_REPO"
  # helm's manifest carries a creation time, so its digest is known only once pushed.
  chart_digest=DIGEST-PRINTED-BY-HELM-PUSH
else
  out=$("$HELM" push "${helm_flags[@]}" "$chart" "$CHART_REPO" 2>&1) || fail "helm push: $out"
  show "$HELM" push "${helm_flags[@]}" "$chart" "$CHART_REPO"; echo; echo "$out"
  chart_digest=$(sed -n 's/^Digest: *//p' <<<"$out")
  [[ "$chart_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "helm push printed no digest: $out"
fi
run "$COSIGN" sign --yes "${cosign_flags[@]}" "$chart_ref@$chart_digest"

if [ -n "${GITHUB_OUTPUT:-}" ] && [ $dry -eq 0 ]; then
  { echo "image-digest=$digest"; echo "chart-digest=$chart_digest"; echo "chart-name=$chart_ref"; } >> "$GITHUB_OUTPUT"
fi

if [ $ghrelease -eq 0 ]; then
  echo "# GitHub release: skipped (--no-github-release)"
  exit 0
fi
echo "# GitHub release $VERSION: ${#assets[@]} files"
run "$GH" release create "$VERSION" --verify-tag --title "configmap-attacher $VERSION" --notes-file "$dist/changelog.md" "${assets[@]}"
