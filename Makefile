# compute-domains developer entry points. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Two workers by default (pytest-xdist): tests/conftest.py gives each cluster's tests to one
# worker as one piece, so the session cluster and the lifecycle cluster each start once and run
# side by side (docs/development.md). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml sim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./sim
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## create .venv with the package, the simulator (sim/) and the dev tools

.PHONY: tools
tools: prereqs venv ## build etcd, kube-*, kwok, helm v3/v4 and the fake NVML library into ~/.cache/compute-domains (once)
	$(PY) -m cdsim tools build

TYPECHECK_TREE := build/typecheck

.PHONY: typecheck
typecheck: venv ## mypy --strict over the package as installed (hooks/, node-init/ mapped in)
	rm -rf $(TYPECHECK_TREE) && mkdir -p $(TYPECHECK_TREE)/computedomains
	ln -s $(CURDIR)/src/computedomains/* $(TYPECHECK_TREE)/computedomains/
	ln -s $(CURDIR)/hooks $(TYPECHECK_TREE)/computedomains/hooks
	ln -s $(CURDIR)/node-init $(TYPECHECK_TREE)/computedomains/nodeinit
	$(VENV)/bin/mypy $(TYPECHECK_TREE)/computedomains sim/cdsim tests

.PHONY: lint
lint: typecheck ## ruff (lint + format check), mypy --strict, import layers, chart docs up to date
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONPATH=$(TYPECHECK_TREE):sim $(VENV)/bin/lint-imports
	$(PY) -m cdsim.chartdocs --check --chart-dir $(CHART)

.PHONY: format
format: venv ## apply ruff's formatting and safe fixes
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

.PHONY: test
test: lint tools image ## lint, the image, then every test: unit, packaging and cluster (real control plane)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 \
	  $(PYTEST_ARGS)

FALLBACK_KUBE_VERSION ?= 1.34

.PHONY: test-fallback
test-fallback: venv ## placement and claims by hand on Kubernetes 1.34 (no device taints, no binding conditions): docs/placement.md
	COMPUTE_DOMAINS_KUBE_VERSION=$(FALLBACK_KUBE_VERSION) $(PY) -m cdsim tools build
	COMPUTE_DOMAINS_KUBE_VERSION=$(FALLBACK_KUBE_VERSION) $(PY) -m pytest -p no:cacheprovider \
	  tests/cluster/with_chart/test_placement.py tests/cluster/with_chart/test_claims_by_hand.py \
	  $(PYTEST_ARGS)

MATRIX_KUBE_VERSIONS ?= 1.34 1.36 1.37
MATRIX_TESTS ?= tests/cluster/with_chart/test_placement.py tests/cluster/with_chart/test_domains.py \
  tests/cluster/with_releases/test_upgrade.py

.PHONY: test-matrix
test-matrix: venv ## placement, formation and upgrade tests on each Kubernetes of MATRIX_KUBE_VERSIONS (not in CI)
	@for version in $(MATRIX_KUBE_VERSIONS); do \
	  echo "== Kubernetes $$version"; \
	  COMPUTE_DOMAINS_KUBE_VERSION=$$version $(PY) -m cdsim tools build || exit 1; \
	  COMPUTE_DOMAINS_KUBE_VERSION=$$version $(PY) -m pytest -p no:cacheprovider $(MATRIX_TESTS) \
	    $(PYTEST_ARGS) || exit 1; \
	done

.PHONY: demo
demo: tools image ## 2 simulated NVL72 racks, image and chart from their registry, examples/: watch a ComputeDomain form
	$(PY) -m cdsim demo

# make chaos SEED=1234 DURATION=30m replays a run; without SEED a random one is drawn and printed.
SEED ?=
DURATION ?= 30m
CHAOS_REPORT ?= build/chaos-report.json

.PHONY: chaos
chaos: tools image ## seeded chaos run on a fresh simulated cluster: workload churn + every fault kind, invariants checked (SEED=, DURATION=30m)
	$(PY) -m cdsim chaos $(if $(SEED),--seed $(SEED)) --duration $(DURATION) --report $(CHAOS_REPORT)

.PHONY: bench
bench: tools ## benchmarks (tests/benchmarks): JSON, REPORT.md and plots in benchmark-results/
	$(PY) -m pytest tests/benchmarks -p no:cacheprovider -s
	$(PY) -m tests.benchmarks.render

.PHONY: protos
protos: venv ## regenerate the kubelet gRPC message modules from src/computedomains/drapb/*.proto
	$(PY) -m computedomains.drapb.generate

.PHONY: crds
crds: venv ## regenerate the CRD templates in chart/charts/crds from computedomains.api.models
	$(PY) -m computedomains.api.crds --write

CHART := chart
CHART_PROFILES := $(wildcard values/*.yaml)

.PHONY: chart-docs
chart-docs: venv ## regenerate the chart README's values table and the schema's descriptions from values.yaml
	$(PY) -m cdsim.chartdocs --write --chart-dir $(CHART)

.PHONY: chart-lint
chart-lint: venv ## helm lint --strict and helm template of the chart, helm 3 and 4, every values/ profile
	@set -e; for major in helm3 helm4; do \
	  helm=$$($(PY) -m cdsim tools path $$major); \
	  for profile in "" $(CHART_PROFILES); do \
	    args="--namespace compute-domains$${profile:+ --values $$profile}"; \
	    echo "[$$major] lint + template$${profile:+ with $$profile}"; \
	    $$helm lint --strict $(CHART) $$args >/dev/null || { $$helm lint --strict $(CHART) $$args; exit 1; }; \
	    $$helm template chart-lint $(CHART) $$args >/dev/null; \
	  done; \
	done

.PHONY: wheel
wheel: venv ## build the wheel and sdist into dist/
	$(PY) -m build --outdir dist .

.PHONY: prereqs
prereqs: ## install the missing Debian packages the image and the tests use (sim/install-debian-prereqs.sh)
	bash sim/install-debian-prereqs.sh

.PHONY: image
image: prereqs venv ## build the product image (amd64 + arm64 OCI index) of HEAD or the working tree, once per revision
	$(PY) -m cdsim image build

# Pins still allowed by pyproject.toml are kept; LOCK_ARGS=--upgrade moves every pin to the newest.
LOCK_ARGS ?=

.PHONY: lock
lock: venv ## regenerate image/requirements.lock (the image's wheels, with hashes) from pyproject.toml
	$(VENV)/bin/uv pip compile pyproject.toml --quiet --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_36 --custom-compile-command "make lock" \
	  --output-file image/requirements.lock $(LOCK_ARGS)

.PHONY: clean
clean: ## remove build outputs and the venv (the tool cache stays)
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
