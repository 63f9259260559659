#!/usr/bin/env bash
# `make image`: build the image with buildah (chroot isolation, layer cache) and leave it as an
# archive that `ctr -n k8s.io images import`, `podman load` and `docker load` accept.
#
# Environment (the Makefile sets it):
#   IMAGE_REF      the name:tag to give it (localhost/custom-metrics-server:<version>)
#   IMAGE_ARCHIVE  where the docker-archive goes (build/image/custom-metrics-server.tar)
#   IMAGE_BASE     auto | official | local: the base of both stages (auto: the official one when
#                  it is in local storage or can be pulled, else the local stand-in)
#   OFFICIAL_BASE  python:3.11-slim-bookworm@sha256:... (the Dockerfile's default)
#   LOCAL_BASE     the stand-in's name (scripts/image/build-base.sh builds it when missing or
#                  when that script changed)
# Re-running with nothing changed takes seconds: every step comes from the layer cache, and the
# archive is rewritten only when the image ID changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${IMAGE_REF:?}" "${IMAGE_ARCHIVE:?}" "${IMAGE_BASE:=auto}" "${OFFICIAL_BASE:?}" "${LOCAL_BASE:?}"
export BUILDAH_ISOLATION=chroot

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

local_base() {
  local want have
  want=$(sha256sum scripts/image/build-base.sh | cut -d' ' -f1)
  have=$(buildah inspect --type image --format '{{index .ImageAnnotations "io.custom-metrics-server.base-script"}}' "$LOCAL_BASE" 2>/dev/null || true)
  if [ "$have" != "$want" ]; then
    echo "== local base $LOCAL_BASE (mmdebstrap, Debian bookworm; a few minutes)" >&2
    BASE_SCRIPT_SHA=$want scripts/image/build-base.sh "$LOCAL_BASE" >/dev/null
  fi
  echo "$LOCAL_BASE"
}

# Fully qualified (docker.io/library/...): buildah resolves short names only with a
# registries.conf that allows it.
official=docker.io/library/$OFFICIAL_BASE

official_base() {
  # Bounded: an unreachable registry fails in well under a second here (DNS), a filtered one
  # would hang without the timeout.
  have_image "$official" && return
  if ! timeout 120 buildah pull --quiet "$official" >/dev/null; then
    echo "make image: cannot pull $official (above): build on the local base with IMAGE_BASE=local (or auto)" >&2
    exit 2
  fi
}

case "$IMAGE_BASE" in
  official) official_base; base=$official ;;
  local) base=$(local_base) ;;
  auto)
    if have_image "$official" || timeout 30 buildah pull --quiet "$official" >/dev/null 2>&1; then
      base=$official
    else
      echo "== the official base cannot be pulled: building on the local stand-in" >&2
      base=$(local_base)
    fi ;;
  *) echo "IMAGE_BASE must be auto, official or local, not '$IMAGE_BASE'" >&2; exit 2 ;;
esac

out=$(dirname "$IMAGE_ARCHIVE")
mkdir -p "$out"
# The host's pip settings and CA bundle as build secrets (never in a layer).
read -r -a secrets <<< "$(python3 scripts/image/host_pip_config.py "$out/pip")"
echo "== buildah bud $IMAGE_REF on $base" >&2
# The whole log goes to $out/build.log; its end is shown when the build fails.
if ! buildah bud --isolation chroot --layers --force-rm --build-arg "PYTHON_IMAGE=$base" \
  "${secrets[@]}" --tag "$IMAGE_REF" --file Dockerfile . > "$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log" >&2
  echo "make image: buildah bud failed (whole log: $out/build.log)" >&2
  exit 1
fi
grep '^prune_venv: venv' "$out/build.log" | tail -n 1 || true
id=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE_REF")
if [ ! -s "$IMAGE_ARCHIVE" ] || [ "$(cat "$IMAGE_ARCHIVE.id" 2>/dev/null)" != "$id $IMAGE_REF" ]; then
  rm -f "$IMAGE_ARCHIVE" "$IMAGE_ARCHIVE.id"
  buildah push --quiet "$IMAGE_REF" "docker-archive:$IMAGE_ARCHIVE:$IMAGE_REF"
  echo "$id $IMAGE_REF" > "$IMAGE_ARCHIVE.id"
fi
echo "$IMAGE_REF ${id:0:12} on $base -> $IMAGE_ARCHIVE ($(du -m "$IMAGE_ARCHIVE" | cut -f1) MB)"
