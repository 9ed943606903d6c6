#!/usr/bin/env bash
# Install what builds and runs the Phalanx image without a Docker engine: mmdebstrap (the
# Debian base), buildah (the Dockerfile), podman + runc (running it). Idempotent: installs
# only what is missing, from the machine's own apt sources.
#
# runc rather than crun: crun refuses hosts whose cgroups are in hybrid mode (v1
# controllers with a v2 hierarchy beside them), which CI machines can be; runc runs on all.
#
# Exit status: 0 when every tool is there afterwards. Without apt-get or root nothing can be
# installed: the script says what is missing and exits 0, so `make test` goes on and the image
# test reports it (a failure under PHALANX_REQUIRE_E2E=1, a skip otherwise).
set -euo pipefail

TOOLS=(mmdebstrap buildah podman runc)
declare -A PACKAGE=([mmdebstrap]=mmdebstrap [buildah]=buildah [podman]=podman [runc]=runc)

log() { printf '[image-tools] %s\n' "$*" >&2; }

missing=()
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${PACKAGE[$tool]}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || [[ $(id -u) -ne 0 ]]; then
  log "missing: ${missing[*]}; install them as root with apt-get (Debian bookworm or later)"
  exit 0
fi

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# With their Recommends (gpg for mmdebstrap's keyrings, fuse-overlayfs): the set this was proven on.
apt-get install -y -qq "${missing[@]}" >&2
