# Phalanx. The README's two commands: `make demo` (set up, run the demo) and `make test`
# (set up, run every check and test tier). Everything they need is installed from here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test dev lint unit e2e tools tools-e2e tools-cluster cluster bench lock clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

dev: $(STAMP)

demo: $(STAMP)
	$(BIN)/phalanx demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Go tool families (tests/controlplane/build-tools.sh) each target needs. The script builds
# only the missing ones, in parallel, into a cache outside the repo (once per version).
# Without Go the real control-plane tier is skipped locally; CI sets PHALANX_REQUIRE_E2E=1,
# which turns that skip into a failure.
TOOLS_CLUSTER := kube etcd kwok
TOOLS_E2E     := $(TOOLS_CLUSTER) kube-next ray-operator helm
TOOLS_TEST    := $(TOOLS_E2E) promtool

define build_tools
	@if command -v go >/dev/null 2>&1; then \
		bash tests/controlplane/build-tools.sh $(1) >/dev/null; \
	else \
		echo "go not found: the real control-plane tests (tests/e2e, tests/deploy) will be skipped"; \
	fi
endef

# Everything `make test` runs against: both Kubernetes releases, etcd, kwok, KubeRay's
# operator, helm and promtool.
tools:
	$(call build_tools,$(TOOLS_TEST))

tools-e2e:
	$(call build_tools,$(TOOLS_E2E))

tools-cluster:
	$(call build_tools,$(TOOLS_CLUSTER))

unit: $(STAMP)
	$(BIN)/pytest -m "not e2e"

e2e: $(STAMP) tools-e2e
	$(BIN)/pytest -m e2e

test: lint tools
	$(BIN)/pytest

cluster: $(STAMP) tools-cluster
	$(BIN)/python tests/controlplane/launcher.py up

bench: $(STAMP)
	$(BIN)/python bench/run.py

# Regenerate the lock from a fresh resolve of pyproject.toml (runtime + dev extras).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet setuptools -e '.[dev]'
	# --all keeps setuptools: the editable install builds without isolation, from the lock.
	.lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==' > requirements.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
