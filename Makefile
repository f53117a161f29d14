# gang-extender — every target installs what it needs into .venv (Python) and ~/.cache (Kubernetes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help demo test test-fast lint typecheck layers k8s monitoring-crds bench fuzz faults ha churn stress starvation clean
.PHONY: compiled test-compiled wheel-compiled

help:
	@echo "make demo       run the extender against a local Kubernetes control plane with a sample gang"
	@echo "make test       lint, type-check, layer check, unit + HTTP + end-to-end tests, then unit + HTTP compiled (what CI runs)"
	@echo "make test-fast  the same without the end-to-end tier"
	@echo "make compiled   the hot-path modules compiled by mypyc into build/compiled (the image ships them compiled)"
	@echo "make test-compiled  the unit and HTTP tiers against build/compiled (docs/decisions/0005)"
	@echo "make wheel-compiled a wheel in dist/ with the hot-path modules compiled (needs a C compiler)"
	@echo "make image      build gang-extender:dev and the chart's kube-scheduler image offline, then run them as users do"
	@echo "make real-nodes a local control plane with two real kubelets on this machine, both images in them (until Ctrl-C)"
	@echo "make bench      filter latency benchmark (results: docs/performance.md)"
	@echo "make bench-e2e  kube-scheduler end to end: alone, no-op extender, gang-extender, in-tree (bench-e2e-pinned: CPU-pinned;"
	@echo "                bench-e2e-compiled: the hot path compiled, as the image runs it)"
	@echo "make bench-e2e-gate  the same on v1.37.2 with PodGroups, gang-extender with and without the quorum gate"
	@echo "make fuzz       hostile input: 10,000 bodies per verb against a live server (docs/reliability.md)"
	@echo "make faults     kill -9, kube-apiserver restarts, refused bindings on a real control plane"
	@echo "make ha         kill -9 the leading kube-scheduler + extender pair 24 times (docs/reliability.md)"
	@echo "make churn      the barrier under churn: members re-created, leader kills, shipped 15 s Leases, 5 min (docs/reliability.md)"
	@echo "make stress     10x filter rate for 60 s, 600-member bind barrier (docs/reliability.md)"
	@echo "make starvation a 16-node gang under a 3-minute stream of small work, $${STARVATION_RUNS:-5} times (docs/performance.md)"
	@echo "make bench-gang-perf upstream's gang benchmark (5,000 nodes; GANG_PERF_ARGS='--scale 0.2' for less)"
	@echo "make bench-fit  kubectl gang fit for a 1,000-member gang on 5,000 nodes; then POST /fit beside a filter stream"
	@echo "make k8s        build the pinned Kubernetes binaries (v1.35.4, v1.36.3, v1.37.2), kwok v0.8.0, promtool, helm v3.22.0 and the Prometheus Operator CRDs into ~/.cache/gang-extender"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

k8s:
	bash hack/build-k8s.sh
	K8S_VERSION=1.37.2 bash hack/build-k8s.sh  # the second pinned release (tests/e2e/test_gangs_v137.py)
	K8S_VERSION=1.36.3 bash hack/build-k8s.sh  # the v1alpha2 PodGroup API (tests/e2e/test_topology.py)
	bash hack/build-kwok.sh  # kwok v0.8.0, the kubelets' stand-in (tests/e2e/test_kwok_testbed.py)
	bash hack/build-promtool.sh  # promtool of Prometheus v0.316.0 (Go module), for the alert rule tests
	bash hack/build-helm.sh  # helm v3.22.0, for charts/gang-extender (tests/e2e/test_helm_*.py)
	bash hack/fetch-prometheus-operator-crds.sh  # PrometheusRule and PodMonitor CRDs of prometheus-operator v0.85.0 (Go module)

monitoring-crds:  # only the Prometheus Operator CRDs (a step of k8s)
	bash hack/fetch-prometheus-operator-crds.sh

demo: $(STAMP)  # only what the demo runs: Kubernetes v1.35.4 (hack/demo.py builds it on a first run)
	$(BIN)/python hack/demo.py

lint: $(STAMP)
	$(BIN)/ruff check extender tests hack bench

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

test-fast: lint typecheck layers
	$(BIN)/python -m pytest -m "not e2e" -q

# Every tier runs the source; the real-node tier runs the image, whose hot path is compiled (Dockerfile); then the
# unit and HTTP tiers run again against the compiled build (docs/decisions/0005).
test: lint typecheck layers k8s  # the job-controller tier's short version only (tests/realnodes/conftest.py: jobs_full)
	$(BIN)/python -m pytest -q -m "not jobs_full"
	$(MAKE) --no-print-directory test-compiled

bench: $(STAMP)
	$(BIN)/python bench/filter_latency.py

# ---- the compiled hot path (docs/decisions/0005-compiled-hot-path.md) -----------------------------
# `make test` runs test-compiled after the source's tiers; the image's wheel is compiled by the Dockerfile's builder
# (COMPILE=1, the default); `pip wheel .` without GANG_EXTENDER_COMPILE=1 stays pure.
COMPILE_STAMP := $(VENV)/.installed-compile
$(COMPILE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,compile]'
	@touch $@

compiled: $(COMPILE_STAMP)  # build/compiled: extender/ with the modules of extender/native.py's COMPILED as .so (mypyc, cc)
	@bash hack/ensure-compiler.sh $(BIN)/python
	$(BIN)/python hack/compiled.py

test-compiled: compiled  # tests/conftest.py refuses to run unless every compiled module imports as its .so
	GANG_EXTENDER_TREE=build/compiled $(BIN)/python -m pytest -q tests/unit tests/http

wheel-compiled: $(COMPILE_STAMP)  # dist/gang_extender-*-cp311-*.whl; without GANG_EXTENDER_COMPILE=1 the wheel is pure
	GANG_EXTENDER_COMPILE=1 $(BIN)/pip wheel --no-build-isolation --no-deps --wheel-dir dist .

FUZZ_STAMP := $(VENV)/.installed-fuzz
$(FUZZ_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,fuzz]'
	@touch $@

fuzz: $(FUZZ_STAMP)
	$(BIN)/python hack/fuzz.py --examples $${FUZZ_EXAMPLES:-10000}

faults: $(STAMP) k8s
	$(BIN)/python hack/faults.py

ha: $(STAMP) k8s
	$(BIN)/python hack/ha.py --kills $${HA_KILLS:-24}

churn: $(STAMP) k8s  # CHURN_ARGS='--seconds 600 --leases test' etc. (hack/churn.py --help); CI: tests/e2e/test_churn_soak.py
	$(BIN)/python hack/churn.py --json out/churn.json $(CHURN_ARGS)

stress: $(STAMP)
	$(BIN)/python hack/stress.py

starvation: $(STAMP) k8s  # the issue's long run; CI runs a 60 s stream with a 10 s maximum wait
	for i in $$(seq $${STARVATION_RUNS:-5}); do \
	  STARVATION_STREAM_SECONDS=180 STARVATION_MAX_WAIT_SECONDS=$${STARVATION_MAX_WAIT_SECONDS:-60} \
	    $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/e2e/test_starvation.py || exit 1; \
	done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# ---- replay load test and end-to-end scheduling benchmark (docs/performance.md) -------------------
BENCH_STAMP := $(VENV)/.installed-bench
ROOT_OR_SUDO = $$(test "$$(id -u)" = 0 || echo sudo)

.PHONY: wrk loadtest bench-e2e bench-e2e-compiled bench-e2e-pinned bench-e2e-gate bench-gang-perf bench-fit record-corpus

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $@

wrk:  # the load generator, from Debian's packages
	@command -v wrk >/dev/null 2>&1 || { echo "installing wrk (apt-get install wrk)"; \
	  $(ROOT_OR_SUDO) apt-get install -y -q wrk >/dev/null 2>&1 || \
	  { $(ROOT_OR_SUDO) apt-get update -q >/dev/null && $(ROOT_OR_SUDO) apt-get install -y -q wrk >/dev/null; }; }
	@wrk --version 2>&1 | head -n 1

loadtest: $(BENCH_STAMP) wrk  # replay tests/data/corpus with wrk; tables on stdout, figures in docs/img
	$(BIN)/python bench/loadtest.py --json out/loadtest.json $(LOADTEST_ARGS)
	$(BIN)/python bench/plot.py --only loadtest

# kube-scheduler alone / with a do-nothing extender / with gang-extender / with the in-tree plugin;
# phases backlog, arrival, paced, contention; prints issue 14's floors (PASS / MISS)
bench-e2e: $(BENCH_STAMP) k8s
	$(BIN)/python bench/e2e_scheduling.py --json out/bench-e2e.json $(BENCH_E2E_ARGS)
	$(BIN)/python bench/plot.py --only e2e

# the same with the hot path compiled, as the image runs it (every extender imports build/compiled first)
bench-e2e-compiled: $(BENCH_STAMP) k8s compiled
	PYTHONPATH=$(CURDIR)/build/compiled $(BIN)/python bench/e2e_scheduling.py --json out/bench-e2e-compiled.json $(BENCH_E2E_ARGS)
	$(BIN)/python bench/plot.py --only e2e --e2e out/bench-e2e-compiled.json --prefix e2e-compiled

# the same with the control plane on CPU 0 and the extender on CPU 1 (needs 2 CPUs)
bench-e2e-pinned: $(BENCH_STAMP) k8s
	$(BIN)/python bench/e2e_scheduling.py --pin --json out/bench-e2e-pinned.json $(BENCH_E2E_ARGS)
	$(BIN)/python bench/plot.py --only e2e --e2e out/bench-e2e-pinned.json --prefix e2e-pinned

# v1.37.2 and PodGroups: the do-nothing extender, gang-extender with and without the chart's quorum gate, the
# in-tree plugin (docs/performance.md, "The scheduling gate: measured"); CI runs tests/e2e/test_bench_e2e_smoke.py
bench-e2e-gate: $(BENCH_STAMP) k8s
	$(BIN)/python bench/e2e_scheduling.py --release 1.37 --phases backlog,arrival,paced \
	  --configs "noop-extender;gang-extender:quorum-gate;gang-extender;in-tree" --json out/bench-e2e-137.json \
	  $(BENCH_E2E_ARGS)

bench-gang-perf: $(BENCH_STAMP) k8s  # upstream's gang benchmark at 5,000 nodes (issue 14 section 3)
	$(BIN)/python bench/gang_perf.py --json out/bench-gang-perf.json $(GANG_PERF_ARGS)
	$(BIN)/python bench/plot.py --only gang-perf

bench-fit: $(STAMP) k8s  # issue 28 item 3 (docs/performance.md)
	$(BIN)/python bench/fit_latency.py --json out/bench-fit.json $(BENCH_FIT_ARGS)
	$(BIN)/python bench/fit_beside_filters.py --json out/bench-fit-beside.json $(BENCH_FIT_BESIDE_ARGS)

record-corpus: $(STAMP) k8s  # re-record tests/data/corpus from a real kube-scheduler
	$(BIN)/python hack/record_corpus.py

# ---- images (docs/deploy.md, section 0) -----------------------------------------------------------
.PHONY: image

image:  # gang-extender:dev and localhost/kube-scheduler:v1.35.4, offline on a Debian base made here, then checked
	bash hack/image/build.sh

# ---- the real-node tier (docs/decisions/0004-real-nodes.md) ---------------------------------------
.PHONY: real-nodes real-nodes-down test-realnodes test-jobs

real-nodes: $(STAMP) image  # a local control plane and two real kubelets with both images, until Ctrl-C
	bash hack/real-nodes/build.sh > /dev/null
	$(BIN)/python hack/real-nodes/realnodes.py up --image gang-extender:dev --image localhost/kube-scheduler:v1.35.4 \
	  --path $(abspath $(BIN)) --path $$(bash hack/build-helm.sh | tail -n 1)

real-nodes-down:  # undo what a killed real-node run left on the machine
	$(BIN)/python hack/real-nodes/realnodes.py down

test-realnodes: $(STAMP)  # only the real-node tier, the job controllers in full (make test runs its short version; docs/e2e.md)
	$(BIN)/python -m pytest -q -m realnodes tests/realnodes

test-jobs: $(STAMP)  # the job controllers (JobSet v0.10.1, Kubeflow training operator v1.8.1, from their Go modules) on real nodes, in full
	$(BIN)/python -m pytest -q tests/realnodes/test_jobset.py tests/realnodes/test_training_operator.py
