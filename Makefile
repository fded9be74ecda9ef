# qdd — every target installs what it needs from nothing (see hack/).
SHELL := /bin/bash
ROOT := $(CURDIR)
VENV := $(ROOT)/.qdd/venv
PY := $(VENV)/bin/python
export PATH := $(ROOT)/.qdd/bin:$(VENV)/bin:$(PATH)
export KUBECONFIG := $(ROOT)/.qdd/kubeconfig

.PHONY: operator-start operator-stop setup venv tools vllm-venv test test-unit test-contract test-integration crds demo cluster-up cluster-down bench lint

venv:
	bash hack/venv.sh

tools: venv
	bash hack/build-tools.sh

vllm-venv:
	bash hack/vllm-parser-venv.sh

setup: venv tools vllm-venv

crds: venv
	$(PY) -m qdd.cli crd -o crds/qdd.dev_qwendisaggdeployments.yaml

test: setup
	$(PY) -m pytest -q tests

test-unit: venv
	$(PY) -m pytest -q tests/unit

test-contract: venv vllm-venv
	$(PY) -m pytest -q tests/contract

test-integration: venv tools
	$(PY) -m pytest -q tests/integration

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
