#!/usr/bin/env bash
# Builds QueueBox's container image (deploy/image/Containerfile) with podman,
# pulling nothing: the image starts FROM scratch, and this script puts into
# its build context the static binary (CGO_ENABLED=0, so that it needs no C
# library), the host's CA bundle, and the image's passwd and group.
#
#   IMAGE    the name and tag to give it (default localhost/queuebox:$VERSION)
#   VERSION  the version stamped into the binary and the labels (default: the
#            release tag of HEAD, else dev)
#   COMMIT   the commit, likewise (default: HEAD's short hash, -dirty when the
#            tree has changes)
#
# `make image` runs it with the Makefile's VERSION and COMMIT. podman is
# installed first when it is missing (scripts/install-podman.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-podman.sh

VERSION="${VERSION:-$(git describe --tags --exact-match 2>/dev/null || echo dev)}"
if [ -z "${COMMIT:-}" ]; then
  COMMIT="$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)"
  if [ "$COMMIT" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then COMMIT="$COMMIT-dirty"; fi
fi
IMAGE="${IMAGE:-localhost/queuebox:$VERSION}"
CREATED="$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

if [ ! -s "$CA_BUNDLE" ]; then
  echo "error: no CA bundle at $CA_BUNDLE: install the ca-certificates package, or set CA_BUNDLE to a PEM file of the certificate authorities the relay should trust" >&2
  exit 1
fi

ctx="$(mktemp -d "${TMPDIR:-/tmp}/queuebox-image-XXXXXX")"
trap 'rm -rf "$ctx"' EXIT

# The same flags as the tests' binary (internal/testbin), so that the image
# runs what the tests ran and the build reuses their compiled packages; -s -w
# only leave the symbol tables out.
pkg=github.com/queuebox/queuebox/bootstrap
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X $pkg.Version=$VERSION -X $pkg.Commit=$COMMIT" \
  -o "$ctx/queuebox" ./cmd/queuebox
cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
cp deploy/image/Containerfile deploy/image/passwd deploy/image/group "$ctx/"
chmod 0555 "$ctx/queuebox"
chmod 0444 "$ctx/ca-certificates.crt" "$ctx/passwd" "$ctx/group"

# --format docker keeps the HEALTHCHECK, which the OCI image format has no
# field for. runc and cgroupfs: see scripts/install-podman.sh.
podman --runtime runc --cgroup-manager cgroupfs build --pull=never --layers=false --format docker \
  --build-arg VERSION="$VERSION" --build-arg COMMIT="$COMMIT" --build-arg CREATED="$CREATED" \
  --tag "$IMAGE" --file "$ctx/Containerfile" "$ctx" >&2
echo "built $IMAGE (queuebox $VERSION, commit $COMMIT)" >&2
