# shellcheck shell=bash
# What the QEMU guest harnesses share (sourced by tests/vfio-qemu/run.sh and
# tests/qemu-mlx5/run.sh): messages, sudo, Debian's guest kernel and busybox (downloaded and
# unpacked, never installed), static in-guest programs, the initramfs, the bounded boot, and
# the failure dump.
#
# The caller sets, before sourcing:
#   GUEST_TAG   the prefix of every message (`vfio-qemu`, `qemu-mlx5`);
#   GUEST_DIR   where downloads, the initramfs and the logs go;
#   REPO        the repository root.
# It exports CARGO_TARGET_DIR (default <repo>/target).

: "${GUEST_TAG:?set GUEST_TAG before sourcing guest-lib.sh}"
: "${GUEST_DIR:?set GUEST_DIR before sourcing guest-lib.sh}"
: "${REPO:?set REPO before sourcing guest-lib.sh}"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

die() {
    echo "$GUEST_TAG: FAIL: $*" >&2
    exit 1
}
say() { echo "$GUEST_TAG: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

mkdir -p "$GUEST_DIR"

# The guest kernel's command line both harnesses start from. no_timer_check: under TCG on a
# loaded host the kernel's boot-time check that the timer interrupt arrives through the
# interrupt-remapped IO-APIC can run out of time, and the guest panics ("timer doesn't work
# through Interrupt-remapped IO-APIC"; seen here once under a load of 9 on 2 cores).
GUEST_APPEND="console=ttyS0 intel_iommu=on quiet panic=-1 no_timer_check"

# SUDO: empty as root, "sudo -n" when passwordless sudo works, else empty (installing fails
# with a message then).
SUDO=
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
fi

# guest_apt_install PKG...: install the Debian packages that are missing.
guest_apt_install() {
    local p missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -gt 0 ] || return 0
    say "apt-get install ${missing[*]}"
    [ "$(id -u)" = 0 ] || [ -n "$SUDO" ] || die "installing ${missing[*]} needs root (run as root or with passwordless sudo)"
    $SUDO apt-get update -q >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
        die "cannot install ${missing[*]}"
}

# guest_fetch_deb PKG: download and unpack PKG into $GUEST_DIR/unpacked/PKG (once); prints
# that path.
guest_fetch_deb() {
    local pkg=$1 dir=$GUEST_DIR/unpacked/$1
    if [ ! -f "$dir/.done" ]; then
        mkdir -p "$GUEST_DIR/debs"
        rm -rf "$dir"
        (cd "$GUEST_DIR/debs" && rm -f "${pkg}"_*.deb && apt-get download -q "$pkg" >&2) ||
            die "apt-get download $pkg failed"
        mkdir -p "$dir"
        dpkg-deb -x "$GUEST_DIR/debs/${pkg}"_*.deb "$dir" || die "dpkg-deb -x $pkg failed"
        touch "$dir/.done"
    fi
    echo "$dir"
}

# guest_kernel: Debian's current kernel (what linux-image-amd64 depends on) and
# busybox-static. Sets KPKG, KDIR (the unpacked package), VMLINUZ, KVER and BUSYBOX.
guest_kernel() {
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    if [ -z "$KPKG" ]; then
        # The package lists may be absent on a fresh image.
        $SUDO apt-get update -q >/dev/null || die "apt-get update failed"
        KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    fi
    [ -n "$KPKG" ] || die "cannot find the guest kernel package (apt-cache depends linux-image-amd64)"
    KDIR=$(guest_fetch_deb "$KPKG")
    local bbdir
    bbdir=$(guest_fetch_deb busybox-static)
    VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* 2>/dev/null | head -n1)
    [ -n "$VMLINUZ" ] || die "no vmlinuz in $KPKG"
    KVER=${VMLINUZ##*/vmlinuz-}
    BUSYBOX=$bbdir/bin/busybox
    [ -x "$BUSYBOX" ] || die "no bin/busybox in busybox-static"
    say "guest kernel $KVER"
}

# guest_static_build WHAT CARGO-BUILD-ARGS...: build a static program for the guest (which has
# no libraries): musl, or static glibc when the musl target cannot be added. Sets GUEST_TRIPLE;
# the program lands in $CARGO_TARGET_DIR/$GUEST_TRIPLE/release/.
guest_static_build() {
    local what=$1
    shift
    if [ -z "${GUEST_TRIPLE:-}" ]; then
        if command -v rustup >/dev/null && rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1; then
            GUEST_TRIPLE=x86_64-unknown-linux-musl
        else
            say "rustup target add x86_64-unknown-linux-musl failed; building static glibc binaries instead"
            GUEST_TRIPLE=x86_64-unknown-linux-gnu
        fi
    fi
    if [ "$GUEST_TRIPLE" = x86_64-unknown-linux-musl ]; then
        (cd "$REPO" && cargo build -q --release --locked "$@" --target "$GUEST_TRIPLE") ||
            die "cannot build $what for musl"
    else
        (cd "$REPO" && RUSTFLAGS='-C target-feature=+crt-static' cargo build -q --release --locked "$@" \
            --target "$GUEST_TRIPLE") || die "cannot build $what as static glibc"
    fi
}

# guest_check_static PATH: the program exists and needs no shared library.
guest_check_static() {
    [ -x "$1" ] || die "in-guest program not found at $1"
    if command -v ldd >/dev/null && ldd "$1" 2>&1 | grep -q '=>'; then
        die "$1 is dynamically linked; the guest has no libraries"
    fi
}

# guest_initramfs_root INIT: a fresh $GUEST_DIR/initramfs-root with busybox and INIT as /init;
# sets ROOT. The caller adds its programs and modules, then calls guest_pack.
guest_initramfs_root() {
    ROOT=$GUEST_DIR/initramfs-root
    rm -rf "$ROOT"
    mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,lib/modules}
    cp "$BUSYBOX" "$ROOT/bin/busybox"
    cp "$1" "$ROOT/init"
    chmod 755 "$ROOT/init"
}

# guest_add_modules MODULE...: copy each MODULE.ko of the guest kernel to $ROOT/lib/modules.
# vfio_virqfd may be missing (merged into vfio in later kernels); every other module is required.
guest_add_modules() {
    local m ko
    for m in "$@"; do
        ko=$(find "$KDIR/lib/modules/$KVER" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n1)
        if [ -z "$ko" ]; then
            [ "$m" = vfio_virqfd ] && continue
            die "kernel module $m not found in $KPKG"
        fi
        case $ko in *.ko) ;; *) die "compressed module $ko: decompression not implemented here" ;; esac
        cp "$ko" "$ROOT/lib/modules/$m.ko"
    done
}

# guest_pack: pack $ROOT into $GUEST_DIR/initrd.cpio.gz; sets INITRD.
guest_pack() {
    INITRD=$GUEST_DIR/initrd.cpio.gz
    (cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD") || die "cannot pack the initramfs"
}

# guest_boot TIMEOUT QEMU-COMMAND...: boot with the console on stdio, bounded by TIMEOUT
# seconds. Sets CONSOLE ($GUEST_DIR/console.log; CONSOLE.txt without carriage returns),
# QEMU_ERR, QEMU_RC (124: timed out) and BOOT_S (seconds).
guest_boot() {
    local limit=$1 t0
    shift
    CONSOLE=$GUEST_DIR/console.log
    QEMU_ERR=$GUEST_DIR/qemu-stderr.log
    t0=$(now)
    set +e
    timeout "$limit" "$@" </dev/null >"$CONSOLE" 2>"$QEMU_ERR"
    QEMU_RC=$?
    set -e
    BOOT_S=$(elapsed "$t0")
    tr -d '\r' <"$CONSOLE" >"$CONSOLE.txt"
}

# guest_boot_problems END-MARKER: what went wrong with the boot itself, "; "-separated (empty when
# nothing did): QEMU timed out, the init never printed END-MARKER, or it printed INIT-FAIL lines.
guest_boot_problems() {
    local p=
    [ "$QEMU_RC" = 124 ] && p="QEMU timed out"
    grep -qF "$1" "$CONSOLE.txt" || p="${p:+$p; }no end marker on the console"
    if grep -q '^INIT-FAIL' "$CONSOLE.txt"; then
        p="${p:+$p; }the guest init reported: $(grep '^INIT-FAIL' "$CONSOLE.txt" | head -n3 | tr '\n' ' ')"
    fi
    echo "$p"
}

# guest_dump_failure LINES: the console's last LINES lines and QEMU's stderr, on stderr.
guest_dump_failure() {
    echo "----- last $1 console lines ($CONSOLE) -----" >&2
    tail -n "$1" "$CONSOLE.txt" >&2
    echo "----- QEMU stderr ($QEMU_ERR) -----" >&2
    tail -n 20 "$QEMU_ERR" >&2
}
