#!/usr/bin/env bash
# Regenerate the plain files under deploy/ from the Helm chart (the one source of truth):
#
#   deploy/manifests/phalanx.yaml          the chart rendered with its default values for
#                                          Kubernetes KUBE_VERSION (tests/controlplane/
#                                          versions.env), CRDs included, for namespace
#                                          phalanx-system (preceded by that Namespace)
#   deploy/prometheus/phalanx-alerts.yaml  copy of helm/phalanx/files/phalanx-alerts.yaml
#   deploy/grafana/phalanx-dashboard.json  copy of helm/phalanx/files/phalanx-dashboard.json
#
# Usage:
#   deploy/render.sh            # rewrite the files
#   deploy/render.sh --check    # change nothing; exit 1 with a diff if any file is stale
#
# helm: $HELM, else the pinned build (tests/controlplane/build-tools.sh helm), else PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="${ROOT}/helm/phalanx"
RELEASE=phalanx
NAMESPACE=phalanx-system
# The release the tests run (tests/controlplane/versions.env): the chart's kube-scheduler
# follows the cluster's version, which `helm template` would otherwise take from helm itself.
# shellcheck source=../tests/controlplane/versions.env
KUBE_VERSION="$(. "${ROOT}/tests/controlplane/versions.env" && echo "${KUBE_VERSION}")"

die() { printf 'render.sh: %s\n' "$*" >&2; exit 2; }

find_helm() {
  if [[ -n "${HELM:-}" ]]; then echo "${HELM}"; return; fi
  local built
  built="$(bash "${ROOT}/tests/controlplane/build-tools.sh" --print-bin-dir)/helm"
  if [[ -x "${built}" ]]; then echo "${built}"; return; fi
  command -v helm || die "helm not found: set HELM, or build it with tests/controlplane/build-tools.sh helm"
}

render_manifests() { # helm
  cat <<HEADER
# Phalanx, plain manifests: helm/phalanx rendered with its default values by
# deploy/render.sh (helm template ${RELEASE} --namespace ${NAMESPACE} --include-crds
# --kube-version ${KUBE_VERSION}), so for Kubernetes ${KUBE_VERSION}: its kube-scheduler is
# that release's. For another, render your own with --kube-version, or edit the image.
# Generated: edit the chart, then run deploy/render.sh. Install with
#   kubectl apply --server-side -f deploy/manifests/phalanx.yaml
# If scheduler-plugins already installed the PodGroup CRD, delete the
# CustomResourceDefinition document below first (it is the one the chart ships in crds/).
---
apiVersion: v1
kind: Namespace
metadata:
  name: ${NAMESPACE}
HEADER
  "$1" template "${RELEASE}" "${CHART}" --namespace "${NAMESPACE}" --include-crds \
    --kube-version "${KUBE_VERSION}"
}

main() {
  local check=0
  case "${1:-}" in
    "") ;;
    --check) check=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (use --check or nothing)" ;;
  esac
  local helm out
  helm="$(find_helm)"
  out="$(mktemp -d)"
  # shellcheck disable=SC2064  # expand now: ${out} is local to main
  trap "rm -rf '${out}'" EXIT
  mkdir -p "${out}/manifests" "${out}/prometheus" "${out}/grafana"
  render_manifests "${helm}" >"${out}/manifests/phalanx.yaml"
  cp "${CHART}/files/phalanx-alerts.yaml" "${out}/prometheus/phalanx-alerts.yaml"
  cp "${CHART}/files/phalanx-dashboard.json" "${out}/grafana/phalanx-dashboard.json"

  local files=(manifests/phalanx.yaml prometheus/phalanx-alerts.yaml grafana/phalanx-dashboard.json)
  local f stale=0
  for f in "${files[@]}"; do
    if [[ "${check}" == 1 ]]; then
      if ! diff -u --label "deploy/${f}" --label "rendered" "${ROOT}/deploy/${f}" "${out}/${f}" >&2; then
        printf 'render.sh: deploy/%s is stale: run deploy/render.sh\n' "${f}" >&2
        stale=1
      fi
    else
      mkdir -p "$(dirname "${ROOT}/deploy/${f}")"
      cp "${out}/${f}" "${ROOT}/deploy/${f}"
      printf 'wrote deploy/%s\n' "${f}"
    fi
  done
  return "${stale}"
}

main "$@"
