#!/usr/bin/env bash
# The mlx5 device model as a PCI function in QEMU, driven by an unmodified Linux guest.
#
# What it does (background: docs/hardware.md "The model in QEMU"; guest side: tests/qemu-mlx5/init):
#   1. installs what it needs from Debian packages (cpio, seabios and qemu-system-data for the
#      firmware images of a self-built QEMU);
#   2. builds (or reuses from its cache outside the clone) QEMU 7.2 with the mlx5-model device
#      (tests/qemu-mlx5/build-qemu.sh);
#   3. builds the model as a shared library (mlx5-sim-ffi, which the device dlopen()s) and the
#      static `mlx5` tool for the guest;
#   4. downloads and unpacks (never installs) Debian's 6.1 guest kernel and busybox-static, and
#      packs an initramfs: busybox, the vfio and mlx5_core modules, tests/qemu-mlx5/init, mlx5;
#   5. boots QEMU (TCG, q35, emulated Intel IOMMU, the model behind a PCIe root port);
#   6. prints one PASS/FAIL line per step:
#        step 1  selftest, demo  the project's tool through vfio-pci (MSI-X, IOMMU);
#        step 2  mlx5_core       Linux's driver probes the function with no error in its log,
#                                its health poller runs, and unbinding returns every page (the
#                                model's trace says so);
#      and keeps the console log, QEMU's stderr and the model's trace in the cache directory.
# Exit status 0 only if every step passed. Environment: BOOT_TIMEOUT seconds (default 900),
# CARGO_TARGET_DIR (default <repo>/target), QEMU_MLX5_CACHE (QEMU builds, default
# /var/cache/mlx5-rs), QEMU_MLX5_WORK (logs and downloads, default <repo>/target/qemu-mlx5).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${QEMU_MLX5_WORK:-$REPO/target/qemu-mlx5}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-900}
END_MARKER='=== QEMU-MLX5 END ==='

die() { echo "qemu-mlx5: FAIL: $*" >&2; exit 1; }
say() { echo "qemu-mlx5: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

T_START=$(now)
mkdir -p "$WORK"
SUDO=
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi

# --- 1. Debian packages -------------------------------------------------------------------
missing=()
for p in cpio seabios qemu-system-data; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    [ "$(id -u)" = 0 ] || [ -n "$SUDO" ] || die "installing ${missing[*]} needs root"
    $SUDO apt-get update -q >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
        die "cannot install ${missing[*]}"
fi

# --- 2. QEMU with the device ------------------------------------------------------------------
T_QEMU=$(now)
QEMU=$("$HERE/build-qemu.sh") || die "building QEMU with the mlx5-model device failed"
say "QEMU: $QEMU (ready after $(elapsed "$T_QEMU") s)"

# --- 3. The model library and the in-guest tool ---------------------------------------------------
T_CARGO=$(now)
(cd "$REPO" && cargo build -q --release --locked -p mlx5-sim-ffi) || die "cannot build mlx5-sim-ffi"
MODEL_LIB=$CARGO_TARGET_DIR/release/libmlx5_sim_ffi.so
[ -f "$MODEL_LIB" ] || die "no $MODEL_LIB"
BUILD=(cargo build -q --release --locked -p mlx5-cli --bin mlx5)
if command -v rustup >/dev/null && rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1; then
    (cd "$REPO" && "${BUILD[@]}" --target x86_64-unknown-linux-musl) || die "cannot build mlx5 for musl"
    TOOL=$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/mlx5
else
    say "rustup target add x86_64-unknown-linux-musl failed; building a static glibc binary instead"
    (cd "$REPO" && RUSTFLAGS='-C target-feature=+crt-static' "${BUILD[@]}" --target x86_64-unknown-linux-gnu) ||
        die "cannot build mlx5 as static glibc"
    TOOL=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/mlx5
fi
[ -x "$TOOL" ] || die "no $TOOL"
say "model library and guest tool built in $(elapsed "$T_CARGO") s"

# --- 4. Guest kernel, busybox, initramfs ----------------------------------------------------------
fetch_deb() { # $1 = package; unpacks into $WORK/unpacked/$1, prints that path
    local pkg=$1 dir=$WORK/unpacked/$1
    if [ ! -f "$dir/.done" ]; then
        mkdir -p "$WORK/debs"
        rm -rf "$dir"
        (cd "$WORK/debs" && rm -f "${pkg}"_*.deb && apt-get download -q "$pkg" >&2) || die "apt-get download $pkg failed"
        mkdir -p "$dir"
        dpkg-deb -x "$WORK/debs/${pkg}"_*.deb "$dir" || die "dpkg-deb -x $pkg failed"
        touch "$dir/.done"
    fi
    echo "$dir"
}
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
if [ -z "$KPKG" ]; then
    $SUDO apt-get update -q >/dev/null || die "apt-get update failed"
    KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
fi
[ -n "$KPKG" ] || die "cannot find the guest kernel package"
KDIR=$(fetch_deb "$KPKG")
BBDIR=$(fetch_deb busybox-static)
VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* | head -n1)
KVER=${VMLINUZ##*/vmlinuz-}
say "guest kernel $KVER"

ROOT=$WORK/initramfs-root
rm -rf "$ROOT"
mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,lib/modules}
cp "$BBDIR/bin/busybox" "$ROOT/bin/busybox"
cp "$HERE/init" "$ROOT/init"
chmod 755 "$ROOT/init"
cp "$TOOL" "$ROOT/mlx5"
for m in irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci psample pci-hyperv-intf mlxfw mlx5_core; do
    ko=$(find "$KDIR/lib/modules/$KVER" -name "$m.ko" | head -n1)
    if [ -z "$ko" ]; then
        [ "$m" = vfio_virqfd ] && continue
        die "kernel module $m.ko not found in $KPKG"
    fi
    cp "$ko" "$ROOT/lib/modules/$m.ko"
done
INITRD=$WORK/initrd.cpio.gz
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD") || die "cannot pack the initramfs"

# --- 5. Boot -------------------------------------------------------------------------------------
CONSOLE=$WORK/console.log
QEMU_ERR=$WORK/qemu-stderr.log
TRACE=$WORK/model-trace.log
rm -f "$TRACE"
say "booting (TCG, timeout ${BOOT_TIMEOUT}s); console $CONSOLE, model trace $TRACE"
T_BOOT=$(now)
set +e
# intel-iommu before the device; the device alone behind a PCIe root port (FLR and secondary
# bus reset both work there). mlx5_core.prof_sel=0: no MR cache (docs/hardware.md).
MLX5_MODEL_LIB=$MODEL_LIB timeout "$BOOT_TIMEOUT" "$QEMU" -L /usr/share/qemu -L /usr/share/seabios \
    -accel tcg -m 1G -smp 1 \
    -machine q35,kernel-irqchip=split -device intel-iommu,intremap=on \
    -device pcie-root-port,id=rp1,chassis=1 \
    -device mlx5-model,bus=rp1,profile=cx5,trace="$TRACE" \
    -nodefaults -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "console=ttyS0 intel_iommu=on quiet panic=-1 log_buf_len=16M mlx5_core.prof_sel=0 mlx5_core.dyndbg=+p" \
    </dev/null >"$CONSOLE" 2>"$QEMU_ERR"
QEMU_RC=$?
set -e
BOOT_S=$(elapsed "$T_BOOT")
tr -d '\r' <"$CONSOLE" >"$CONSOLE.txt"

# --- 6. Verdict ------------------------------------------------------------------------------------
grep -E '^(INFO|INIT-FAIL|STEP-)' "$CONSOLE.txt" || true
say "QEMU exited with $QEMU_RC after $BOOT_S s (whole run $(elapsed "$T_START") s)"
failures=0
step() { # $1 name, $2 verdict (empty = pass), $3 what was checked
    if [ -z "$2" ]; then
        echo "PASS $1: $3"
    else
        echo "FAIL $1: $2"
        failures=$((failures + 1))
    fi
}
boot=
[ "$QEMU_RC" = 124 ] && boot="QEMU timed out after ${BOOT_TIMEOUT}s"
grep -qF "$END_MARKER" "$CONSOLE.txt" || boot="${boot:+$boot; }no end marker"
grep -q '^INIT-FAIL' "$CONSOLE.txt" && boot="${boot:+$boot; }$(grep '^INIT-FAIL' "$CONSOLE.txt" | head -n3 | tr '\n' ' ')"
grep -q 'MODEL PANIC' "$TRACE" 2>/dev/null && boot="${boot:+$boot; }the model panicked (see $TRACE)"
step boot "$boot" "the guest booted with the device and ran to the end marker"

v=
grep -qx 'STEP-SELFTEST-EXIT 0' "$CONSOLE.txt" || v="mlx5 selftest --device vfio:<bdf> did not exit 0 ($(grep '^STEP-SELFTEST-EXIT' "$CONSOLE.txt" || echo 'not run'))"
step "1 selftest" "$v" "mlx5 selftest --device vfio:<bdf> passed every stage through vfio-pci and the vIOMMU"
v=
grep -qx 'STEP-DEMO-EXIT 0' "$CONSOLE.txt" || v="mlx5 demo --device vfio:<bdf> did not exit 0 ($(grep '^STEP-DEMO-EXIT' "$CONSOLE.txt" || echo 'not run'))"
step "1 demo" "$v" "mlx5 demo --device vfio:<bdf> exited 0"

# Step 2: bound, no error in mlx5_core's log, the health poller read the counter, and the
# model's last state after the unbind holds no page and no object.
v=
grep -qx 'STEP-MLX5CORE-BOUND 1' "$CONSOLE.txt" || v="mlx5_core did not bind"
grep -qx 'STEP-MLX5CORE-UNBOUND 1' "$CONSOLE.txt" || v="${v:+$v; }unbind failed"
klog=$(sed -n '/^KLOG-BEGIN/,/^KLOG-END/p' "$CONSOLE.txt")
# The one warning allowed: no vendor-specific (VSC) capability, which the device leaves out on
# purpose (Linux needs it only for crash dumps and firmware-reset semaphores).
errs=$(echo "$klog" | grep -E 'mlx5_core' | grep -iE 'error|fail|timeout|abort|compromised|recovered after' |
    grep -v 'Failed to get valid vendor specific ID' | head -n 5 || true)
[ -z "$errs" ] || v="${v:+$v; }kernel log: $errs"
# Health-counter reads after Linux set its driver version (so not the tool's reads in step 1).
health=$(awk '/^STATE .*driver_version="Linux/ { linux = 1 } linux && /^HEALTH-POLL/ { n++ } END { print n + 0 }' "$TRACE" 2>/dev/null || echo 0)
[ "${health:-0}" -ge 2 ] || v="${v:+$v; }the health counter was read ${health:-0} times (poller not running)"
last=$(grep '^STATE' "$TRACE" 2>/dev/null | tail -n1)
echo "$last" | grep -q 'hca=Disabled pages_held=0 objects=0 violations=0 iommu_faults=0' ||
    v="${v:+$v; }model's last state: ${last:-none}"
step "2 mlx5_core" "$v" "probe bound with no error logged, health counter read $health times, unbind left: ${last#STATE }"

if [ "$failures" -gt 0 ]; then
    echo "----- last 40 console lines ($CONSOLE) -----" >&2
    tail -n 40 "$CONSOLE.txt" >&2
    echo "----- QEMU stderr ($QEMU_ERR) -----" >&2
    tail -n 20 "$QEMU_ERR" >&2
    die "$failures step(s) failed"
fi
say "OK: every step passed"
