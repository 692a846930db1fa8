#!/bin/sh
# Build an emulated arm64 (aarch64) Debian bookworm userland for the opt-in tests in tests/arm64/:
# python3 with ai-edge-litert and openvino installed from PyPI for aarch64.
#
#   sudo sh tests/arm64/make_rootfs.sh /var/tmp/edgekit-arm64
#   EDGEKIT_ARM64_ROOTFS=/var/tmp/edgekit-arm64 python -m pytest tests/arm64 -v
#
# Needs root, Debian's qemu-user-static, debootstrap and binfmt-support (installed here when missing),
# and network access to Debian's package archive and PyPI. From scratch: 15 minutes on a busy 2-core
# machine, 530 MB on disk.
# MIRROR (optional) is passed to debootstrap as its mirror; PIP_EXTRA (optional) adds arguments to the
# host's `pip download` (PIP_CERT: the CA bundle, default the system's).
set -eu
ROOTFS=${1:?usage: make_rootfs.sh ROOTFS_DIR}
SUITE=${SUITE:-bookworm}
# OpenVINO 2025.2: the newest release a typical aarch64 board's glibc had (bundles must not ask for the
# host's newer line; the test deploys to it).
PACKAGES=${PACKAGES:-"ai-edge-litert openvino==2025.2.0 numpy"}

if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null \
        || ! command -v update-binfmts >/dev/null; then
    apt-get update
    apt-get install -y qemu-user-static debootstrap binfmt-support
fi
# The kernel must hand aarch64 ELF files to qemu (binfmt_misc; the F flag keeps it working in a chroot).
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
update-binfmts --enable qemu-aarch64 2>/dev/null || true
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    echo "error: qemu-aarch64 is not registered with binfmt_misc (update-binfmts --enable qemu-aarch64)" >&2
    exit 2
fi

if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
    # shellcheck disable=SC2086 # MIRROR is empty (debootstrap's default) or one URL
    debootstrap --arch=arm64 --foreign --variant=minbase --include=python3,python3-pip,ca-certificates \
        "$SUITE" "$ROOTFS" ${MIRROR:-}
    cp /usr/bin/qemu-aarch64-static "$ROOTFS/usr/bin/"
    chroot "$ROOTFS" /debootstrap/debootstrap --second-stage
fi
# The wheels are fetched by the host's pip (native speed, the host's certificates and proxy settings),
# for the userland's Python and aarch64, then installed offline inside the userland.
PYVER=$(chroot "$ROOTFS" /usr/bin/python3 -c 'import sys; print("%d%d" % sys.version_info[:2])')
GLIBC_MINOR=$(chroot "$ROOTFS" /usr/bin/python3 -c 'import platform; print(platform.libc_ver()[1].split(".")[1])')
PLATFORMS="--platform manylinux2014_aarch64"  # pip matches --platform tags exactly: list every glibc
for minor in $(seq 17 "$GLIBC_MINOR"); do PLATFORMS="$PLATFORMS --platform manylinux_2_${minor}_aarch64"; done
WHEELS="$ROOTFS/tmp/wheels"
mkdir -p "$WHEELS"
# shellcheck disable=SC2086 # PLATFORMS, PACKAGES and PIP_EXTRA are word lists
PIP_CONFIG_FILE=/dev/null python3 -m pip download --disable-pip-version-check --quiet \
    --cert "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" \
    --only-binary=:all: $PLATFORMS --implementation cp \
    --python-version "$PYVER" --abi "cp$PYVER" -d "$WHEELS" ${PIP_EXTRA:-} $PACKAGES
# shellcheck disable=SC2086
chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root \
    python3 -m pip install --no-index --find-links /tmp/wheels --break-system-packages \
    --disable-pip-version-check --quiet $PACKAGES
rm -rf "$WHEELS"
chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/bin:/bin python3 -c \
    "import importlib.metadata as m, platform; print(platform.machine(), platform.python_version(), *(p + '=' + m.version(p) for p in ('ai-edge-litert', 'openvino', 'numpy')))"
