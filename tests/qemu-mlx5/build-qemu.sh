#!/usr/bin/env bash
# Builds Debian bookworm's QEMU 7.2 with the mlx5 model device (tests/qemu-mlx5/qemu/) once, into
# a cache directory outside the clone, and prints the path of the resulting qemu-system-x86_64.
#
#   1. installs the build dependencies from Debian packages (needs root);
#   2. fetches the `qemu` source package with `apt-get source` through a temporary apt
#      configuration that adds a deb-src line for bookworm (/etc/apt is left untouched);
#      dpkg-source applies Debian's patch series while unpacking;
#   3. copies our device source into hw/misc/, applies our meson patch, configures (TCG only,
#      x86_64 only) and runs `ninja qemu-system-x86_64`;
#   4. copies the binary to $QEMU_MLX5_CACHE/qemu-<hash>/, where <hash> covers the Debian
#      source version, the device source and the patch; a later run with the same inputs
#      prints that path at once. The unpacked source and its build tree stay in the cache too,
#      so a changed device source only recompiles that one file and relinks.
#
# The Rust model is not part of this binary: the device dlopen()s it at run time
# (MLX5_MODEL_LIB), so a commit that changes only Rust never rebuilds QEMU.
# Environment: QEMU_MLX5_CACHE (default /var/cache/mlx5-rs). Output: the binary path on stdout;
# progress on stderr. Fails with a message starting `build-qemu: FAIL:`.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${QEMU_MLX5_CACHE:-/var/cache/mlx5-rs}
DEVICE_SRC=$HERE/qemu/mlx5-model.c
MESON_PATCH=$HERE/qemu/hw-misc-meson.patch
ABI_HEADER=$(cd "$HERE/../.." && pwd)/sim-ffi/include/mlx5_model.h

die() { echo "build-qemu: FAIL: $*" >&2; exit 1; }
say() { echo "build-qemu: $*" >&2; }

SUDO=
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi

mkdir -p "$CACHE" 2>/dev/null || $SUDO mkdir -p "$CACHE" || die "cannot create $CACHE"
[ -w "$CACHE" ] || $SUDO chown "$(id -u):$(id -g)" "$CACHE" || die "$CACHE is not writable"

# One builder at a time (CI and a developer may share the machine and the cache).
exec 9>"$CACHE/.build.lock"
flock 9

# --- temporary apt configuration with deb-src for bookworm ---------------------------------
APT_TMP=
apt_with_sources() {
    if [ -z "$APT_TMP" ]; then
        local mirror
        mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
            /etc/apt/sources.list.d/*.list 2>/dev/null |
            grep -oE 'https?://[^ ]*/debian/?' | grep -v security | head -n1 || true)
        [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
        APT_TMP=$(mktemp -d)
        mkdir -p "$APT_TMP/lists/partial" "$APT_TMP/archives/partial" "$APT_TMP/parts"
        : >"$APT_TMP/sources.list"
        cat >"$APT_TMP/parts/bookworm-src.sources" <<SRC
Types: deb deb-src
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        APT_OPTS=(-o "Dir::Etc::sourcelist=$APT_TMP/sources.list" -o "Dir::Etc::sourceparts=$APT_TMP/parts"
            -o "Dir::State::lists=$APT_TMP/lists" -o "Dir::Cache::archives=$APT_TMP/archives")
        say "apt-get update (bookworm with deb-src, from $mirror)"
        apt-get "${APT_OPTS[@]}" update -q >&2 || die "apt-get update (deb-src) failed"
    fi
    "$@" "${APT_OPTS[@]}"
}
cleanup() { [ -z "$APT_TMP" ] || rm -rf "$APT_TMP"; }
trap cleanup EXIT

# The source version pins the cache key; apt-cache madison on the temporary lists gives it.
SRC_VERSION_FILE=$CACHE/qemu-source-version
if [ ! -s "$SRC_VERSION_FILE" ]; then
    apt_with_sources apt-cache showsrc qemu 2>/dev/null |
        awk '/^Version:/ { print $2 }' | sort -V | tail -n1 >"$SRC_VERSION_FILE.tmp"
    [ -s "$SRC_VERSION_FILE.tmp" ] || die "no qemu source package in bookworm's deb-src"
    mv "$SRC_VERSION_FILE.tmp" "$SRC_VERSION_FILE"
fi
SRC_VERSION=$(cat "$SRC_VERSION_FILE")

if [ "${BASE_ONLY:-0}" = 1 ]; then
    KEY=base
else
    [ -f "$DEVICE_SRC" ] || die "missing $DEVICE_SRC"
    KEY=$( (echo "$SRC_VERSION"; cat "$DEVICE_SRC" "$MESON_PATCH" "$ABI_HEADER") | sha256sum | cut -c1-16)
fi
OUT=$CACHE/qemu-$KEY
if [ -x "$OUT/qemu-system-x86_64" ] && [ -f "$OUT/.done" ]; then
    say "cached: $OUT (qemu source $SRC_VERSION)"
    echo "$OUT/qemu-system-x86_64"
    exit 0
fi

# --- 1. build dependencies ----------------------------------------------------------------
NEED=(libglib2.0-dev libpixman-1-dev libfdt-dev flex bison meson ninja-build python3-venv pkg-config dpkg-dev patch gcc)
missing=()
for p in "${NEED[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    [ "$(id -u)" = 0 ] || [ -n "$SUDO" ] || die "installing ${missing[*]} needs root"
    $SUDO apt-get update -q >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
        die "cannot install ${missing[*]}"
fi

# --- 2. source ------------------------------------------------------------------------------
# meson refuses a source path with a colon (the epoch in 1:7.2+dfsg-...).
SRC=$CACHE/src-${SRC_VERSION//[^A-Za-z0-9.+-]/_}
TREE=$SRC/tree
if [ ! -f "$SRC/.unpacked" ]; then
    rm -rf "$SRC"
    mkdir -p "$SRC/dl"
    say "apt-get source qemu=$SRC_VERSION (Debian's patches are applied by dpkg-source)"
    (cd "$SRC/dl" && apt_with_sources apt-get source -q "qemu=$SRC_VERSION" >&2) || die "apt-get source qemu failed"
    dir=$(find "$SRC/dl" -mindepth 1 -maxdepth 1 -type d -name 'qemu-*' | head -n1)
    [ -n "$dir" ] || die "apt-get source left no qemu-* directory"
    mv "$dir" "$TREE"
    rm -rf "$SRC/dl"
    cp "$TREE/hw/misc/meson.build" "$SRC/meson.build.orig"
    touch "$SRC/.unpacked"
fi

# --- 3. our device + configure + build ----------------------------------------------------------
if [ "$KEY" = base ]; then
    cp "$SRC/meson.build.orig" "$TREE/hw/misc/meson.build.new"
else
    cp "$DEVICE_SRC" "$TREE/hw/misc/mlx5-model.c"
    cp "$ABI_HEADER" "$TREE/hw/misc/mlx5_model.h"
    patch -s --no-backup-if-mismatch -o "$TREE/hw/misc/meson.build.new" "$SRC/meson.build.orig" \
        <"$MESON_PATCH" || die "our meson patch does not apply to qemu $SRC_VERSION"
fi
# Replace meson.build only when it changes, so ninja does not reconfigure for nothing.
if ! cmp -s "$TREE/hw/misc/meson.build.new" "$TREE/hw/misc/meson.build"; then
    mv "$TREE/hw/misc/meson.build.new" "$TREE/hw/misc/meson.build"
else
    rm -f "$TREE/hw/misc/meson.build.new"
fi

BUILD=$TREE/build-mlx5
if [ ! -f "$BUILD/build.ninja" ]; then
    say "configure (x86_64-softmmu, TCG only, no docs or tools)"
    rm -rf "$BUILD"
    mkdir -p "$BUILD"
    (cd "$BUILD" && ../configure --target-list=x86_64-softmmu --without-default-features \
        --enable-tcg --enable-fdt=system --disable-docs --disable-tools --disable-werror --disable-install-blobs \
        --disable-debug-info >"$SRC/configure.log" 2>&1) ||
        { tail -n 30 "$SRC/configure.log" >&2; die "configure failed (log: $SRC/configure.log)"; }
fi
say "ninja qemu-system-x86_64 (a cold build takes minutes: $SRC/build.log)"
T0=$(date +%s)
(cd "$BUILD" && nice -n 10 ninja qemu-system-x86_64 >"$SRC/build.log" 2>&1) ||
    { tail -n 40 "$SRC/build.log" >&2; die "ninja failed (log: $SRC/build.log)"; }
say "built in $(( $(date +%s) - T0 )) s"

rm -rf "$OUT"
mkdir -p "$OUT"
cp "$BUILD/qemu-system-x86_64" "$OUT/"
echo "$SRC_VERSION" >"$OUT/source-version"
touch "$OUT/.done"
echo "$OUT/qemu-system-x86_64"
