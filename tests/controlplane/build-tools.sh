#!/usr/bin/env bash
# Build the real control-plane binaries used by the e2e tier (DESIGN.md §9, tier 3):
# etcd, kube-apiserver, kube-scheduler and kwok -- and, when asked, the deploy tools
# helm and promtool (tests/deploy) -- from the Go modules pinned in versions.env, into a
# per-version cache directory OUTSIDE the repository:
#
#   ${PHALANX_TOOLS_CACHE:-$HOME/.cache/phalanx-tools}/<kube>-<kwok>-<etcd>/bin/
#
# Usage:
#   tests/controlplane/build-tools.sh                    # build what is missing (idempotent)
#   tests/controlplane/build-tools.sh --print-bin-dir    # print the bin dir, build nothing
#   tests/controlplane/build-tools.sh --update-modules   # regenerate go/*/go.mod + go.sum
#                                                         # from versions.env (no build)
#   tests/controlplane/build-tools.sh FAMILY...           # only these families
#                                                         # (kube etcd kwok helm promtool
#                                                         #  scheduler-plugins)
#   tests/controlplane/build-tools.sh --with-deploy-tools # the default families + helm promtool
#
# The LAST line of stdout is always the bin directory; progress goes to stderr.
# Each tool family has its own Go wrapper module under go/<family>/ so that their
# dependency graphs never have to agree with each other. Their go.sum files are
# committed and the build runs with -mod=readonly, so a clean clone needs nothing but
# Go and the module proxy.
#
# Adding a family: add a version line to versions.env, a `gomod_<family>` generator
# below, an entry in FAMILY_BINS / FAMILY_LDFLAGS / FAMILY_MODULE, and run
# --update-modules FAMILY. Families not in DEFAULT_FAMILIES are built only when named
# (or, for DEPLOY_FAMILIES, with --with-deploy-tools). scheduler-plugins (the coscheduling
# peer that bench/run.py measures Phalanx against) is built only when named.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GO_DIR="${HERE}/go"

log() { printf '[build-tools] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- versions
# shellcheck disable=SC1091
source "${HERE}/versions.env"
: "${KUBE_VERSION:?missing in versions.env}"
: "${KUBE_STAGING_VERSION:?missing in versions.env}"
: "${ETCD_VERSION:?missing in versions.env}"
: "${KWOK_VERSION:?missing in versions.env}"
: "${HELM_VERSION:?missing in versions.env}"
: "${PROMETHEUS_VERSION:?missing in versions.env}"
: "${SCHEDULER_PLUGINS_VERSION:?missing in versions.env}"

CACHE_ROOT="${PHALANX_TOOLS_CACHE:-${HOME}/.cache/phalanx-tools}"
CACHE_KEY="${KUBE_VERSION}-${KWOK_VERSION}-${ETCD_VERSION}"
TOOLS_DIR="${CACHE_ROOT}/${CACHE_KEY}"
BIN_DIR="${TOOLS_DIR}/bin"
STAMP_DIR="${TOOLS_DIR}/stamps"

# ---------------------------------------------------------------- families
DEFAULT_FAMILIES=(kube etcd kwok)
# Chart and alert-rule tooling for tests/deploy: not needed by the e2e tier, so built
# only when named or with --with-deploy-tools.
DEPLOY_FAMILIES=(helm promtool)
# Benchmark peers for bench/run.py (DESIGN.md §9, tier 4), built only when named:
#   scheduler-plugins -> kube-scheduler-plugins, scheduler-plugins' kube-scheduler with the
#   Coscheduling plugin compiled in.

# "binary=go-package" pairs, built from inside go/<family>/.
declare -A FAMILY_BINS=(
  [kube]="kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  # In etcd 3.5/3.6 the server module's root package is the `etcd` main package.
  [etcd]="etcd=go.etcd.io/etcd/server/v3"
  [kwok]="kwok=sigs.k8s.io/kwok/cmd/kwok"
  [helm]="helm=helm.sh/helm/v3/cmd/helm"
  [promtool]="promtool=github.com/prometheus/prometheus/cmd/promtool"
  [scheduler-plugins]="kube-scheduler-plugins=sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)

# -X flags so that the binaries report their real version (a module build has no git
# tree to derive it from; without these kube-* say v0.0.0-master+$Format...).
KUBE_MINOR="${KUBE_VERSION#v*.}"; KUBE_MINOR="${KUBE_MINOR%%.*}"
KUBE_MAJOR="${KUBE_VERSION#v}"; KUBE_MAJOR="${KUBE_MAJOR%%.*}"
# Prometheus tags its Go module v0.<major*100+minor>.<patch> for release <major>.<minor>.<patch>
# (v0.316.0 is Prometheus 3.16.0); promtool reports the release.
PROM_MINORS="${PROMETHEUS_VERSION#v0.}"; PROM_MINORS="${PROM_MINORS%%.*}"
PROMETHEUS_RELEASE="$((PROM_MINORS / 100)).$((PROM_MINORS % 100)).${PROMETHEUS_VERSION##*.}"
HELM_PKG="helm.sh/helm/v3"
# The k8s.io/kubernetes release scheduler-plugins pins (its wrapper go.mod's replace line).
SP_KUBE_VERSION="$(sed -n 's#^[[:space:]]*k8s\.io/kubernetes => k8s\.io/kubernetes \(v[0-9.]*\).*#\1#p' "${GO_DIR}/scheduler-plugins/go.mod" 2>/dev/null || true)"
SP_KUBE_MINOR="${SP_KUBE_VERSION#v*.}"; SP_KUBE_MINOR="${SP_KUBE_MINOR%%.*}"
SP_KUBE_MAJOR="${SP_KUBE_VERSION#v}"; SP_KUBE_MAJOR="${SP_KUBE_MAJOR%%.*}"
declare -A FAMILY_LDFLAGS=(
  [kube]="-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=${KUBE_MAJOR} -X k8s.io/component-base/version.gitMinor=${KUBE_MINOR} -X k8s.io/component-base/version.gitTreeState=clean"
  [etcd]=""
  [kwok]=""  # kwok carries its version in pkg/consts
  # Helm's release Makefile sets these. The Kubernetes version is the one `helm template`
  # reports as .Capabilities.KubeVersion and `helm lint` checks deprecations against
  # (v1.20 if unset): the release the e2e tier runs.
  [helm]="-X ${HELM_PKG}/internal/version.version=${HELM_VERSION} -X ${HELM_PKG}/internal/version.gitTreeState=clean -X ${HELM_PKG}/pkg/chartutil.k8sVersionMajor=${KUBE_MAJOR} -X ${HELM_PKG}/pkg/chartutil.k8sVersionMinor=${KUBE_MINOR} -X ${HELM_PKG}/pkg/lint/rules.k8sVersionMajor=${KUBE_MAJOR} -X ${HELM_PKG}/pkg/lint/rules.k8sVersionMinor=${KUBE_MINOR}"
  [promtool]="-X github.com/prometheus/common/version.Version=${PROMETHEUS_RELEASE} -X github.com/prometheus/common/version.Branch=HEAD"
  # The Kubernetes release it embeds, as for kube: kube-scheduler 1.34 derives its emulation
  # version from gitVersion and refuses to start on scheduler-plugins' own tag (v0.34.x).
  [scheduler-plugins]="-X k8s.io/component-base/version.gitVersion=${SP_KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=${SP_KUBE_MAJOR} -X k8s.io/component-base/version.gitMinor=${SP_KUBE_MINOR} -X k8s.io/component-base/version.gitTreeState=clean"
)

# The module each family wraps and the version versions.env pins for it
# (checked against go/<family>/go.mod before building).
declare -A FAMILY_MODULE=(
  [kube]="k8s.io/kubernetes ${KUBE_VERSION}"
  [etcd]="go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
  [kwok]="sigs.k8s.io/kwok ${KWOK_VERSION}"
  [helm]="helm.sh/helm/v3 ${HELM_VERSION}"
  [promtool]="github.com/prometheus/prometheus ${PROMETHEUS_VERSION}"
  [scheduler-plugins]="sigs.k8s.io/scheduler-plugins ${SCHEDULER_PLUGINS_VERSION}"
)

# ---------------------------------------------------------------- go env
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false"
# A CI run may want its own Go caches; otherwise Go's defaults ($HOME/go, $HOME/.cache).

require_go() {
  command -v go >/dev/null 2>&1 || die "'go' not found on PATH (Go >= 1.26 is needed to build kwok ${KWOK_VERSION})"
}

# ---------------------------------------------------------------- go.mod generators
HEADER="// Code generated by tests/controlplane/build-tools.sh --update-modules from versions.env. DO NOT EDIT."

write_tools_go() { # dir packages...
  local dir="$1"; shift
  {
    echo "${HEADER}"
    echo
    echo "//go:build tools"
    echo
    echo "// Package tools pins the main packages this wrapper module builds."
    echo "package tools"
    echo
    echo "import ("
    local p
    for p in "$@"; do echo "	_ \"${p}\""; done
    echo ")"
  } >"${dir}/tools.go"
}

gomod_kube() {
  local dir="$1" upstream_mod
  upstream_mod="$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${upstream_mod}" ]] || die "could not download k8s.io/kubernetes@${KUBE_VERSION}"
  # k8s.io/kubernetes lists every staging module as v0.0.0 replaced by ./staging/...;
  # replace directives of a dependency are ignored, so pin each of them to its
  # published release here.
  local staging
  staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "${upstream_mod}" | sort -u)"
  [[ -n "${staging}" ]] || die "no staging replace lines found in ${upstream_mod}"
  local go_line godebug_line
  go_line="$(grep -m1 '^go ' "${upstream_mod}")"
  godebug_line="$(grep -m1 '^godebug ' "${upstream_mod}" || true)"
  {
    echo "${HEADER}"
    echo
    echo "module phalanx/tests/controlplane/kube"
    echo
    echo "${go_line}"
    [[ -n "${godebug_line}" ]] && { echo; echo "${godebug_line}"; }
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    local m
    for m in ${staging}; do echo "	${m} => ${m} ${KUBE_STAGING_VERSION}"; done
    echo ")"
  } >"${dir}/go.mod"
}

gomod_etcd() {
  local dir="$1"
  {
    echo "${HEADER}"
    echo
    echo "module phalanx/tests/controlplane/etcd"
    echo
    echo "go 1.24"
    echo
    echo "require ("
    echo "	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
    echo "	go.etcd.io/etcd/api/v3 ${ETCD_VERSION}"
    echo "	go.etcd.io/etcd/client/pkg/v3 ${ETCD_VERSION}"
    echo "	go.etcd.io/etcd/client/v3 ${ETCD_VERSION}"
    echo "	go.etcd.io/etcd/pkg/v3 ${ETCD_VERSION}"
    echo ")"
  } >"${dir}/go.mod"
}

gomod_kwok() {
  local dir="$1"
  {
    echo "${HEADER}"
    echo
    echo "module phalanx/tests/controlplane/kwok"
    echo
    echo "go 1.26.0"
    echo
    echo "require sigs.k8s.io/kwok ${KWOK_VERSION}"
  } >"${dir}/go.mod"
}

upstream_go_line() { # module@version: the `go` line of that module's own go.mod
  local gomod
  gomod="$(go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${gomod}" ]] || die "could not download $1"
  grep -m1 '^go ' "${gomod}"
}

# Helm and Prometheus carry no replace directives, so requiring the module is enough;
# the `go` line follows upstream's (Prometheus needs a newer Go than it did last year).
gomod_helm() {
  local dir="$1" go_line
  go_line="$(upstream_go_line "helm.sh/helm/v3@${HELM_VERSION}")"
  {
    echo "${HEADER}"
    echo
    echo "module phalanx/tests/controlplane/helm"
    echo
    echo "${go_line}"
    echo
    echo "require helm.sh/helm/v3 ${HELM_VERSION}"
  } >"${dir}/go.mod"
}

gomod_promtool() {
  local dir="$1" go_line
  go_line="$(upstream_go_line "github.com/prometheus/prometheus@${PROMETHEUS_VERSION}")"
  {
    echo "${HEADER}"
    echo
    echo "module phalanx/tests/controlplane/promtool"
    echo
    echo "${go_line}"
    echo
    echo "require github.com/prometheus/prometheus ${PROMETHEUS_VERSION}"
  } >"${dir}/go.mod"
}

# scheduler-plugins embeds kube-scheduler (k8s.io/kubernetes), so it needs the same staging
# pins as go/kube -- at the k8s.io/* versions scheduler-plugins itself builds with. Its own
# go.mod carries exactly those as replace directives, which are ignored in a dependency:
# copy them (published module versions only) into the wrapper. A pinned version the module
# proxy does not serve (a restricted proxy may lack staging modules scheduler-plugins never
# requires directly) falls back to KUBE_STAGING_VERSION, marked in go.mod. Of those, only
# k8s.io/csi-translation-lib is compiled into cmd/scheduler (`go list -deps`); kube-scheduler
# 1.34's volume plugins build against its v0.35 release unchanged.
gomod_scheduler-plugins() {
  local dir="$1" upstream_mod go_line replaces
  upstream_mod="$(go mod download -json "sigs.k8s.io/scheduler-plugins@${SCHEDULER_PLUGINS_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${upstream_mod}" ]] || die "could not download sigs.k8s.io/scheduler-plugins@${SCHEDULER_PLUGINS_VERSION}"
  go_line="$(grep -m1 '^go ' "${upstream_mod}")"
  replaces="$(awk '
    /^replace[[:space:]]*\($/ { block = 1; next }
    block && /^\)/ { block = 0; next }
    block { print; next }
    /^replace[[:space:]]/ { sub(/^replace[[:space:]]+/, ""); print }
  ' "${upstream_mod}" | sed 's/^[[:space:]]*//; /^$/d' | sort -u)"
  [[ -n "${replaces}" ]] || die "no replace directives found in ${upstream_mod}"
  if grep -q '=> *\.' <<<"${replaces}"; then
    die "${upstream_mod} replaces a module with a local path; cannot wrap it"
  fi
  {
    echo "${HEADER}"
    echo
    echo "module phalanx/tests/controlplane/scheduler-plugins"
    echo
    echo "${go_line}"
    echo
    echo "require sigs.k8s.io/scheduler-plugins ${SCHEDULER_PLUGINS_VERSION}"
    echo
    echo "replace ("
    local line target ver answer
    while IFS= read -r line; do
      read -r _ _ target ver _ <<<"${line}"
      # `go mod download -json` exits non-zero for a version it cannot fetch; its JSON says why.
      answer="$(go mod download -json "${target}@${ver}" 2>/dev/null || true)"
      if grep -q '"Error"' <<<"${answer}"; then
        answer="$(go mod download -json "${target}@${KUBE_STAGING_VERSION}" 2>/dev/null || true)"
        if grep -q '"Error"' <<<"${answer}"; then
          # Neither exists (a module retired upstream): the build cannot need it.
          log "scheduler-plugins: ${target}@${ver} is not served; dropping its replace line"
          continue
        fi
        log "scheduler-plugins: ${target}@${ver} is not served; pinning ${KUBE_STAGING_VERSION}"
        echo "	${line% "${ver}"} ${KUBE_STAGING_VERSION} // ${ver} not served by the module proxy"
      else
        echo "	${line}"
      fi
    done <<<"${replaces}"
    echo ")"
  } >"${dir}/go.mod"
}

update_module() { # family
  local fam="$1" dir="${GO_DIR}/$1" pkgs=() pair
  mkdir -p "${dir}"
  for pair in ${FAMILY_BINS[${fam}]}; do pkgs+=("${pair#*=}"); done
  log "${fam}: regenerating ${dir#"${HERE}/"}/go.mod from versions.env"
  rm -f "${dir}/go.sum"
  "gomod_${fam}" "${dir}"
  write_tools_go "${dir}" "${pkgs[@]}"
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy >&2)
}

check_module() { # family: go.mod must pin what versions.env says
  local fam="$1" dir="${GO_DIR}/$1" mod ver
  read -r mod ver <<<"${FAMILY_MODULE[${fam}]}"
  [[ -f "${dir}/go.mod" && -f "${dir}/go.sum" ]] \
    || die "${dir#"${HERE}/"}/go.mod or go.sum missing: run $0 --update-modules"
  local got
  got="$(cd "${dir}" && go list -m -f '{{.Version}}' "${mod}")"
  [[ "${got}" == "${ver}" ]] \
    || die "${fam}: go/${fam}/go.mod pins ${mod} ${got} but versions.env says ${ver}: run $0 --update-modules"
}

# ---------------------------------------------------------------- build
build_family() { # family
  local fam="$1" dir="${GO_DIR}/$1" stamp="${STAMP_DIR}/$1" pair name pkg all_there=1
  for pair in ${FAMILY_BINS[${fam}]}; do
    [[ -x "${BIN_DIR}/${pair%%=*}" ]] || all_there=0
  done
  # The stamp's first line names the module and version built; a family whose version
  # is not part of the cache key (helm, promtool) rebuilds when versions.env moves on.
  if [[ -f "${stamp}" && "${all_there}" == 1 && "$(head -n1 "${stamp}")" == "${FAMILY_MODULE[${fam}]}" ]]; then
    log "${fam}: up to date ($(tr '\n' ' ' <"${stamp}"))"
    return 0
  fi
  require_go
  check_module "${fam}"
  local start=${SECONDS} tmp
  tmp="$(mktemp -d "${TOOLS_DIR}/.build-${fam}.XXXXXX")"
  for pair in ${FAMILY_BINS[${fam}]}; do
    name="${pair%%=*}"; pkg="${pair#*=}"
    log "${fam}: go build ${pkg} -> ${name} ..."
    local t0=${SECONDS}
    (cd "${dir}" && go build -trimpath -ldflags "-s -w ${FAMILY_LDFLAGS[${fam}]}" -o "${tmp}/${name}" "${pkg}") \
      || { rm -rf "${tmp}"; die "${fam}: building ${pkg} failed"; }
    log "${fam}: ${name} built in $((SECONDS - t0))s"
  done
  for pair in ${FAMILY_BINS[${fam}]}; do
    name="${pair%%=*}"
    mv -f "${tmp}/${name}" "${BIN_DIR}/${name}"
  done
  rm -rf "${tmp}"
  {
    echo "${FAMILY_MODULE[${fam}]}"
    go version
  } >"${stamp}"
  log "${fam}: done in $((SECONDS - start))s"
}

main() {
  local update=0 print_only=0 with_deploy=0 families=() arg
  for arg in "$@"; do
    case "${arg}" in
      --update-modules) update=1 ;;
      --print-bin-dir) print_only=1 ;;
      --with-deploy-tools) with_deploy=1 ;;
      -h|--help) sed -n '2,29p' "$0" >&2; exit 0 ;;
      -*) die "unknown option ${arg}" ;;
      *) [[ -n "${FAMILY_BINS[${arg}]+x}" ]] || die "unknown tool family '${arg}' (known: ${!FAMILY_BINS[*]})"
         families+=("${arg}") ;;
    esac
  done
  [[ ${#families[@]} -gt 0 ]] || families=("${DEFAULT_FAMILIES[@]}")
  if [[ "${with_deploy}" == 1 ]]; then
    local fam have
    for fam in "${DEPLOY_FAMILIES[@]}"; do
      have=0
      for arg in "${families[@]}"; do [[ "${arg}" == "${fam}" ]] && have=1; done
      [[ "${have}" == 1 ]] || families+=("${fam}")
    done
  fi

  if [[ "${print_only}" == 1 ]]; then
    echo "${BIN_DIR}"
    return 0
  fi

  if [[ "${update}" == 1 ]]; then
    require_go
    local fam
    for fam in "${families[@]}"; do update_module "${fam}"; done
    log "modules regenerated; commit go/*/go.mod, go.sum and tools.go, then run $0 to build"
    echo "${BIN_DIR}"
    return 0
  fi

  mkdir -p "${BIN_DIR}" "${STAMP_DIR}"
  # One build at a time per cache entry (parallel CI jobs, a developer plus pytest...).
  exec 9>"${TOOLS_DIR}/.lock"
  if ! flock -n 9; then
    log "another build-tools.sh holds ${TOOLS_DIR}/.lock; waiting ..."
    flock 9
  fi
  local total_start=${SECONDS} fam
  for fam in "${families[@]}"; do build_family "${fam}"; done
  log "all requested tools ready in ${BIN_DIR} ($((SECONDS - total_start))s)"
  echo "${BIN_DIR}"
}

main "$@"
