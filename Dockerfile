# syntax=docker/dockerfile:1
# custom-metrics-server image: build a venv in one stage, ship only the venv.
#   make image                       # buildah, here; or:
#   docker build -t localhost/custom-metrics-server:0.1.0 .
# (docs/deployment.md, "Build, tag and push the image".) Runs as 65534:65534 (nobody) and
# writes nothing to its root filesystem, so it runs with readOnlyRootFilesystem; the TLS
# material is mounted from a Secret (manifests/base/deployment.yaml).
#
# The base: the official python:3.11-slim (Debian bookworm) by digest. The digest below is the
# one a public repository names as verified; it was NOT checked where this file was written (no
# registry could be reached). Where one can, check or refresh it with
#   skopeo inspect --format '{{.Digest}}' docker://docker.io/library/python:3.11-slim-bookworm
# (the digest of the multi-platform index). `make image IMAGE_BASE=local` builds on a stand-in
# made from Debian's packages instead (scripts/image/build-base.sh says how it differs).
# Both stages use the same base: the venv's python is a symlink to its /usr/local/bin/python3.11.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# A C compiler for the optional kubelet reader (custom_metrics_server/kubelet_format/_scan.c;
# the package builds without it and then reads in pure Python, ~2x the CPU per scrape). Only in
# this stage: the final image gets the built extension, not the compiler. First, so that no
# dependency change rebuilds it. The official image has CPython's headers in /usr/local/include;
# the local stand-in (Debian's CPython) gets Debian's, libpython3.11-dev.
# hadolint ignore=DL3008
RUN headers=$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
    && if [ -f "$headers/Python.h" ]; then dev=; else dev=libpython3.11-dev; fi \
    && apt-get update \
    && apt-get install --yes --no-install-recommends gcc libc6-dev ${dev:+"$dev"} \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv \
    && mkdir -p /var/lib/custom-metrics-server
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src

# Dependencies first, from the hash-pinned locks alone (`make lock`): this layer is rebuilt only
# when they change, not on every source edit. The host's pip settings and CA bundle (a proxy,
# a mirror, a corporate CA) come in as build secrets when given (scripts/image/host_pip_config.py):
# mounted while pip runs, never stored in a layer.
COPY requirements/runtime.lock requirements/build.lock ./requirements/
RUN --mount=type=secret,id=pip-conf,target=/run/secrets/pip.conf \
    --mount=type=secret,id=pip-ca,target=/run/secrets/pip-ca.crt \
    if [ -f /run/secrets/pip.conf ]; then export PIP_CONFIG_FILE=/run/secrets/pip.conf; fi \
    && pip install --require-hashes --no-deps --requirement requirements/runtime.lock \
       --requirement requirements/build.lock

# Then the package itself, built with the locked setuptools (no build isolation: nothing is
# fetched). pip byte-compiles it here, so the read-only final image never writes .pyc files.
# `python -P`: the copied source in /src must not shadow the installed package (its C reader).
COPY pyproject.toml setup.py README.md ./
COPY custom_metrics_server/ ./custom_metrics_server/
RUN pip install --no-deps --no-build-isolation . \
    && python -P -c 'import custom_metrics_server.kubelet_format._scan' \
    && custom-metrics-server --version

# What the server never loads (docs/performance.md, "The image"): pip and setuptools; the
# kubernetes package's asyncio client and generated API and model classes (the server uses only
# its kubeconfig and in-cluster loaders, and the client package imports the classes lazily)
# with aiohttp and the libraries only it needs; test suites. tests/deployment/test_image.py checks in the
# built image that the server, serving, has loaded none of it.
COPY scripts/image/prune_venv.py /tmp/prune_venv.py
RUN python -P /tmp/prune_venv.py /opt/venv \
    && custom-metrics-server --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="custom-metrics-server" \
      org.opencontainers.image.description="Kubernetes Custom and External Metrics API server (aggregated API server)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
# The working directory, owned by the server's user: with a writable root `serve --demo` keeps
# its certificates and kubeconfig here (--cert-dir is relative); with a read-only root it keeps
# them in memory unless a volume is mounted here.
COPY --from=builder --chown=65534:65534 /var/lib/custom-metrics-server /var/lib/custom-metrics-server
WORKDIR /var/lib/custom-metrics-server
USER 65534:65534
EXPOSE 6443
ENTRYPOINT ["custom-metrics-server"]
CMD ["serve"]
