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
# The kernel, initramfs, boot and failure-dump pieces are tests/guest-lib.sh, shared with
# tests/qemu-mlx5/run.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GUEST_TAG=vfio-qemu
GUEST_DIR=${VFIO_QEMU_CACHE:-$REPO/target/vfio-qemu-cache}
# shellcheck source=../guest-lib.sh
. "$REPO/tests/guest-lib.sh"
ACCEL=${ACCEL:-tcg}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-300}
END_MARKER='=== VFIO-QEMU END ==='

T_START=$(now)

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
guest_kernel

# --- 3. The in-guest program --------------------------------------------------------------
guest_static_build "the in-guest program (vfio-host/examples/edu_probe.rs)" -p mlx5-vfio --example edu_probe
PROBE=$CARGO_TARGET_DIR/$GUEST_TRIPLE/release/examples/edu_probe
guest_check_static "$PROBE"

# --- 4. initramfs --------------------------------------------------------------------------
guest_initramfs_root "$HERE/init"
cp "$PROBE" "$ROOT/edu-probe"
guest_add_modules irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci
guest_pack
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
say "booting (accel $ACCEL, timeout ${BOOT_TIMEOUT}s); console in $GUEST_DIR/console.log"
# intel-iommu must precede edu (pitfall 3). edu sits alone behind a PCIe root port so that
# vfio-pci can reset it (secondary bus reset) and VFIO_DEVICE_RESET is exercised on open and
# close; on the root bus edu has no reset method at all. QEMU's stderr gets the expected
# "vtd_iova_to_slpte: detected slpte permission error" of the negative DMA test (pitfall 4).
guest_boot "$BOOT_TIMEOUT" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m 512M -smp 1 \
    -machine q35,kernel-irqchip=split -device intel-iommu,intremap=on \
    -device pcie-root-port,id=rp1,chassis=1 -device edu,bus=rp1 "${IGB_ARGS[@]}" \
    -nodefaults -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "$GUEST_APPEND"

# --- 6. Verdict --------------------------------------------------------------------------------
grep -E '^(PASS|FAIL|INFO|NOTE|RESULT|PROBE-EXIT|INIT-FAIL)' "$CONSOLE.txt" || true
say "QEMU exited with $QEMU_RC after $BOOT_S s (whole run $(elapsed "$T_START") s)"
fail=$(guest_boot_problems "$END_MARKER")
grep -qx 'PROBE-EXIT 0' "$CONSOLE.txt" || fail="${fail:+$fail; }the in-guest program did not exit 0"
grep -qx 'RESULT 0 failures' "$CONSOLE.txt" || fail="${fail:+$fail; }no 'RESULT 0 failures' line"
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
    guest_dump_failure 60
    die "$fail"
fi
say "OK: every step passed on the real kernel VFIO stack"
