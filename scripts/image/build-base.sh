#!/usr/bin/env bash
# A stand-in for the official python:3.11-slim, built here from Debian's packages where no
# container registry can be reached (docs/deployment.md, "Build, tag and push the image").
#
#   scripts/image/build-base.sh IMAGE_NAME
#
# Debian bookworm (minbase, from Debian's mirrors) with Debian's CPython 3.11 and its venv
# module, linked into /usr/local/bin as the official image lays it out (python3.11, python3,
# python): the Dockerfile's `python -m venv` and the venv's `home = /usr/local/bin` work the
# same on both. How it differs from the official image: CPython is Debian's 3.11.2 with
# Debian's patches (the official image compiles the newest 3.11.x from python.org into
# /usr/local), the standard library is under /usr/lib/python3.11 (not /usr/local/lib), and
# pip/setuptools come from Debian's ensurepip wheels (python3-pip-whl), only inside the
# builder's venv. Documentation, man pages and locales are left out as debian:bookworm-slim
# leaves them out.
set -euo pipefail
name=${1:?usage: build-base.sh IMAGE_NAME}
work=$(mktemp -d "${TMPDIR:-/tmp}/cms-base.XXXXXX")
trap 'rm -rf "$work"' EXIT

mmdebstrap --quiet --variant=minbase --format=tar \
  --include=ca-certificates,netbase,tzdata,python3.11,python3.11-venv \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='for link in python3.11 python3 python; do ln -s /usr/bin/python3.11 "$1/usr/local/bin/$link"; done' \
  --customize-hook='chroot "$1" dpkg-query -W -f "\${Package}=\${Version}\n" > "$1/usr/local/share/base-packages.txt"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
  bookworm "$work/rootfs.tar" http://deb.debian.org/debian

container=$(buildah from --quiet scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
buildah add --quiet "$container" "$work/rootfs.tar" /
buildah config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 \
  --cmd python3 \
  --annotation "io.custom-metrics-server.base-script=${BASE_SCRIPT_SHA:-}" \
  --label org.opencontainers.image.description="Debian bookworm + Debian's CPython 3.11 in /usr/local/bin: a local stand-in for python:3.11-slim" \
  "$container"
buildah commit --quiet --rm "$container" "$name" >/dev/null
trap 'rm -rf "$work"' EXIT
echo "$name"
