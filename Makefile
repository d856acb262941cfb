# Development entry points. `make demo` and `make test` are the README's two commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV := $(CURDIR)/.venv
COLLECTIONS := $(CURDIR)/.collections
INSTALLED := $(COLLECTIONS)/ansible_collections/talos_linux/talos
VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)

export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_LOCAL_TEMP := $(CURDIR)/.cache/ansible-tmp
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup install build ee-local demo demo-stop test unit sanity integration robustness molecule conformance lint changelog generate bench docs clean

# `make unit STACK=newest` (or sanity, integration, robustness) runs the suite on one of the
# other stacks CI tests (tests/stack: oldest, ansible-2.18, ansible-2.20, newest) instead of .venv.
ON_STACK = $(if $(STACK),tests/stack $(STACK))

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-generate.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	$(VENV)/bin/pip install -q --no-deps -r requirements-generate.txt
	touch $@

setup: $(VENV)/.installed install

# Make the working tree the installed collection (a link, so edits take effect
# at once); `make build` proves the release artifact builds and installs.
install: $(VENV)/.installed
	@mkdir -p $(dir $(INSTALLED))
	@if [ ! -L $(INSTALLED) ]; then rm -rf $(INSTALLED); ln -s $(CURDIR) $(INSTALLED); fi
	@echo "talos_linux.talos $(VERSION) is installed from $(CURDIR) into $(COLLECTIONS)"

build: $(VENV)/.installed
	@mkdir -p build
	ansible-galaxy collection build --force --output-path build .

# build/execution-environment.yml: the AWX execution environment (docs/awx.md) with the
# collection from this checkout's build instead of Galaxy.
ee-local: build
	python tools/local_execution_environment.py build

# Start an emulated Talos cluster in maintenance mode, provision it with the
# cluster role, print the facts; the cluster keeps running until `make demo-stop`. It runs in
# a venv of its own with what a user installs (requirements.txt, ansible-core: .cache/demo-venv),
# not in the development venv that `setup` makes. Its control planes run real etcd members (built with Go on first
# use; without Go, the emulator's model of etcd, where backups, the restore drill and Kubernetes do not work);
# `make demo ETCD=model` chooses the model. `make demo KUBERNETES=1` also runs a real kube-apiserver on that etcd and
# the nodes as its kubelets, for the Kubernetes guides. The cluster's files: .cache/demo/prod.
demo:
	tests/run-demo $(if $(ETCD),--etcd $(ETCD)) $(if $(filter-out 0 no false,$(KUBERNETES)),--kubernetes)

# Stops the demo's cluster, its etcd members and its Kubernetes.
demo-stop:
	tests/run-demo stop

test: setup
	tests/run-all

unit: install
	$(ON_STACK) pytest -q tests/unit

sanity: install
	$(ON_STACK) tests/run-sanity

integration: install
	$(ON_STACK) pytest -q tests/integration

# Bad inputs and faults for every module and role at -vvv: clear messages, nothing changed, no secret in the output.
robustness: install
	$(ON_STACK) pytest -q tests/robustness

molecule: install
	cd $(CURDIR) && molecule test --all

conformance: install
	tests/run-conformance

generate: $(VENV)/.installed
	python tools/generate_protos.py

# One table of what a task costs through each door (vs ansible.builtin.ping), facts on
# 1-250 nodes and against the bare client, a no-op rerun of the cluster role, cold imports
# and payload sizes; JSON under .cache/bench/ (tests/bench/bench.py).
bench: install
	python tests/bench/bench.py

# The documentation site from the built collection: antsibull-docs lints every plugin's and role's docs, then it and
# Sphinx build the pages and the guides (docs/*.md) warning-free into build/docs/html (tests/run-docs; its tools in
# a venv of their own under ~/.cache/talos_linux.talos/docs-venv).
docs:
	tests/run-docs

clean:
	rm -rf $(VENV) $(COLLECTIONS) build .cache
