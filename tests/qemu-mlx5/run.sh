#!/usr/bin/env bash
# The mlx5 device model as a PCI function in QEMU, driven by an unmodified Linux guest.
#
# What it does (background: docs/hardware.md "The model in QEMU"; guest side: tests/qemu-mlx5/init):
#   1. installs what it needs from Debian packages (cpio, seabios and qemu-system-data for the
#      firmware images of a self-built QEMU);
#   2. builds (or reuses from its cache outside the clone) QEMU 7.2 with the mlx5-model device
#      (tests/qemu-mlx5/build-qemu.sh);
#   3. builds the model as a shared library (mlx5-sim-ffi, which the device dlopen()s), and
#      the static `mlx5` tool and `sleeping_receiver` example for the guest;
#   4. downloads and unpacks (never installs) Debian's 6.1 guest kernel and busybox-static, and
#      packs an initramfs: busybox, the vfio and mlx5_core modules, tests/qemu-mlx5/init, the
#      two programs;
#   5. boots QEMU (TCG, q35, emulated Intel IOMMU, the model behind a PCIe root port);
#   6. prints one PASS/FAIL line per step:
#        step 1  selftest, demo  the project's tool through vfio-pci (IOMMU), each run with
#                                MSI-X messages the guest kernel took on the device's vectors
#                                (the tool reads vfio-pci's lines of /proc/interrupts);
#        step 1  sleeping_receiver  examples/sleeping_receiver.rs through vfio-pci: it sleeps in
#                                get_cq_event_on until the receive CQ's MSI-X interrupt;
#        step 1  msix            the model sent at least as many MSI-X messages as the guest's
#                                kernel took in step 1 (its trace), and more than none;
#        step 2  mlx5_core       Linux's driver probes the function with no error in its log,
#                                its health poller runs, and unbinding returns every page (the
#                                model's trace says so);
#      and keeps the console log, QEMU's stderr and the model's trace in the work directory.
# Exit status 0 only if every step passed. Environment: BOOT_TIMEOUT seconds (default 900),
# CARGO_TARGET_DIR (default <repo>/target), QEMU_MLX5_CACHE (QEMU builds, default
# /var/cache/mlx5-rs), QEMU_MLX5_WORK (logs and downloads, default <repo>/target/qemu-mlx5).
# The kernel, initramfs, boot and failure-dump pieces are tests/guest-lib.sh, shared with
# tests/vfio-qemu/run.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GUEST_TAG=qemu-mlx5
GUEST_DIR=${QEMU_MLX5_WORK:-$REPO/target/qemu-mlx5}
# shellcheck source=../guest-lib.sh
. "$REPO/tests/guest-lib.sh"
BOOT_TIMEOUT=${BOOT_TIMEOUT:-900}
END_MARKER='=== QEMU-MLX5 END ==='

T_START=$(now)

# --- 1. Debian packages -------------------------------------------------------------------
guest_apt_install cpio seabios qemu-system-data

# --- 2. QEMU with the device ------------------------------------------------------------------
T_QEMU=$(now)
QEMU=$("$HERE/build-qemu.sh") || die "building QEMU with the mlx5-model device failed"
say "QEMU: $QEMU (ready after $(elapsed "$T_QEMU") s)"

# --- 3. The model library and the in-guest tool ---------------------------------------------------
T_CARGO=$(now)
(cd "$REPO" && cargo build -q --release --locked -p mlx5-sim-ffi) || die "cannot build mlx5-sim-ffi"
MODEL_LIB=$CARGO_TARGET_DIR/release/libmlx5_sim_ffi.so
[ -f "$MODEL_LIB" ] || die "no $MODEL_LIB"
guest_static_build "the mlx5 tool" -p mlx5-cli --bin mlx5
TOOL=$CARGO_TARGET_DIR/$GUEST_TRIPLE/release/mlx5
guest_check_static "$TOOL"
guest_static_build "examples/sleeping_receiver.rs" -p mlx5-examples --example sleeping_receiver
SLEEPER=$CARGO_TARGET_DIR/$GUEST_TRIPLE/release/examples/sleeping_receiver
guest_check_static "$SLEEPER"
say "model library and guest programs built in $(elapsed "$T_CARGO") s"

# --- 4. Guest kernel, busybox, initramfs ----------------------------------------------------------
guest_kernel
guest_initramfs_root "$HERE/init"
cp "$TOOL" "$ROOT/mlx5"
cp "$SLEEPER" "$ROOT/sleeping-receiver"
guest_add_modules irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci \
    psample pci-hyperv-intf mlxfw mlx5_core
guest_pack

# --- 5. Boot -------------------------------------------------------------------------------------
TRACE=$GUEST_DIR/model-trace.log
rm -f "$TRACE"
say "booting (TCG, timeout ${BOOT_TIMEOUT}s); console $GUEST_DIR/console.log, model trace $TRACE"
export MLX5_MODEL_LIB=$MODEL_LIB
# intel-iommu before the device; the device alone behind a PCIe root port (FLR and secondary
# bus reset both work there). mlx5_core.prof_sel=0: no MR cache (docs/hardware.md).
guest_boot "$BOOT_TIMEOUT" "$QEMU" -L /usr/share/qemu -L /usr/share/seabios \
    -accel tcg -m 1G -smp 1 \
    -machine q35,kernel-irqchip=split -device intel-iommu,intremap=on \
    -device pcie-root-port,id=rp1,chassis=1 \
    -device mlx5-model,bus=rp1,profile=cx5,trace="$TRACE" \
    -nodefaults -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VMLINUZ" -initrd "$INITRD" \
    -append "$GUEST_APPEND log_buf_len=16M mlx5_core.prof_sel=0 mlx5_core.dyndbg=+p"

# --- 6. Verdict ------------------------------------------------------------------------------------
grep -E '^(INFO|INIT-FAIL|STEP-|interrupts:)' "$CONSOLE.txt" || true
grep -E 'messages received by a receiver|completion events \(' "$CONSOLE.txt" || true
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
boot=$(guest_boot_problems "$END_MARKER")
grep -q 'MODEL PANIC' "$TRACE" 2>/dev/null && boot="${boot:+$boot; }the model panicked (see $TRACE)"
step boot "$boot" "the guest booted with the device and ran to the end marker"

# The tool's run on the device: exit 0, and the MSI-X messages the guest's kernel took on the
# device's vectors while the tool had it open (STEP-<name>-IRQS, from the tool's interrupts line).
tool_step() { # $1 step name, $2 console tag, $3 command
    local v= irqs
    grep -qx "STEP-$2-EXIT 0" "$CONSOLE.txt" || v="$3 did not exit 0 ($(grep "^STEP-$2-EXIT" "$CONSOLE.txt" || echo 'not run'))"
    irqs=$(sed -n "s/^STEP-$2-IRQS \([0-9][0-9]*\)\$/\1/p" "$CONSOLE.txt" | head -n1)
    [ "${irqs:-0}" -gt 0 ] || v="${v:+$v; }no MSI-X interrupt reached the guest's kernel on the device's vectors (${irqs:-no interrupts line})"
    step "1 $1" "$v" "$3 passed through vfio-pci and the vIOMMU; the guest's kernel took ${irqs:-0} MSI-X interrupts of the device"
}
tool_step selftest SELFTEST "mlx5 selftest --device vfio:<bdf>"
tool_step demo DEMO "mlx5 demo --device vfio:<bdf>"

# sleeping_receiver: exit 0, it slept (a wait found the CQ empty) and interrupts on the receive
# CQ's vector woke it (the kernel's count; the example itself fails a sleep without one).
v=
grep -qx 'STEP-SLEEPER-EXIT 0' "$CONSOLE.txt" || v="sleeping_receiver did not exit 0 ($(grep '^STEP-SLEEPER-EXIT' "$CONSOLE.txt" || echo 'not run'))"
line=$(grep -E '^  [0-9]+ completion events \([0-9]+ waits found the CQ empty\)' "$CONSOLE.txt" | head -n1 || true)
events=$(echo "$line" | sed -n 's/^  \([0-9]*\) completion events.*/\1/p')
sleeps=$(echo "$line" | sed -n 's/.*(\([0-9]*\) waits found the CQ empty).*/\1/p')
wakes=$(echo "$line" | sed -n "s/.*, \([0-9]*\) interrupts on the receive CQ's vector.*/\1/p")
[ "${sleeps:-0}" -gt 0 ] || v="${v:+$v; }it never slept (${line:-no summary line})"
[ "${wakes:-0}" -gt 0 ] || v="${v:+$v; }no interrupt on the receive CQ's vector (${line:-no summary line})"
step "1 sleeping_receiver" "$v" "sleeping_receiver vfio:<bdf> slept ${sleeps:-0} times in get_cq_event_on, woken by ${wakes:-0} MSI-X interrupts on the receive CQ's vector; ${events:-0} completion events, payloads checked"

# The model's side of step 1: the MSI-X messages it sent (its trace's irqs counter, on the last
# state line before Linux's driver set its version) cover what the guest's kernel counted.
v=
model_irqs=$(awk '/^STATE .*driver_version="Linux/ { exit } /^STATE / { for (i = 1; i <= NF; i++) if ($i ~ /^irqs=/) { split($i, a, "="); n = a[2] } } END { print n + 0 }' "$TRACE" 2>/dev/null || echo 0)
kernel_irqs=0
for tag in SELFTEST DEMO; do
    n=$(sed -n "s/^STEP-$tag-IRQS \([0-9][0-9]*\)\$/\1/p" "$CONSOLE.txt" | head -n1)
    kernel_irqs=$((kernel_irqs + ${n:-0}))
done
kernel_irqs=$((kernel_irqs + ${wakes:-0}))
[ "$model_irqs" -gt 0 ] || v="the model sent no MSI-X message in step 1"
[ "$model_irqs" -ge "$kernel_irqs" ] || v="${v:+$v; }the guest's kernel counted $kernel_irqs interrupts but the model sent only $model_irqs"
step "1 msix" "$v" "the model sent $model_irqs MSI-X messages in step 1; the guest's kernel counted $kernel_irqs of them in the three programs' counts"

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
    guest_dump_failure 40
    die "$failures step(s) failed"
fi
say "OK: every step passed"
