#!/usr/bin/env bash
# The driver, through the model's wire, against Linux soft-RoCE (rdma_rxe) and rdma-core's own
# programs in a throw-away QEMU guest.
#
# What it does (background: docs/wire.md, "Interoperability"; the guest side:
# tests/rxe-qemu/init):
#   1. installs cpio, tshark, QEMU (Debian's qemu-system-x86) and python3 when missing;
#   2. downloads and unpacks (never installs) the Debian guest kernel, busybox-static,
#      rdma-core's libibverbs1, ibverbs-providers (rxe), ibverbs-utils and perftest;
#   3. builds the host tool (`mlx5 peer`, `mlx5 pcap-check`);
#   4. packs an initramfs: busybox, the virtio-net/ib_core/rdma_rxe modules, the programs and
#      their libraries, tests/rxe-qemu/init and the list of runs;
#   5. boots one TCG guest with two NICs: virtio-net #1 on `-netdev dgram` (one Ethernet frame
#      per UDP datagram on 127.0.0.1), shared with the model's port; virtio-net #2 on QEMU's
#      user network with restrict=on and one port forward from 127.0.0.1 for the programs'
#      TCP address exchange. Guest addresses are 198.18.0.1 and 198.19.0.15, the model's
#      198.18.0.2; nothing leaves 127.0.0.1;
#   6. runs each program in the guest against `mlx5 peer` (rdma-core's pingpongs) or
#      `mlx5 perf` (perftest's) on the host (the driver through the verbs facade): first with the guest's program as the exchange's client (a guest forward
#      from 198.19.0.4:18515 to the model listening on 127.0.0.1), then as its server (the port
#      forward), some with 1 % of the model's frames dropped and one ICRC corrupted;
#   7. prints one PASS/FAIL line per run with the guest program's own output, saves every
#      capture, re-parses every frame with the project's codec (`mlx5 pcap-check`, every ICRC
#      recomputed) and has tshark decode them as InfiniBand/RoCE without a malformed frame.
#
# Every failure exits non-zero with a message starting `rxe-qemu: FAIL:`.
# Environment: BOOT_TIMEOUT seconds for the whole guest (default 240), CARGO_TARGET_DIR,
# RXE_QEMU_CACHE (default <repo>/target/rxe-qemu: downloads, initramfs, logs, captures),
# RXE_PORT_BASE (default 47341: UDP ports BASE and BASE+1, TCP port BASE+2 on 127.0.0.1).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GUEST_TAG=rxe-qemu
GUEST_DIR=${RXE_QEMU_CACHE:-$REPO/target/rxe-qemu}
# shellcheck source=../guest-lib.sh
. "$REPO/tests/guest-lib.sh"
BOOT_TIMEOUT=${BOOT_TIMEOUT:-240}
END_MARKER='=== RXE-QEMU END ==='
BASE=${RXE_PORT_BASE:-47341}
MODEL_UDP=$BASE         # the model's port receives here (QEMU sends to it)
GUEST_UDP=$((BASE + 1)) # QEMU's dgram netdev receives here (the model sends to it)
EXCHANGE=$((BASE + 2))  # 127.0.0.1:EXCHANGE -> the guest's 198.19.0.15:18515
REVERSE=$((BASE + 3))   # the guest's 198.19.0.4:18515 -> 127.0.0.1:REVERSE (guestfwd)
PERF_REVERSE=$((BASE + 4)) # the guest's 198.19.0.5:18515 -> relay.py -> 127.0.0.1:PERF_REVERSE
T_START=$(now)

# The run where the guest's program is the exchange's client and the model its server. QEMU's
# guestfwd connects to the model's listener once, when QEMU starts, so this run comes first and
# is the only one of its kind.
CLIENT_RUN="rc-4096-guest-client|ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024 -s 4096 -n 3 198.19.0.4|--size 4096 --iters 3"
# The runs where the guest's program is the exchange's server:
# NAME | the guest's command (@GID@: its RoCE v2 IPv4 GID index) | mlx5 peer's options.
RUNS=(
    "rc-64|ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024 -s 64 -n 4|--size 64 --iters 4"
    "rc-4096|ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024 -s 4096 -n 3|--size 4096 --iters 3"
    "rc-3001|ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024 -s 3001 -n 2|--size 3001 --iters 2"
    "rc-64-faults|ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024 -s 64 -n 100|--size 64 --iters 100 --drop 0.01 --corrupt-frame 2"
    "rc-4096-faults|ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024 -s 4096 -n 10|--size 4096 --iters 10 --drop 0.01 --corrupt-frame 5"
)

# perftest's programs against `mlx5 perf` (section "perftest" below), after the runs above.
# NAME | the guest's command | mlx5 perf's options. A NAME with -guest-client is a run
# where the guest's program is the exchange's client: it connects to 198.19.0.5:18515, which
# QEMU hands to tests/rxe-qemu/relay.py per connection, which connects to `mlx5 perf --listen`.
# Small iteration counts keep the guest's part short under TCG.
PERF_RUNS=(
    "write-lat-guest-client|ib_write_lat -d rxe0 -x @GID@ -n 100 198.19.0.5|write-lat --iters 100"
    "write-lat|ib_write_lat -d rxe0 -x @GID@ -n 100 -s 64|write-lat --iters 100 --size 64"
    "write-lat-faults|ib_write_lat -d rxe0 -x @GID@ -n 300 -s 1500|write-lat --iters 300 --size 1500 --drop 0.01 --corrupt-frame 7"
    "read-lat-guest-client|ib_read_lat -d rxe0 -x @GID@ -n 100 198.19.0.5|read-lat --iters 100"
    "read-lat|ib_read_lat -d rxe0 -x @GID@ -n 100 -s 3000|read-lat --iters 100 --size 3000"
    "atomic-lat-guest-client|ib_atomic_lat -d rxe0 -x @GID@ -n 100 198.19.0.5|atomic-lat --iters 100"
    "atomic-lat-faults|ib_atomic_lat -d rxe0 -x @GID@ -n 300|atomic-lat --iters 300 --drop 0.01 --corrupt-frame 4"
    "send-bw-guest-client|ib_send_bw -d rxe0 -x @GID@ -n 100 -s 4096 198.19.0.5|send-bw --iters 100 --size 4096"
    "send-bw|ib_send_bw -d rxe0 -x @GID@ -n 100 -s 3000|send-bw --iters 100 --size 3000"
    "write-bw-guest-client|ib_write_bw -d rxe0 -x @GID@ -n 50 198.19.0.5|write-bw --iters 50"
    "write-bw-faults|ib_write_bw -d rxe0 -x @GID@ -n 200 -s 4096|write-bw --iters 200 --size 4096 --drop 0.01 --corrupt-frame 9"
    "read-bw-guest-client-faults|ib_read_bw -d rxe0 -x @GID@ -n 200 -s 4096 198.19.0.5|read-bw --iters 200 --size 4096 --drop 0.01 --corrupt-frame 6"
    "read-bw|ib_read_bw -d rxe0 -x @GID@ -n 100 -s 8192|read-bw --iters 100 --size 8192"
)

# --- 1. Host packages ------------------------------------------------------------------------
guest_apt_install cpio tshark qemu-system-x86
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing"
guest_apt_install python3 # tests/rxe-qemu/relay.py, the perftest client runs' guest forward
command -v python3 >/dev/null || die "python3 is missing"
qemu-system-x86_64 -netdev help 2>/dev/null | grep -qw dgram ||
    die "this QEMU has no dgram netdev (QEMU 7.2 or later is needed)"
say "$(qemu-system-x86_64 --version | head -n1)"

# --- 2. Guest kernel, busybox and rdma-core: downloaded and unpacked, not installed ----------
guest_kernel
U=$GUEST_DIR/userland
rm -rf "$U"
mkdir -p "$U"
for p in libibverbs1 ibverbs-providers ibverbs-utils perftest libnl-3-200 libnl-route-3-200 \
    librdmacm1 libibumad3 libpci3; do
    d=$(guest_fetch_deb "$p")
    cp -a "$d"/. "$U"/
    ver=$(dpkg-deb -f "$GUEST_DIR"/debs/"$p"_*.deb Version 2>/dev/null || echo "?")
    say "guest package $p $ver"
done

# --- 3. The host tool ---------------------------------------------------------------------------
(cd "$REPO" && cargo build -q --locked -p mlx5-cli --bin mlx5) || die "cannot build the mlx5 tool"
MLX5=$CARGO_TARGET_DIR/debug/mlx5
[ -x "$MLX5" ] || die "no mlx5 binary at $MLX5"

# --- 4. The initramfs ------------------------------------------------------------------------
guest_initramfs_root "$HERE/init"
guest_add_modules virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
    failover net_failover virtio_net crc32_generic ib_core ib_uverbs udp_tunnel ip6_udp_tunnel \
    rdma_rxe
LIBDIR=usr/lib/x86_64-linux-gnu
RDMA=$(command -v rdma || true)
[ -n "$RDMA" ] || die "the host has no rdma tool (Debian package iproute2)"
programs=("$U/usr/bin/ibv_devinfo" "$U/usr/bin/ibv_rc_pingpong" "$U/usr/bin/ibv_srq_pingpong"
    "$U/usr/bin/ibv_ud_pingpong" "$U/usr/bin/ib_send_bw" "$U/usr/bin/ib_write_bw"
    "$U/usr/bin/ib_read_bw" "$U/usr/bin/ib_write_lat" "$U/usr/bin/ib_read_lat"
    "$U/usr/bin/ib_atomic_lat" "$RDMA" "$U/$LIBDIR/libibverbs/librxe-rdmav34.so")
mkdir -p "$ROOT/usr/bin" "$ROOT/$LIBDIR/libibverbs" "$ROOT/etc/libibverbs.d" "$ROOT/lib64"
cp "$U/etc/libibverbs.d/rxe.driver" "$ROOT/etc/libibverbs.d/"
cp "$U/$LIBDIR/libibverbs/librxe-rdmav34.so" "$ROOT/$LIBDIR/libibverbs/"
for prog in "${programs[@]}"; do
    [ -e "$prog" ] || die "$prog is missing from the unpacked packages"
    case $prog in *.so) ;; *) cp "$prog" "$ROOT/usr/bin/" ;; esac
    # Its libraries: from the unpacked packages first, else the host's (glibc, libnl's deps).
    LD_LIBRARY_PATH=$U/$LIBDIR:$U/lib/x86_64-linux-gnu ldd "$prog" |
        awk '/=> \// { print $3 } /^\t\/lib64/ { print $1 }' |
        while read -r lib; do
            case $lib in
            "$U"/*) dest=$ROOT/${lib#"$U"/} ;;
            *) dest=$ROOT$lib ;;
            esac
            mkdir -p "$(dirname "$dest")"
            [ -e "$dest" ] || cp -L "$lib" "$dest"
        done
done
: >"$ROOT/tests"
for r in "$CLIENT_RUN" "${RUNS[@]}"; do
    IFS='|' read -r name gcmd _ <<<"$r"
    echo "$name $gcmd" >>"$ROOT/tests"
done
for r in "${PERF_RUNS[@]}"; do
    IFS='|' read -r name gcmd _ <<<"$r"
    echo "$name $gcmd" >>"$ROOT/tests"
done
guest_pack
say "initramfs $(du -h "$INITRD" | cut -f1) ($(elapsed "$T_START") s so far)"

# --- 5. Boot ---------------------------------------------------------------------------------
OUT=$GUEST_DIR/runs
rm -rf "$OUT"
mkdir -p "$OUT"
CONSOLE=$GUEST_DIR/console.log
QEMU_ERR=$GUEST_DIR/qemu-stderr.log
T_BOOT=$(now)
declare -A HOST_RC
# The model listens before QEMU starts (guestfwd connects to it then).
IFS='|' read -r cname _ copts <<<"$CLIENT_RUN"
# shellcheck disable=SC2086
"$MLX5" --seed 7 peer --listen "127.0.0.1:$REVERSE" --udp-local "127.0.0.1:$MODEL_UDP" \
    --udp-remote "127.0.0.1:$GUEST_UDP" --timeout "$BOOT_TIMEOUT" --pcap "$OUT/$cname.pcap" $copts \
    >"$OUT/$cname.host.txt" 2>&1 &
CLIENT_PID=$!
for _ in $(seq 100); do
    grep -q 'listening on' "$OUT/$cname.host.txt" 2>/dev/null && break
    sleep 0.1
done
timeout "$BOOT_TIMEOUT" qemu-system-x86_64 -accel tcg -m 512M -smp 1 -nodefaults -display none \
    -no-reboot -monitor none -serial "file:$CONSOLE" \
    -netdev "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$GUEST_UDP,remote.type=inet,remote.host=127.0.0.1,remote.port=$MODEL_UDP" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,romfile= \
    -netdev "user,id=n1,net=198.19.0.0/24,host=198.19.0.2,dns=198.19.0.3,restrict=on,hostfwd=tcp:127.0.0.1:$EXCHANGE-198.19.0.15:18515,guestfwd=tcp:198.19.0.4:18515-tcp:127.0.0.1:$REVERSE,guestfwd=tcp:198.19.0.5:18515-cmd:python3 $HERE/relay.py $PERF_REVERSE" \
    -device virtio-net-pci,netdev=n1,mac=52:54:00:00:01:01,romfile= \
    -kernel "$VMLINUZ" -initrd "$INITRD" -append "$GUEST_APPEND" \
    </dev/null >"$QEMU_ERR" 2>&1 &
QEMU_PID=$!
trap 'kill "$QEMU_PID" "$CLIENT_PID" 2>/dev/null || true' EXIT

# --- 6. The runs, in the guest's order ------------------------------------------------------
# wait_peer PID NAME: wait for the host side of run NAME; a guest that is gone cannot answer, so
# stop waiting for it then. Sets HOST_RC[NAME].
wait_peer() {
    while kill -0 "$1" 2>/dev/null; do
        if ! kill -0 "$QEMU_PID" 2>/dev/null; then
            sleep 2
            kill "$1" 2>/dev/null && echo "rxe-qemu: the guest is gone" >>"$OUT/$2.host.txt"
        fi
        sleep 0.2
    done
    set +e
    wait "$1"
    HOST_RC[$2]=$?
    set -e
}
wait_peer "$CLIENT_PID" "$cname"
say "run $cname: host side exit ${HOST_RC[$cname]} ($(elapsed "$T_BOOT") s after boot start)"
for r in "${RUNS[@]}"; do
    IFS='|' read -r name _ hopts <<<"$r"
    left=$(awk -v a="$T_BOOT" -v b="$(now)" -v t="$BOOT_TIMEOUT" 'BEGIN { l = t - (b - a); print (l > 5 ? int(l) : 5) }')
    # shellcheck disable=SC2086
    "$MLX5" --seed 7 peer --connect "127.0.0.1:$EXCHANGE" --udp-local "127.0.0.1:$MODEL_UDP" \
        --udp-remote "127.0.0.1:$GUEST_UDP" --timeout "$left" --pcap "$OUT/$name.pcap" $hopts \
        >"$OUT/$name.host.txt" 2>&1 &
    wait_peer $! "$name"
    say "run $name: host side exit ${HOST_RC[$name]} ($(elapsed "$T_BOOT") s after boot start)"
done
# --- perftest: each program against `mlx5 perf`, in the guest's order ----------------------
declare -A HOST_CMD
for r in "${PERF_RUNS[@]}"; do
    IFS='|' read -r name _ hopts <<<"$r"
    left=$(awk -v a="$T_BOOT" -v b="$(now)" -v t="$BOOT_TIMEOUT" 'BEGIN { l = t - (b - a); print (l > 5 ? int(l) : 5) }')
    case $name in
    *-guest-client*) role=(--listen "127.0.0.1:$PERF_REVERSE") ;;
    *) role=(--connect "127.0.0.1:$EXCHANGE") ;;
    esac
    HOST_CMD[$name]="mlx5 perf ${role[0]} $hopts"
    # shellcheck disable=SC2086
    "$MLX5" --seed 7 perf $hopts "${role[@]}" --udp-local "127.0.0.1:$MODEL_UDP" \
        --udp-remote "127.0.0.1:$GUEST_UDP" --timeout "$left" --pcap "$OUT/$name.pcap" \
        >"$OUT/$name.host.txt" 2>&1 &
    wait_peer $! "$name"
    say "run $name: host side exit ${HOST_RC[$name]} ($(elapsed "$T_BOOT") s after boot start)"
done
set +e
wait "$QEMU_PID"
QEMU_RC=$?
set -e
trap - EXIT
BOOT_S=$(elapsed "$T_BOOT")
tr -d '\r' <"$CONSOLE" >"$CONSOLE.txt"
say "guest ran ${BOOT_S} s (QEMU exit $QEMU_RC)"

# --- 7. Verdicts -----------------------------------------------------------------------------
fails=0
RUNS=("$CLIENT_RUN" "${RUNS[@]}")
RUNS+=("${PERF_RUNS[@]}")
problems=$(guest_boot_problems "$END_MARKER")
if [ -n "$problems" ]; then
    say "guest: $problems"
    guest_dump_failure 40
    fails=$((fails + 1))
fi
for r in "${RUNS[@]}"; do
    IFS='|' read -r name gcmd hopts <<<"$r"
    grc=$(sed -n "s/^WI-END $name rc=\([0-9]*\).*/\1/p" "$CONSOLE.txt" | head -n1)
    if [ "${HOST_RC[$name]}" = 0 ] && [ "$grc" = 0 ]; then
        echo "rxe-qemu: PASS $name  (guest: $gcmd; host: ${HOST_CMD[$name]:-mlx5 peer $hopts})"
    else
        echo "rxe-qemu: FAIL $name  (guest exit ${grc:-none}, host exit ${HOST_RC[$name]})"
        fails=$((fails + 1))
    fi
    echo "  --- guest output ---"
    sed -n "/^WI-BEGIN $name:/,/^WI-END $name /p" "$CONSOLE.txt" | sed 's/^/  | /'
    echo "  --- host output ---"
    sed 's/^/  | /' "$OUT/$name.host.txt"
done
echo "  --- rxe counters and IP statistics at the end ---"
sed -n '/^INFO rxe counters:/,/^INFO uptime at the end/p' "$CONSOLE.txt" | sed 's/^/  | /'

# Every capture: the project's codec (every ICRC recomputed), then tshark.
caps=("$OUT"/*.pcap)
if "$MLX5" pcap-check "${caps[@]}" >"$OUT/pcap-check.txt" 2>&1; then
    echo "rxe-qemu: PASS codec: every frame of ${#caps[@]} captures parsed, every ICRC matches"
else
    echo "rxe-qemu: FAIL codec"
    fails=$((fails + 1))
fi
sed 's/^/  | /' "$OUT/pcap-check.txt"
# The payload of a SEND or WRITE is the program's data, not a protocol: tshark's guess that it
# is an Ethernet frame over InfiniBand (its heuristic eth_over_ib: an RDMA WRITE's 2 bytes
# "00 61" read as an EtherType, then as a malformed CRTP packet) is turned off; every
# InfiniBand header is still decoded.
TSHARK=(tshark --disable-heuristic eth_over_ib)
for c in "${caps[@]}"; do
    total=$("${TSHARK[@]}" -r "$c" 2>/dev/null | wc -l)
    roce=$("${TSHARK[@]}" -r "$c" -Y 'infiniband.bth' 2>/dev/null | wc -l)
    bad=$("${TSHARK[@]}" -r "$c" -Y '_ws.malformed || _ws.expert.severity == error' 2>/dev/null | wc -l)
    if [ "$total" -gt 0 ] && [ "$roce" = "$total" ] && [ "$bad" = 0 ]; then
        echo "rxe-qemu: PASS tshark $(basename "$c"): $roce of $total frames decoded as RoCE, none malformed"
    else
        echo "rxe-qemu: FAIL tshark $(basename "$c"): $roce of $total frames RoCE, $bad malformed or in error"
        fails=$((fails + 1))
    fi
done
say "captures, console and host outputs kept in $OUT and $GUEST_DIR"
say "total $(elapsed "$T_START") s"
[ "$fails" = 0 ] || die "$fails check(s) failed"
say "PASS: ${#RUNS[@]} runs against rdma_rxe"
