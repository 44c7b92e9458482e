#!/usr/bin/env bash
# The mlx5-vfio platform against the real Linux VFIO stack, in a throw-away QEMU guest.
#
# What it does (background: docs/hardware.md; the guest side: tests/vfio-qemu/init):
#   1. installs QEMU (qemu-system-x86 + qemu-utils from bookworm-backports) and cpio with apt;
#   2. downloads and unpacks (never installs) the Debian guest kernel and busybox-static;
#   3. builds the static in-guest program `vfio-host/examples/edu_probe.rs` (musl; static glibc
#      as a fallback);
#   4. packs an initramfs (busybox, the six vfio modules, tests/vfio-qemu/init, the program);
#   5. boots QEMU (TCG, q35, emulated Intel IOMMU, the `edu` PCI device behind a PCIe root
#      port); the guest's init binds edu to vfio-pci and runs the program, which prints one
#      `PASS`/`FAIL` line per step (open, BAR0, DMA, MSI interrupts through `Hal::wait_irq`,
#      close, and the interrupt opt-out); with QEMU's `igb` behind a second root port (when
#      this QEMU has it) also the MSI-X vectors;
#   6. passes only if the console shows the end marker, `PROBE-EXIT 0`, `RESULT 0 failures` and
#      a `PASS` line for each step in REQUIRED_STEPS below (so a step cannot silently vanish).
#
# Every failure exits non-zero with a message starting `vfio-qemu: FAIL:`.
# Environment: ACCEL=tcg|kvm (default tcg: this machine's KVM cannot boot a stock kernel),
# BOOT_TIMEOUT seconds (default 300), CARGO_TARGET_DIR (default <repo>/target),
# VFIO_QEMU_CACHE (default <repo>/target/vfio-qemu-cache: downloads and build products).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${VFIO_QEMU_CACHE:-$REPO/target/vfio-qemu-cache}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
ACCEL=${ACCEL:-tcg}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-300}
END_MARKER='=== VFIO-QEMU END ==='

die() {
    echo "vfio-qemu: FAIL: $*" >&2
    exit 1
}
say() { echo "vfio-qemu: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

T_START=$(now)
mkdir -p "$CACHE"

SUDO=
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    fi
fi

qemu_has_edu() {
    command -v qemu-system-x86_64 >/dev/null &&
        qemu-system-x86_64 -device help 2>/dev/null | grep -q '"edu"' &&
        qemu-system-x86_64 -device help 2>/dev/null | grep -q '"intel-iommu"'
}

# --- 1. Debian packages -------------------------------------------------------------------
install_qemu_from_backports() {
    # The image carries qemu-utils from bookworm-backports; bookworm's own qemu-system-x86
    # would make apt remove it. Install both from backports through a temporary apt
    # configuration built from the Debian mirror already configured, so /etc/apt is untouched.
    local mirror tmp
    mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list 2>/dev/null |
        grep -oE 'https?://[^ ]*/debian/?' | grep -v security | head -n1 || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lists/partial" "$tmp/archives/partial" "$tmp/parts"
    cp /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "$tmp/parts/" 2>/dev/null || true
    [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$tmp/sources.list" || : >"$tmp/sources.list"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    cat >"$tmp/parts/zz-vfio-qemu-backports.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: $keyring
EOF
    local opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o "Dir::Etc::sourceparts=$tmp/parts"
        -o "Dir::State::lists=$tmp/lists" -o "Dir::Cache::archives=$tmp/archives")
    say "apt-get update (with bookworm-backports from $mirror)"
    $SUDO apt-get "${opts[@]}" update -q || { rm -rf "$tmp"; return 1; }
    say "apt-get install -t bookworm-backports qemu-system-x86 qemu-utils"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${opts[@]}" install -y -q --no-install-recommends \
        -t bookworm-backports qemu-system-x86 qemu-utils || { rm -rf "$tmp"; return 1; }
    rm -rf "$tmp"
}

if ! qemu_has_edu || ! command -v cpio >/dev/null; then
    if [ "$(id -u)" != 0 ] && [ -z "$SUDO" ]; then
        die "QEMU with the edu device and cpio are needed, and installing them needs root (run as root or with passwordless sudo)"
    fi
    if ! command -v cpio >/dev/null; then
        say "apt-get update; apt-get install cpio"
        $SUDO apt-get update -q || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends cpio ||
            die "cannot install cpio"
    fi
    if ! qemu_has_edu; then
        if ! install_qemu_from_backports; then
            say "backports install failed; trying bookworm's own qemu-system-x86"
            $SUDO apt-get update -q || die "apt-get update failed"
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
                qemu-system-x86 || die "cannot install QEMU (qemu-system-x86): the VFIO test cannot run"
        fi
    fi
fi
qemu_has_edu || die "qemu-system-x86_64 is missing or lacks the edu / intel-iommu devices"
say "$(qemu-system-x86_64 --version | head -n1)"

# --- 2. Guest kernel and busybox: downloaded and unpacked, not installed ------------------
fetch_deb() { # $1 = package name; unpacks into $CACHE/unpacked/$1, prints that path
    local pkg=$1 dir=$CACHE/unpacked/$1
    if [ ! -f "$dir/.done" ]; then
        mkdir -p "$CACHE/debs"
        rm -rf "$dir"
        (cd "$CACHE/debs" && rm -f "${pkg}"_*.deb && apt-get download -q "$pkg" >&2) ||
            die "apt-get download $pkg failed"
        mkdir -p "$dir"
        dpkg-deb -x "$CACHE/debs/${pkg}"_*.deb "$dir" || die "dpkg-deb -x $pkg failed"
        touch "$dir/.done"
    fi
    echo "$dir"
}

KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
if [ -z "$KPKG" ]; then
    # The package lists may be absent on a fresh image.
    $SUDO apt-get update -q >/dev/null || die "apt-get update failed"
    KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
fi
[ -n "$KPKG" ] || die "cannot find the guest kernel package (apt-cache depends linux-image-amd64)"
KDIR=$(fetch_deb "$KPKG")
BBDIR=$(fetch_deb busybox-static)
VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* 2>/dev/null | head -n1)
[ -n "$VMLINUZ" ] || die "no vmlinuz in $KPKG"
KVER=${VMLINUZ##*/vmlinuz-}
BUSYBOX=$BBDIR/bin/busybox
[ -x "$BUSYBOX" ] || die "no bin/busybox in busybox-static"
say "guest kernel $KVER"

# --- 3. The in-guest program --------------------------------------------------------------
PROBE=
BUILD=(cargo build -q --release --locked -p mlx5-vfio --example edu_probe)
if command -v rustup >/dev/null && rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1; then
    (cd "$REPO" && "${BUILD[@]}" --target x86_64-unknown-linux-musl) ||
        die "cannot build the in-guest program (vfio-host/examples/edu_probe.rs) for musl"
    PROBE=$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/examples/edu_probe
else
    say "rustup target add x86_64-unknown-linux-musl failed; building a static glibc binary instead"
    (cd "$REPO" && RUSTFLAGS='-C target-feature=+crt-static' "${BUILD[@]}" --target x86_64-unknown-linux-gnu) ||
        die "cannot build the in-guest program (vfio-host/examples/edu_probe.rs) as static glibc"
    PROBE=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/examples/edu_probe
fi
[ -x "$PROBE" ] || die "in-guest program not found at $PROBE"
if command -v ldd >/dev/null && ldd "$PROBE" 2>&1 | grep -q '=>'; then
    die "$PROBE is dynamically linked; the guest has no libraries"
fi

# --- 4. initramfs --------------------------------------------------------------------------
ROOT=$CACHE/initramfs-root
rm -rf "$ROOT"
mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,lib/modules}
cp "$BUSYBOX" "$ROOT/bin/busybox"
cp "$HERE/init" "$ROOT/init"
chmod 755 "$ROOT/init"
cp "$PROBE" "$ROOT/edu-probe"
for m in irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci; do
    ko=$(find "$KDIR/lib/modules/$KVER" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n1)
    if [ -z "$ko" ]; then
        # vfio_virqfd was merged into vfio in later kernels; every other module is required.
        [ "$m" = vfio_virqfd ] && continue
        die "kernel module $m not found in $KPKG"
    fi
    case $ko in *.ko) ;; *) die "compressed module $ko: decompression not implemented here" ;; esac
    cp "$ko" "$ROOT/lib/modules/$m.ko"
done
INITRD=$CACHE/initrd.cpio.gz
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD") || die "cannot pack the initramfs"
say "initramfs $(du -h "$INITRD" | cut -f1) ready after $(elapsed "$T_START") s"

# --- 5. Boot ---------------------------------------------------------------------------------
case $ACCEL in
kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
tcg) ACCEL_ARGS=(-accel tcg) ;;
*) die "ACCEL must be tcg or kvm, not $ACCEL" ;;
esac
# QEMU's igb (Intel 82576) has MSI-X, which edu lacks and a ConnectX uses: when this QEMU has it
# (QEMU 8.0 and later), it sits behind a second root port and the MSI-X checks run and are
# required; without it (bookworm's QEMU 7.2) they are reported as not run.
IGB_ARGS=()
if qemu-system-x86_64 -device help 2>/dev/null | grep -q '"igb"'; then
    IGB_ARGS=(-device pcie-root-port,id=rp2,chassis=2 -device igb,bus=rp2,romfile=)
else
    say "this QEMU has no igb device: the MSI-X checks cannot run (MSI is still checked on edu)"
fi
CONSOLE=$CACHE/console.log
QEMU_ERR=$CACHE/qemu-stderr.log
say "booting (accel $ACCEL, timeout ${BOOT_TIMEOUT}s); console in $CONSOLE"
T_BOOT=$(now)
set +e
# intel-iommu must precede edu (pitfall 3). edu sits alone behind a PCIe root port so that
# vfio-pci can reset it (secondary bus reset) and VFIO_DEVICE_RESET is exercised on open and
# close; on the root bus edu has no reset method at all. QEMU's stderr gets the expected
# "vtd_iova_to_slpte: detected slpte permission error" of the negative DMA test (pitfall 4).
timeout "$BOOT_TIMEOUT" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m 512M -smp 1 \
    -machine q35,kernel-irqchip=split -device intel-iommu,intremap=on \
    -device pcie-root-port,id=rp1,chassis=1 -device edu,bus=rp1 "${IGB_ARGS[@]}" \
    -nodefaults -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "console=ttyS0 intel_iommu=on quiet panic=-1" \
    </dev/null >"$CONSOLE" 2>"$QEMU_ERR"
QEMU_RC=$?
set -e
BOOT_S=$(elapsed "$T_BOOT")

# --- 6. Verdict --------------------------------------------------------------------------------
tr -d '\r' <"$CONSOLE" >"$CONSOLE.txt"
grep -E '^(PASS|FAIL|INFO|NOTE|RESULT|PROBE-EXIT|INIT-FAIL)' "$CONSOLE.txt" || true
say "QEMU exited with $QEMU_RC after $BOOT_S s (whole run $(elapsed "$T_START") s)"
fail=
[ "$QEMU_RC" = 124 ] && fail="QEMU timed out after ${BOOT_TIMEOUT}s"
grep -qF "$END_MARKER" "$CONSOLE.txt" || fail="${fail:+$fail; }no end marker on the console"
grep -qx 'PROBE-EXIT 0' "$CONSOLE.txt" || fail="${fail:+$fail; }the in-guest program did not exit 0"
grep -qx 'RESULT 0 failures' "$CONSOLE.txt" || fail="${fail:+$fail; }no 'RESULT 0 failures' line"
grep -q '^INIT-FAIL' "$CONSOLE.txt" && fail="${fail:+$fail; }the guest init reported a failure"
REQUIRED_STEPS="open dma-from-device dma-after-unmap irq-setup irq-timeout irq-latched irq-once irq-wake
irq-fd irq-dma-complete close irq-off-at-close"
for step in $REQUIRED_STEPS; do
    for tag in hugepages 4k-fallback; do
        grep -q "^PASS $step\[$tag\] " "$CONSOLE.txt" || fail="${fail:+$fail; }no PASS line for $step[$tag]"
    done
done
grep -q '^PASS irq-opt-out ' "$CONSOLE.txt" || fail="${fail:+$fail; }no PASS line for irq-opt-out"
if [ ${#IGB_ARGS[@]} -gt 0 ]; then
    for step in irq-setup irq-vector irq-vectors irq-off-at-close; do
        grep -q "^PASS $step\[msix\] " "$CONSOLE.txt" || fail="${fail:+$fail; }no PASS line for $step[msix]"
    done
fi
if [ -n "$fail" ]; then
    echo "----- last 60 console lines ($CONSOLE) -----" >&2
    tail -n 60 "$CONSOLE.txt" >&2
    echo "----- QEMU stderr ($QEMU_ERR) -----" >&2
    tail -n 20 "$QEMU_ERR" >&2
    die "$fail"
fi
say "OK: every step passed on the real kernel VFIO stack"
