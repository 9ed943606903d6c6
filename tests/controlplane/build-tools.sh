#!/usr/bin/env bash
# Build the real control-plane binaries used by the e2e tier (DESIGN.md §9, tier 3) from
# the Go modules pinned in versions.env, into per-version cache entries OUTSIDE the repo:
#
#   ${PHALANX_TOOLS_CACHE:-$HOME/.cache/phalanx-tools}/
#     <kube>-<kwok>-<etcd>/bin/  etcd kube-apiserver kube-scheduler kwok, and when asked
#                                helm promtool kube-scheduler-plugins      (the default entry)
#                                kube-controller-manager (family kube-controller-manager)
#     kube-<KUBE_NEXT_VERSION>/bin/  kube-apiserver kube-scheduler of the newer release
#     kube-<KUBE_136_VERSION>/bin/   kube-apiserver kube-scheduler of the release between
#     kuberay-<KUBERAY_VERSION>/bin/ray-operator, crds/ray.io_*.yaml
#
# Usage:
#   tests/controlplane/build-tools.sh                      # the default families (kube etcd kwok)
#   tests/controlplane/build-tools.sh FAMILY...            # only these families
#                                                          # (kube etcd kwok kube-controller-manager
#                                                          #  kube-next kube-136 ray-operator helm
#                                                          #  promtool scheduler-plugins)
#   tests/controlplane/build-tools.sh --with-e2e-tools     # + kube-controller-manager kube-next
#                                                          #   kube-136 ray-operator scheduler-plugins
#   tests/controlplane/build-tools.sh --with-deploy-tools  # + helm promtool
#   tests/controlplane/build-tools.sh --print-bin-dir [FAMILY]  # a bin dir; builds nothing
#   tests/controlplane/build-tools.sh --update-modules [FAMILY...]  # regenerate go/<family>/
#                                                          # go.mod, go.sum from versions.env
#
# The LAST line of stdout is always the default entry's bin dir (or, for --print-bin-dir
# FAMILY, that family's); progress goes to stderr. A family whose binaries and stamp are
# there is skipped, so a run builds only what is missing of what it asked for.
#
# Families build in parallel: every stale family downloads its modules at once (network
# bound), then compiles in one of PHALANX_TOOLS_JOBS slots (default 2: on two cores a second
# build fills the single-threaded link and download gaps of the first). Each family has its
# own Go wrapper module under go/<family>/ so that their dependency graphs never have to
# agree. Their go.sum files are committed and the build runs with -mod=readonly, so a clean
# clone needs nothing but Go and the module proxy.
#
# Adding a family: add a version line to versions.env, a `gomod_<family>` generator below, an
# entry in FAMILY_BINS / FAMILY_LDFLAGS / FAMILY_MODULE / FAMILY_ENTRY (and FAMILY_FILES for
# files other than binaries), and run --update-modules FAMILY. Families not in
# DEFAULT_FAMILIES are built only when named or by the --with-* option of their group.
# shellcheck disable=SC2317  # gomod_<family> and artifacts_<family> are called by name
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
: "${KUBE_NEXT_VERSION:?missing in versions.env}"
: "${KUBE_NEXT_STAGING_VERSION:?missing in versions.env}"
: "${KUBE_136_VERSION:?missing in versions.env}"
: "${KUBE_136_STAGING_VERSION:?missing in versions.env}"
: "${ETCD_VERSION:?missing in versions.env}"
: "${KWOK_VERSION:?missing in versions.env}"
: "${HELM_VERSION:?missing in versions.env}"
: "${PROMETHEUS_VERSION:?missing in versions.env}"
: "${SCHEDULER_PLUGINS_VERSION:?missing in versions.env}"
: "${KUBERAY_VERSION:?missing in versions.env}"

CACHE_ROOT="${PHALANX_TOOLS_CACHE:-${HOME}/.cache/phalanx-tools}"
# The default entry: launcher.py, tests/deploy, bench/ and deploy/render.sh read this path.
DEFAULT_ENTRY="${KUBE_VERSION}-${KWOK_VERSION}-${ETCD_VERSION}"
JOBS="${PHALANX_TOOLS_JOBS:-2}"
[[ "${JOBS}" =~ ^[1-9][0-9]*$ ]] || die "PHALANX_TOOLS_JOBS must be a positive integer, not '${JOBS}'"

# ---------------------------------------------------------------- families
DEFAULT_FAMILIES=(kube etcd kwok)
# What only some e2e tests need (--with-e2e-tools): kube-controller-manager of KUBE_VERSION (its
# resourceclaim controller turns DRA claim templates into claims), the newer control planes (1.37
# and 1.36), the third-party operator and scheduler-plugins' kube-scheduler (the chart's
# `kubeScheduler.queueSort: Coscheduling`, tests/e2e/test_queue_sort.py; also bench/run.py's
# coscheduling peer).
E2E_FAMILIES=(kube-controller-manager kube-next kube-136 ray-operator scheduler-plugins)
# Chart and alert-rule tooling for tests/deploy (--with-deploy-tools).
DEPLOY_FAMILIES=(helm promtool)

# "binary=go-package" pairs, built from inside go/<family>/.
declare -A FAMILY_BINS=(
  [kube]="kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  [kube-next]="kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  [kube-136]="kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  # A family of its own (not a third binary of `kube`): adding it leaves the apiserver and the
  # scheduler every other test runs untouched, and its larger dependency graph stays apart.
  [kube-controller-manager]="kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
  # In etcd 3.5/3.6 the server module's root package is the `etcd` main package.
  [etcd]="etcd=go.etcd.io/etcd/server/v3"
  [kwok]="kwok=sigs.k8s.io/kwok/cmd/kwok"
  [helm]="helm=helm.sh/helm/v3/cmd/helm"
  [promtool]="promtool=github.com/prometheus/prometheus/cmd/promtool"
  [scheduler-plugins]="kube-scheduler-plugins=sigs.k8s.io/scheduler-plugins/cmd/scheduler"
  # The operator's main package is its module root (main.go).
  [ray-operator]="ray-operator=github.com/ray-project/kuberay/ray-operator"
)

# The cache entry (a directory under CACHE_ROOT) each family is built into, named by the
# versions it holds.
declare -A FAMILY_ENTRY=(
  [kube]="${DEFAULT_ENTRY}"
  [etcd]="${DEFAULT_ENTRY}"
  [kwok]="${DEFAULT_ENTRY}"
  [kube-controller-manager]="${DEFAULT_ENTRY}"
  [helm]="${DEFAULT_ENTRY}"
  [promtool]="${DEFAULT_ENTRY}"
  [scheduler-plugins]="${DEFAULT_ENTRY}"
  [kube-next]="kube-${KUBE_NEXT_VERSION}"
  [kube-136]="kube-${KUBE_136_VERSION}"
  [ray-operator]="kuberay-${KUBERAY_VERSION}"
)

# Files other than the binaries a family leaves in its entry (paths relative to it), made by
# its `artifacts_<family>` function from the downloaded module.
declare -A FAMILY_FILES=(
  [ray-operator]="crds/ray.io_rayclusters.yaml crds/ray.io_rayjobs.yaml crds/ray.io_rayservices.yaml"
)

# -X flags so that the binaries report their real version (a module build has no git
# tree to derive it from; without these kube-* say v0.0.0-master+$Format...).
kube_ldflags() { # version
  local minor="${1#v*.}" major="${1#v}"
  minor="${minor%%.*}"; major="${major%%.*}"
  echo "-X k8s.io/component-base/version.gitVersion=$1 -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"
}
KUBE_MINOR="${KUBE_VERSION#v*.}"; KUBE_MINOR="${KUBE_MINOR%%.*}"
KUBE_MAJOR="${KUBE_VERSION#v}"; KUBE_MAJOR="${KUBE_MAJOR%%.*}"
# Prometheus tags its Go module v0.<major*100+minor>.<patch> for release <major>.<minor>.<patch>
# (v0.316.0 is Prometheus 3.16.0); promtool reports the release.
PROM_MINORS="${PROMETHEUS_VERSION#v0.}"; PROM_MINORS="${PROM_MINORS%%.*}"
PROMETHEUS_RELEASE="$((PROM_MINORS / 100)).$((PROM_MINORS % 100)).${PROMETHEUS_VERSION##*.}"
HELM_PKG="helm.sh/helm/v3"
# The k8s.io/kubernetes release scheduler-plugins pins (its wrapper go.mod's replace line).
SP_KUBE_VERSION="$(sed -n 's#^[[:space:]]*k8s\.io/kubernetes => k8s\.io/kubernetes \(v[0-9.]*\).*#\1#p' "${GO_DIR}/scheduler-plugins/go.mod" 2>/dev/null || true)"
declare -A FAMILY_LDFLAGS=(
  [kube]="$(kube_ldflags "${KUBE_VERSION}")"
  [kube-next]="$(kube_ldflags "${KUBE_NEXT_VERSION}")"
  [kube-136]="$(kube_ldflags "${KUBE_136_VERSION}")"
  [kube-controller-manager]="$(kube_ldflags "${KUBE_VERSION}")"
  [etcd]=""
  [kwok]=""  # kwok carries its version in pkg/consts
  # Helm's release Makefile sets these. The Kubernetes version is the one `helm template`
  # reports as .Capabilities.KubeVersion and `helm lint` checks deprecations against
  # (v1.20 if unset): the release the e2e tier runs.
  [helm]="-X ${HELM_PKG}/internal/version.version=${HELM_VERSION} -X ${HELM_PKG}/internal/version.gitTreeState=clean -X ${HELM_PKG}/pkg/chartutil.k8sVersionMajor=${KUBE_MAJOR} -X ${HELM_PKG}/pkg/chartutil.k8sVersionMinor=${KUBE_MINOR} -X ${HELM_PKG}/pkg/lint/rules.k8sVersionMajor=${KUBE_MAJOR} -X ${HELM_PKG}/pkg/lint/rules.k8sVersionMinor=${KUBE_MINOR}"
  [promtool]="-X github.com/prometheus/common/version.Version=${PROMETHEUS_RELEASE} -X github.com/prometheus/common/version.Branch=HEAD"
  # The Kubernetes release it embeds, as for kube: kube-scheduler 1.34 derives its emulation
  # version from gitVersion and refuses to start on scheduler-plugins' own tag (v0.34.x).
  [scheduler-plugins]="$( [[ -n "${SP_KUBE_VERSION}" ]] && kube_ldflags "${SP_KUBE_VERSION}")"
  [ray-operator]=""  # its version is a constant in controllers/ray/utils
)

# The module each family wraps and the version versions.env pins for it
# (checked against go/<family>/go.mod before building).
declare -A FAMILY_MODULE=(
  [kube]="k8s.io/kubernetes ${KUBE_VERSION}"
  [kube-next]="k8s.io/kubernetes ${KUBE_NEXT_VERSION}"
  [kube-136]="k8s.io/kubernetes ${KUBE_136_VERSION}"
  [kube-controller-manager]="k8s.io/kubernetes ${KUBE_VERSION}"
  [etcd]="go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
  [kwok]="sigs.k8s.io/kwok ${KWOK_VERSION}"
  [helm]="helm.sh/helm/v3 ${HELM_VERSION}"
  [promtool]="github.com/prometheus/prometheus ${PROMETHEUS_VERSION}"
  [scheduler-plugins]="sigs.k8s.io/scheduler-plugins ${SCHEDULER_PLUGINS_VERSION}"
  [ray-operator]="github.com/ray-project/kuberay/ray-operator ${KUBERAY_VERSION}"
)

# Build tags. promtool here only checks and unit-tests rule files: Prometheus' own
# `remove_all_sd` tag leaves out the cloud service-discovery plugins (AWS, Azure, GCE, ... SDKs),
# a fifth of its packages and the heaviest ones.
declare -A FAMILY_TAGS=(
  [promtool]="remove_all_sd"
)

entry_dir() { echo "${CACHE_ROOT}/${FAMILY_ENTRY[$1]}"; }

# ---------------------------------------------------------------- go env
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false"
# A CI run may want its own Go caches; otherwise Go's defaults ($HOME/go, $HOME/.cache).

require_go() {
  command -v go >/dev/null 2>&1 || die "'go' not found on PATH (Go >= 1.26 is needed to build kwok ${KWOK_VERSION} and Kubernetes ${KUBE_NEXT_VERSION})"
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

downloaded_gomod() { # module@version: the path of its downloaded go.mod
  local gomod
  gomod="$(go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${gomod}" ]] || die "could not download $1"
  echo "${gomod}"
}

# k8s.io/kubernetes lists every staging module as v0.0.0 replaced by ./staging/...; replace
# directives of a dependency are ignored, so the wrapper pins each of them to its published
# release.
write_kube_gomod() { # dir wrapper-module kubernetes-version staging-version
  local dir="$1" module="$2" version="$3" staging_version="$4" upstream_mod
  upstream_mod="$(downloaded_gomod "k8s.io/kubernetes@${version}")"
  local staging
  staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "${upstream_mod}" | sort -u)"
  [[ -n "${staging}" ]] || die "no staging replace lines found in ${upstream_mod}"
  local go_line godebug_line
  go_line="$(grep -m1 '^go ' "${upstream_mod}")"
  godebug_line="$(grep -m1 '^godebug ' "${upstream_mod}" || true)"
  {
    echo "${HEADER}"
    echo
    echo "module ${module}"
    echo
    echo "${go_line}"
    [[ -n "${godebug_line}" ]] && { echo; echo "${godebug_line}"; }
    echo
    echo "require k8s.io/kubernetes ${version}"
    echo
    echo "replace ("
    local m
    for m in ${staging}; do echo "	${m} => ${m} ${staging_version}"; done
    echo ")"
  } >"${dir}/go.mod"
}

gomod_kube() {
  write_kube_gomod "$1" phalanx/tests/controlplane/kube "${KUBE_VERSION}" "${KUBE_STAGING_VERSION}"
}

gomod_kube-controller-manager() {
  write_kube_gomod "$1" phalanx/tests/controlplane/kube-controller-manager "${KUBE_VERSION}" "${KUBE_STAGING_VERSION}"
}

gomod_kube-next() {
  write_kube_gomod "$1" phalanx/tests/controlplane/kube-next "${KUBE_NEXT_VERSION}" "${KUBE_NEXT_STAGING_VERSION}"
}

gomod_kube-136() {
  write_kube_gomod "$1" phalanx/tests/controlplane/kube-136 "${KUBE_136_VERSION}" "${KUBE_136_STAGING_VERSION}"
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

# A module without replace directives: requiring it is enough; the `go` line follows
# upstream's (Prometheus needs a newer Go than it did last year).
write_plain_gomod() { # dir wrapper-module upstream-module version
  local dir="$1" module="$2" upstream="$3" version="$4" go_line
  go_line="$(grep -m1 '^go ' "$(downloaded_gomod "${upstream}@${version}")")"
  {
    echo "${HEADER}"
    echo
    echo "module ${module}"
    echo
    echo "${go_line}"
    echo
    echo "require ${upstream} ${version}"
  } >"${dir}/go.mod"
}

gomod_helm() {
  write_plain_gomod "$1" phalanx/tests/controlplane/helm helm.sh/helm/v3 "${HELM_VERSION}"
}

gomod_promtool() {
  write_plain_gomod "$1" phalanx/tests/controlplane/promtool \
    github.com/prometheus/prometheus "${PROMETHEUS_VERSION}"
}

gomod_ray-operator() {
  local upstream=github.com/ray-project/kuberay/ray-operator
  if grep -q '^replace' "$(downloaded_gomod "${upstream}@${KUBERAY_VERSION}")"; then
    die "${upstream}@${KUBERAY_VERSION} has replace directives: copy them as for scheduler-plugins"
  fi
  write_plain_gomod "$1" phalanx/tests/controlplane/ray-operator "${upstream}" "${KUBERAY_VERSION}"
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
  upstream_mod="$(downloaded_gomod "sigs.k8s.io/scheduler-plugins@${SCHEDULER_PLUGINS_VERSION}")"
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
    || die "${dir#"${HERE}/"}/go.mod or go.sum missing: run $0 --update-modules ${fam}"
  local got
  got="$(cd "${dir}" && go list -m -f '{{.Version}}' "${mod}")"
  [[ "${got}" == "${ver}" ]] \
    || die "${fam}: go/${fam}/go.mod pins ${mod} ${got} but versions.env says ${ver}: run $0 --update-modules ${fam}"
}

# ---------------------------------------------------------------- artifacts
# The operator's CRDs, from the module source that was built (not committed to the repo).
artifacts_ray-operator() { # out-dir
  local src
  src="$(cd "${GO_DIR}/ray-operator" && go list -m -f '{{.Dir}}' github.com/ray-project/kuberay/ray-operator)"
  [[ -d "${src}/config/crd/bases" ]] || die "ray-operator: no config/crd/bases in ${src}"
  mkdir -p "$1/crds"
  local f
  for f in ${FAMILY_FILES[ray-operator]}; do
    cp "${src}/config/crd/bases/${f#crds/}" "$1/${f}" || die "ray-operator: ${f#crds/} missing in ${src}/config/crd/bases"
  done
}

# ---------------------------------------------------------------- build
is_fresh() { # family: every binary and file there, and the stamp names this module version
  local fam="$1" entry pair f
  entry="$(entry_dir "${fam}")"
  for pair in ${FAMILY_BINS[${fam}]}; do
    [[ -x "${entry}/bin/${pair%%=*}" ]] || return 1
  done
  for f in ${FAMILY_FILES[${fam}]:-}; do
    [[ -f "${entry}/${f}" ]] || return 1
  done
  # The stamp's first line names the module and version built; a family whose version
  # is not part of its entry's name (helm, promtool) rebuilds when versions.env moves on.
  [[ -f "${entry}/stamps/${fam}" && "$(head -n1 "${entry}/stamps/${fam}")" == "${FAMILY_MODULE[${fam}]}" ]]
}

# At most JOBS compiles at once across this run's families: a slot is a lock file, held
# until the family's subshell exits (its descriptor stays open until then).
SLOT_DIR=""
acquire_slot() {
  local i fd
  while :; do
    for ((i = 1; i <= JOBS; i++)); do
      exec {fd}>"${SLOT_DIR}/slot-${i}"
      if flock -n "${fd}"; then return 0; fi
      exec {fd}>&-
    done
    sleep 1
  done
}

build_family() { # family; runs in a background subshell of main
  local fam="$1" dir="${GO_DIR}/$1" entry name pair start=${SECONDS}
  entry="$(entry_dir "${fam}")"
  local tmp
  tmp="$(mktemp -d "${entry}/.build-${fam}.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: `tmp` is local and gone when the trap runs
  trap "rm -rf '${tmp}'" EXIT
  local pkgs=() names=()
  for pair in ${FAMILY_BINS[${fam}]}; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  # Downloads need no slot: every family fetches its modules at once. Listing the packages
  # fetches only the modules they import (about half of go.mod's build list, whose test-only
  # dependencies `go mod download` would fetch too).
  log "${fam}: downloading modules ..."
  if ! (cd "${dir}" && go list -deps -tags "${FAMILY_TAGS[${fam}]:-}" "${pkgs[@]}") \
    >/dev/null 2>"${tmp}/download.log"; then
    cat "${tmp}/download.log" >&2
    die "${fam}: downloading the modules of ${pkgs[*]} failed"
  fi
  local fetched=$((SECONDS - start))
  log "${fam}: $(grep -c '^go: downloading' "${tmp}/download.log" || true) modules fetched in ${fetched}s"
  acquire_slot
  local t0=${SECONDS}
  log "${fam}: go build ${pkgs[*]} (waited $((t0 - start - fetched))s for a slot) ..."
  local out="${tmp}/${names[0]}"
  # Several main packages in one `go build` share its action graph and link in parallel;
  # `-o dir/` then names each binary after its package's last element.
  [[ ${#pkgs[@]} -gt 1 ]] && out="${tmp}/"
  (cd "${dir}" && go build -trimpath -tags "${FAMILY_TAGS[${fam}]:-}" \
    -ldflags "-s -w ${FAMILY_LDFLAGS[${fam}]}" -o "${out}" "${pkgs[@]}") \
    || die "${fam}: building ${pkgs[*]} failed"
  for name in "${names[@]}"; do
    [[ -x "${tmp}/${name}" ]] || die "${fam}: go build left no ${name} in ${tmp}"
  done
  if declare -F "artifacts_${fam}" >/dev/null; then "artifacts_${fam}" "${tmp}"; fi
  # Install: binaries and files first, the stamp last (is_fresh trusts the stamp).
  mkdir -p "${entry}/bin" "${entry}/stamps"
  for name in "${names[@]}"; do mv -f "${tmp}/${name}" "${entry}/bin/${name}"; done
  local f
  for f in ${FAMILY_FILES[${fam}]:-}; do
    mkdir -p "$(dirname "${entry}/${f}")"
    mv -f "${tmp}/${f}" "${entry}/${f}"
  done
  {
    echo "${FAMILY_MODULE[${fam}]}"
    go version
    echo "modules ${fetched}s, build $((SECONDS - t0))s"
  } >"${entry}/stamps/${fam}"
  log "${fam}: done in $((SECONDS - start))s (modules ${fetched}s, build $((SECONDS - t0))s)"
}

lock_entries() { # families...: one build at a time per cache entry (CI jobs, pytest, a developer)
  local entries fam e fd
  entries="$(for fam in "$@"; do echo "${FAMILY_ENTRY[${fam}]}"; done | sort -u)"
  for e in ${entries}; do  # sorted: two runs never wait on each other crosswise
    mkdir -p "${CACHE_ROOT}/${e}/bin" "${CACHE_ROOT}/${e}/stamps"
    exec {fd}>"${CACHE_ROOT}/${e}/.lock"
    if ! flock -n "${fd}"; then
      log "another build-tools.sh holds ${CACHE_ROOT}/${e}/.lock; waiting ..."
      flock "${fd}"
    fi
  done
}

build_families() { # families...
  lock_entries "$@"
  local fam stale=()
  for fam in "$@"; do
    if is_fresh "${fam}"; then
      log "${fam}: up to date ($(tr '\n' ' ' <"$(entry_dir "${fam}")/stamps/${fam}"))"
    else
      stale+=("${fam}")
    fi
  done
  [[ ${#stale[@]} -gt 0 ]] || return 0
  require_go
  for fam in "${stale[@]}"; do check_module "${fam}"; done
  SLOT_DIR="$(mktemp -d "${CACHE_ROOT}/.slots.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the path is fixed for this run
  trap "rm -rf '${SLOT_DIR}'" EXIT
  local pids=() failed=() i
  log "building ${stale[*]} (${JOBS} at a time) ..."
  for fam in "${stale[@]}"; do
    build_family "${fam}" &
    pids+=("$!")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[${i}]}" || failed+=("${stale[${i}]}")
  done
  [[ ${#failed[@]} -eq 0 ]] || die "failed to build: ${failed[*]} (see the messages above)"
}

main() {
  local update=0 print_only=0 with_deploy=0 with_e2e=0 families=() arg
  for arg in "$@"; do
    case "${arg}" in
      --update-modules) update=1 ;;
      --print-bin-dir) print_only=1 ;;
      --with-deploy-tools) with_deploy=1 ;;
      --with-e2e-tools) with_e2e=1 ;;
      -h|--help) sed -n '2,39p' "$0" >&2; exit 0 ;;
      -*) die "unknown option ${arg}" ;;
      *) [[ -n "${FAMILY_BINS[${arg}]+x}" ]] || die "unknown tool family '${arg}' (known: ${!FAMILY_BINS[*]})"
         families+=("${arg}") ;;
    esac
  done

  if [[ "${print_only}" == 1 ]]; then
    [[ ${#families[@]} -le 1 ]] || die "--print-bin-dir takes at most one family"
    echo "${CACHE_ROOT}/${FAMILY_ENTRY[${families[0]:-kube}]}/bin"
    return 0
  fi

  [[ ${#families[@]} -gt 0 ]] || families=("${DEFAULT_FAMILIES[@]}")
  local fam have
  [[ "${with_e2e}" == 1 ]] && families+=("${E2E_FAMILIES[@]}")
  [[ "${with_deploy}" == 1 ]] && families+=("${DEPLOY_FAMILIES[@]}")
  local unique=()
  for fam in "${families[@]}"; do
    have=0
    for arg in "${unique[@]}"; do [[ "${arg}" == "${fam}" ]] && have=1; done
    [[ "${have}" == 1 ]] || unique+=("${fam}")
  done
  families=("${unique[@]}")

  if [[ "${update}" == 1 ]]; then
    require_go
    for fam in "${families[@]}"; do update_module "${fam}"; done
    log "modules regenerated; commit go/*/go.mod, go.sum and tools.go, then run $0 to build"
    echo "${CACHE_ROOT}/${DEFAULT_ENTRY}/bin"
    return 0
  fi

  local total_start=${SECONDS}
  build_families "${families[@]}"
  log "ready: ${families[*]} ($((SECONDS - total_start))s)"
  echo "${CACHE_ROOT}/${DEFAULT_ENTRY}/bin"
}

main "$@"; exit  # on one line: an edit of this file during a build cannot be read mid-run
