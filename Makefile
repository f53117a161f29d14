# gang-extender — every target installs what it needs into .venv (Python) and ~/.cache (Kubernetes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help demo test test-fast lint typecheck layers k8s bench clean

help:
	@echo "make demo       run the extender against a local Kubernetes control plane with a sample gang"
	@echo "make test       lint, type-check, layer check, unit + HTTP + end-to-end tests (what CI runs)"
	@echo "make test-fast  the same without the end-to-end tier"
	@echo "make bench      filter latency benchmark (results: docs/performance.md)"
	@echo "make k8s        build the pinned Kubernetes binaries into ~/.cache/gang-extender"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

k8s:
	bash hack/build-k8s.sh

demo: $(STAMP) k8s
	$(BIN)/python hack/demo.py

lint: $(STAMP)
	$(BIN)/ruff check extender tests hack bench

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

test-fast: lint typecheck layers
	$(BIN)/python -m pytest -m "not e2e" -q

test: lint typecheck layers k8s
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/filter_latency.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
