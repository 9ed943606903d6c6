#!/usr/bin/env bash
# Build and run the Phalanx image without a Docker engine: a Debian base made by mmdebstrap,
# the project's Dockerfile built on it by buildah, podman to run it (README, "Install").
#
#   scripts/image.sh base            # the Debian base image (made once per key); prints its name
#   scripts/image.sh build           # the base, then the Dockerfile on it; prints the image name
#   scripts/image.sh podman ARGS...  # podman on the project's image store and run settings
#   scripts/image.sh env             # `eval "$(scripts/image.sh env)"`: the same for your shell
#
# Install the tools first: scripts/image-tools.sh (`make image` does both).
#
# Everything stays outside the repository, beside the Go tools:
#   ${PHALANX_TOOLS_CACHE:-$HOME/.cache/phalanx-tools}/image/
#     base/<key>.tar    the base root filesystem; <key> hashes the suite, packages and options
#     containers/       a private image store (storage.conf, containers.conf, graph/)
#
# The base comes from the Debian mirrors this machine's apt uses (read at run time), so no
# mirror is named here. The host's pip site config and the CA bundle it names are mounted
# read-only into the build's RUN steps (never into the image): a machine behind a
# TLS-intercepting proxy builds as it installs everything else.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SUITE=bookworm
# python3-venv: the build stage makes virtualenvs; the runtime stage needs python3 only,
# but one base serves both stages, as the public python image does.
PACKAGES=(python3 python3-venv)
BASE_IMAGE="localhost/phalanx-base:${SUITE}-py311"
# essential: no apt or init in the image. merged-usr: bookworm's layout without the usrmerge
# package (and the perl it pulls in). Docs, man pages and translations are left out.
MMDEBSTRAP_OPTS=(
  --variant=essential
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --aptopt='APT::Install-Recommends "false"'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
)
BASE_KEY="$(printf '%s\n' "$SUITE" "${PACKAGES[@]}" "${MMDEBSTRAP_OPTS[@]}" | sha256sum | cut -c1-16)"
KEY_LABEL=io.phalanx.base.key

CACHE="${PHALANX_TOOLS_CACHE:-${HOME}/.cache/phalanx-tools}/image"
STORE="${CACHE}/containers"

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- the image store
# stdin to $1, atomically and only when it differs: other runs may be reading it right now.
write_if_changed() {
  local tmp
  tmp="$(mktemp "${1}.XXXXXX")"
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

# A store of our own: the machine's containers are left alone, and the cache is one folder.
# runc, cgroupfs and explicit ulimits are what runs on a bare root CI machine: crun refuses
# hybrid cgroups, and without CAP_SYS_RESOURCE podman's default limits cannot be set.
configure_store() {
  mkdir -p "${STORE}/graph"
  # Run state (mounts, locks) belongs where a reboot clears it; one directory per store.
  local runroot
  runroot="${XDG_RUNTIME_DIR:-/run}/phalanx-image/$(printf '%s' "$STORE" | sha256sum | cut -c1-12)"
  mkdir -p "$runroot" 2>/dev/null || runroot="${STORE}/run"
  # overlay cannot stack on overlay (a cache inside a container's filesystem): vfs there.
  local driver=overlay
  [[ $(stat -f -c %T "${STORE}/graph") == overlayfs ]] && driver=vfs
  driver="${PHALANX_IMAGE_STORAGE_DRIVER:-$driver}"
  write_if_changed "${STORE}/storage.conf" <<EOF
[storage]
driver = "${driver}"
graphroot = "${STORE}/graph"
runroot = "${runroot}"
EOF
  # Stay under the hard limits this process has; podman itself caps nproc at 32768.
  local nofile nproc
  nofile="$(ulimit -Hn)"; [[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
  nproc="$(ulimit -Hu)"; [[ $nproc == unlimited || $nproc -gt 4096 ]] && nproc=4096
  write_if_changed "${STORE}/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]

[engine]
# podman's own run state, per store too (its database remembers this path and the runroot).
tmp_dir = "${runroot}/libpod"
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_STORAGE_CONF="${STORE}/storage.conf" CONTAINERS_CONF="${STORE}/containers.conf"
}

# ---------------------------------------------------------------- the Debian base
# The Debian archive and security mirrors apt uses here (whatever release the host runs), as
# "deb URI SUITE main" lines for SUITE, SUITE-updates and SUITE-security.
apt_sources() {
  # shellcheck disable=SC2016  # $(...) here is apt's own template syntax, not the shell's
  apt-get indextargets --format '$(ORIGIN) $(LABEL) $(REPO_URI)' 'Identifier: Packages' \
    | sort -u \
    | awk -v suite="$SUITE" '
        $1 == "Debian" && $2 == "Debian" && !archive { archive = $3 }
        $1 == "Debian" && $2 == "Debian-Security" && !security { security = $3 }
        END {
          if (!archive) exit
          print "deb " archive " " suite " main"
          print "deb " archive " " suite "-updates main"
          if (security) print "deb " security " " suite "-security main"
        }'
}

ensure_base() {
  local tarball="${CACHE}/base/${BASE_KEY}.tar"
  if [[ $(podman image inspect --format "{{index .Labels \"${KEY_LABEL}\"}}" "$BASE_IMAGE" \
          2>/dev/null) == "$BASE_KEY" ]]; then
    return
  fi
  if [[ ! -s $tarball ]]; then
    local sources=()
    mapfile -t sources < <(apt_sources)
    [[ ${#sources[@]} -gt 0 ]] || die "apt uses no Debian mirror here: see /etc/apt/sources.list*"
    # apt's own freshness checks, so a snapshot mirror that apt accepts is accepted here too.
    local valid_until
    valid_until="$(apt-config shell v Acquire::Check-Valid-Until | sed -n "s/^v='\(.*\)'$/\1/p")"
    local opts=("${MMDEBSTRAP_OPTS[@]}" --include="$(IFS=,; echo "${PACKAGES[*]}")")
    [[ -n $valid_until ]] && opts+=(--aptopt="Acquire::Check-Valid-Until \"${valid_until}\"")
    log "making the ${SUITE} base with mmdebstrap (${PACKAGES[*]}) from: ${sources[*]}"
    mkdir -p "${CACHE}/base"
    rm -f "${tarball}.partial"
    mmdebstrap --quiet "${opts[@]}" --format=tar "$SUITE" "${tarball}.partial" "${sources[@]}"
    mv "${tarball}.partial" "$tarball"
  fi
  log "importing ${tarball} as ${BASE_IMAGE}"
  podman import --quiet --change 'CMD ["python3"]' --change "LABEL ${KEY_LABEL}=${BASE_KEY}" \
    "$tarball" "$BASE_IMAGE" >/dev/null
}

# ---------------------------------------------------------------- the project image
pip_trust_mounts() {
  local conf cert certs=()
  for conf in /etc/pip.conf /etc/xdg/pip/pip.conf; do
    [[ -f $conf ]] || continue
    printf -- '--volume=%s:%s:ro\n' "$conf" "$conf"
    cert="$(sed -n 's/^[[:space:]]*cert[[:space:]]*=[[:space:]]*//p' "$conf" | tail -n1)"
    [[ -n $cert ]] && certs+=("$cert")
  done
  [[ -n ${PIP_CERT:-} ]] && certs+=("$PIP_CERT")
  for cert in "${certs[@]}"; do
    [[ -f $cert ]] && printf -- '--volume=%s:%s:ro\n' "$(readlink -f "$cert")" "$cert"
  done | sort -u
}

build_image() {
  local version image
  version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "${REPO}/pyproject.toml" | head -n1)"
  image="localhost/phalanx:${version}"
  local mounts=()
  mapfile -t mounts < <(pip_trust_mounts)
  local before after
  before="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
  log "building ${image} on ${BASE_IMAGE} with buildah"
  # docker format: OCI's image config has no HEALTHCHECK. --layers keeps each step as a cache.
  buildah bud --quiet --layers --pull=never --network=host --format=docker \
    --build-arg "BASE_IMAGE=${BASE_IMAGE}" "${mounts[@]}" \
    --tag "$image" --file "${REPO}/Dockerfile" "$REPO" >&2  # RUN output: the build log
  after="$(podman image inspect --format '{{.Id}}' "$image")"
  # The image it replaces holds a full copy of the venv (the build-stage cache stays).
  if [[ -n $before && $before != "$after" ]]; then
    podman rmi "$before" >/dev/null 2>&1 || true
  fi
  echo "$image"
}

with_lock() {
  mkdir -p "$CACHE"
  exec 9>"${CACHE}/.lock"
  flock 9
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  configure_store
  case "$cmd" in
    base) with_lock; ensure_base; echo "$BASE_IMAGE" ;;
    build) with_lock; ensure_base; build_image ;;
    podman) exec podman "$@" ;;
    env) printf 'export CONTAINERS_STORAGE_CONF=%q CONTAINERS_CONF=%q\n' \
           "$CONTAINERS_STORAGE_CONF" "$CONTAINERS_CONF" ;;
    *) die "usage: $0 base|build|podman ARGS...|env" ;;
  esac
}

main "$@"
