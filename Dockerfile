# syntax=docker/dockerfile:1
# custom-metrics-server image: build a venv in one stage, ship only the venv.
#   docker build -t custom-metrics-server:0.1.0 .
# Runs as 65534:65534 (nobody) and writes nothing to its root filesystem, so it runs with
# readOnlyRootFilesystem; the TLS material is mounted from a Secret (manifests/base/deployment.yaml).
# Both stages use the same base image: the venv's python is a symlink to its /usr/local/bin/python3.11.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src

# Dependencies first, from pyproject.toml alone: this layer is rebuilt only when they change,
# not on every source edit.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt \
    && pip install --requirement /tmp/requirements.txt

# A C compiler for the optional kubelet reader (custom_metrics_server/compute/_kubelet_scan.c;
# the package builds without it and then reads in pure Python, ~2x the CPU per scrape). Only in
# this stage: the final image gets the built extension, not the compiler.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# Then the package itself. pip byte-compiles it here, so the read-only final image never needs
# to write .pyc files.
COPY setup.py ./
COPY custom_metrics_server/ ./custom_metrics_server/
RUN pip install --no-deps . \
    && python -c 'import custom_metrics_server.compute._kubelet_scan' \
    && custom-metrics-server --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="custom-metrics-server" \
      org.opencontainers.image.description="Kubernetes Custom and External Metrics API server (aggregated API server)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
USER 65534:65534
EXPOSE 6443
ENTRYPOINT ["custom-metrics-server"]
CMD ["serve"]
