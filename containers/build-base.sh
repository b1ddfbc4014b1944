#!/usr/bin/env bash
# Builds the base image cosim/base:local (Debian bookworm + Python 3.11) without
# a container registry: debootstrap a minimal root filesystem, then `docker import` it.
#
#   containers/build-base.sh            # build once; later calls return at once
#   containers/build-base.sh --force    # rebuild
#
# Needs root (debootstrap chroots), Docker, and a reachable Debian mirror
# (DEBIAN_MIRROR, default deb.debian.org). Where a registry exists, skip this and
# build the cosim image with `--build-arg BASE=python:3.11-slim` instead.
set -euo pipefail

IMAGE=${COSIM_BASE_IMAGE:-cosim/base:local}
SUITE=${DEBIAN_SUITE:-bookworm}            # bookworm's python3 is 3.11, the project's version
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE="$HERE/.build/debs"                  # downloaded .debs, reused by --force rebuilds

if [[ "${1:-}" != "--force" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE exists (use --force to rebuild)"
  exit 0
fi

if ! command -v debootstrap >/dev/null; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get install -y --no-install-recommends debootstrap >/dev/null
  else
    echo "debootstrap is missing: apt-get install debootstrap (as root)" >&2
    exit 1
  fi
fi

ROOTFS=$(mktemp -d /tmp/cosim-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
mkdir -p "$CACHE"

# minbase: essential packages + apt only; python3-venv brings ensurepip's bundled pip,
# so the image installs wheels with no network.
debootstrap --variant=minbase --cache-dir="$CACHE" \
  --include=python3,python3-venv,ca-certificates,tini \
  "$SUITE" "$ROOTFS" "$MIRROR"

# What an image never needs: package caches and lists, docs, man pages, locales.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
       "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
       "$ROOTFS"/usr/share/locale/* "$ROOTFS"/var/log/*

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' \
  --message "debootstrap $SUITE minbase + python3 (containers/build-base.sh)" \
  - "$IMAGE"
docker image ls "$IMAGE"
