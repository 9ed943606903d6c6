# Phalanx. The README's two commands: `make demo` (set up, run the demo) and `make test`
# (set up, run every check and test tier). Everything they need is installed from here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test dev lint unit e2e tools tools-e2e tools-cluster image-tools image image-soft cluster bench lock clean dashboard

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

dev: $(STAMP)

demo: $(STAMP)
	$(BIN)/phalanx demo

# Strict types: `mypy` checks src/ and tests/ (pyproject.toml's [tool.mypy]); the conftest.py
# files outside test packages are each imported as `conftest`, so they get a run each.
lint: $(STAMP)
	$(BIN)/ruff check src tests bench deploy/grafana
	$(BIN)/ruff format --check src tests bench deploy/grafana
	$(BIN)/mypy
	for f in tests/api/conftest.py tests/deploy/conftest.py tests/e2e/conftest.py; do $(BIN)/mypy $$f || exit 1; done
	$(BIN)/mypy --strict deploy/grafana/dashboard.py
	MYPYPATH=src:tests:tests/controlplane $(BIN)/mypy --strict bench
	$(BIN)/lint-imports

# Go tool families (tests/controlplane/build-tools.sh) each target needs. The script builds
# only the missing ones, in parallel, into a cache outside the repo (once per version).
# Without Go the real control-plane tier is skipped locally; CI sets PHALANX_REQUIRE_E2E=1,
# which turns that skip into a failure.
TOOLS_CLUSTER := kube etcd kwok
TOOLS_E2E     := $(TOOLS_CLUSTER) kube-controller-manager kube-next kube-136 ray-operator helm scheduler-plugins
TOOLS_TEST    := $(TOOLS_E2E) promtool

define build_tools
	@if command -v go >/dev/null 2>&1; then \
		bash tests/controlplane/build-tools.sh $(1) >/dev/null; \
	else \
		echo "go not found: the real control-plane tests (tests/e2e, tests/deploy) will be skipped"; \
	fi
endef

# Everything `make test` runs against: the three Kubernetes releases, etcd, kwok, KubeRay's
# operator, scheduler-plugins' kube-scheduler, helm and promtool.
tools:
	$(call build_tools,$(TOOLS_TEST))

tools-e2e:
	$(call build_tools,$(TOOLS_E2E))

tools-cluster:
	$(call build_tools,$(TOOLS_CLUSTER))

# The image without a Docker engine: mmdebstrap makes a Debian bookworm base, buildah builds the
# Dockerfile on it (cached under the tools cache, like the Go tools); tests/deploy/test_image_run.py
# runs it with podman. Installing the tools needs root and apt; without them the build is skipped
# here and the image tests say why (a failure under PHALANX_REQUIRE_E2E=1). `test` and `e2e`
# build it first but go on if the build fails: the image tests rebuild and fail with its error.
IMAGE_TOOLS := mmdebstrap buildah podman runc

image-tools:
	bash scripts/image-tools.sh

image: image-tools
	@missing=$$(for t in $(IMAGE_TOOLS); do command -v $$t >/dev/null || printf '%s ' $$t; done); \
	if [ -z "$$missing" ]; then \
		bash scripts/image.sh build; \
	else \
		echo "image tools missing ($${missing% }): the image tests will be skipped (CI: fail)"; \
	fi

unit: $(STAMP)
	$(BIN)/pytest -m "not e2e"

# The image build never stops the other tiers (the image tests then fail with its error).
image-soft:
	-@$(MAKE) --no-print-directory image

# The Go tools and the image build side by side: compiling is CPU-bound, the image build
# mostly downloads and unpacks.
e2e: $(STAMP)
	$(MAKE) --no-print-directory -j2 tools-e2e image-soft
	$(BIN)/pytest -m e2e

test: lint
	$(MAKE) --no-print-directory -j2 tools image-soft
	$(BIN)/pytest

cluster: $(STAMP) tools-cluster
	$(BIN)/python tests/controlplane/launcher.py up

# The benchmark's control plane is the newer release (bench/run.py): kube-next beside etcd and
# kwok; scheduler-plugins is built by bench/run.py on first use.
bench: $(STAMP)
	$(call build_tools,$(TOOLS_CLUSTER) kube-next)
	$(BIN)/python bench/run.py

# Regenerate the Grafana dashboard (chart file and deploy/ copy) from deploy/grafana/dashboard.py.
dashboard: $(STAMP)
	$(BIN)/python deploy/grafana/dashboard.py

# Regenerate the lock from a fresh resolve of pyproject.toml (runtime + dev extras).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet setuptools -e '.[dev]'
	# --all keeps setuptools: the editable install builds without isolation, from the lock.
	.lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==' > requirements.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
