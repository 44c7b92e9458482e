#!/usr/bin/env bash
# The driver, through the model's wire, against Linux soft-RoCE (rdma_rxe) and rdma-core's own
# programs in a throw-away QEMU guest.
#
# What it does (background: docs/wire.md, "Interoperability"; the guest side:
# tests/rxe-qemu/init):
#   1. installs cpio, tshark and QEMU (Debian's qemu-system-x86) when missing;
#   2. downloads and unpacks (never installs) the Debian guest kernel, busybox-static,
#      rdma-core's libibverbs1, ibverbs-providers (rxe), ibverbs-utils and perftest;
#   3. builds the host tool (`mlx5 peer`, `mlx5 pcap-check`);
#   4. packs an initramfs: busybox, the virtio-net/ib_core/rdma_rxe modules, the programs and
#      their libraries, tests/rxe-qemu/init and the list of runs;
#   5. boots one TCG guest with two NICs: virtio-net #1 on `-netdev dgram` (one Ethernet frame
#      per UDP datagram on 127.0.0.1), shared with the model's port; virtio-net #2 on QEMU's
#      user network with restrict=on, one port forward from 127.0.0.1 and one guest forward
#      (each connection to 198.19.0.4:18515 starts tests/rxe-qemu/relay.py, joined to
#      127.0.0.1) for the programs' TCP address exchange. Guest addresses are 198.18.0.1 and
#      198.19.0.15, the model's 198.18.0.2; nothing leaves 127.0.0.1;
#   6. runs each program in the guest against `mlx5 peer` (rdma-core's pingpongs) or
#      `mlx5 perf` (perftest's) on the host (the driver through the verbs facade), in the order of the runs list below (one section per program): as the
#      exchange's client (guest-client: the guest forward to `mlx5 peer --listen`) or its
#      server (guest-server: the port forward from `mlx5 peer --connect`), some with 1 % of
#      the model's frames dropped and one ICRC corrupted;
#   7. prints one PASS/FAIL line per run with the guest program's own output, saves every
#      capture, re-parses every frame with the project's codec (`mlx5 pcap-check`, every ICRC
#      recomputed) and has tshark decode them as InfiniBand/RoCE without a malformed frame.
#
# Every failure exits non-zero with a message starting `rxe-qemu: FAIL:`.
# Environment: BOOT_TIMEOUT seconds for the whole guest (default 240), CARGO_TARGET_DIR,
# RXE_QEMU_CACHE (default <repo>/target/rxe-qemu: downloads, initramfs, logs, captures),
# RXE_PORT_BASE (default 47341: UDP ports BASE and BASE+1, TCP ports BASE+2 and BASE+3 on
# 127.0.0.1). Needs python3 (the relay).
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
T_START=$(now)

RELAY_LOG=$GUEST_DIR/relay.log

# The runs, one section per program. add_run NAME ROLE GUEST-COMMAND HOST-OPTIONS [TOOL]: TOOL is
# the host's subcommand, `peer` (the default) or `perf` (HOST-OPTIONS then start with its test). ROLE is
# guest-server (the guest's program listens; `mlx5 peer --connect` reaches it through the port
# forward) or guest-client (the program connects to 198.19.0.4:18515, which QEMU hands to
# tests/rxe-qemu/relay.py, a new one per connection, joined to `mlx5 peer --listen`).
# @GID@ in the guest's command is its RoCE v2 IPv4 GID index; @HOST@ the model's exchange address.
RUNS=()
add_run() { RUNS+=("$1|$2|$3|$4|${5:-peer}"); }

# ibv_rc_pingpong: RC SENDs of 0x7b bytes; both roles, three sizes, and faults.
runs_rc_pingpong() {
    local p="ibv_rc_pingpong -d rxe0 -g @GID@ -m 1024"
    add_run rc-64 guest-server "$p -s 64 -n 4" "--size 64 --iters 4"
    add_run rc-64-guest-client guest-client "$p -s 64 -n 4 @HOST@" "--size 64 --iters 4"
    add_run rc-4096 guest-server "$p -s 4096 -n 3" "--size 4096 --iters 3"
    add_run rc-4096-guest-client guest-client "$p -s 4096 -n 3 @HOST@" "--size 4096 --iters 3"
    add_run rc-3001 guest-server "$p -s 3001 -n 2" "--size 3001 --iters 2"
    add_run rc-64-faults guest-server "$p -s 64 -n 100" \
        "--size 64 --iters 100 --drop 0.01 --corrupt-frame 2"
    add_run rc-4096-faults guest-server "$p -s 4096 -n 10" \
        "--size 4096 --iters 10 --drop 0.01 --corrupt-frame 5"
}

# ibv_ud_pingpong: UD SENDs with Q_Key 0x11111111 into buffers with 40 bytes of GRH space; the
# largest size rxe's 1024-byte active MTU allows, and an odd size with the program's -c check.
# No fault runs: UD has no retransmission, so a lost datagram stalls the program for good.
runs_ud_pingpong() {
    local p="ibv_ud_pingpong -d rxe0 -g @GID@"
    add_run ud-1024 guest-server "$p -s 1024 -n 20" "--program ud-pingpong --size 1024 --iters 20"
    add_run ud-1001-guest-client guest-client "$p -s 1001 -n 20 -c @HOST@" \
        "--program ud-pingpong --size 1001 --iters 20 --chk"
}

# ibv_srq_pingpong: 16 RC QPs (its default) receiving through one SRQ each side; both roles,
# and faults.
runs_srq_pingpong() {
    local p="ibv_srq_pingpong -d rxe0 -g @GID@ -m 1024"
    add_run srq-4096 guest-server "$p -s 4096 -n 64" "--program srq-pingpong --size 4096 --iters 64"
    add_run srq-64-guest-client guest-client "$p -s 64 -n 32 @HOST@" \
        "--program srq-pingpong --size 64 --iters 32"
    add_run srq-4096-faults guest-server "$p -s 4096 -n 64" \
        "--program srq-pingpong --size 4096 --iters 64 --drop 0.01 --corrupt-frame 5"
}

# perftest's programs against `mlx5 perf`, through perftest's own exchange; -x is the GID index.
# -F: under TCG perftest's calibration of the CPU clock (a fit of cycle counts against time)
# can miss its r^2 >= 0.9 check, and the program then refuses to print its report and exits 1;
# with -F it prints the report anyway. Small iteration counts keep the guest's part short.
runs_ib_write_lat() {
    local p="ib_write_lat -d rxe0 -x @GID@ -F"
    add_run write-lat-guest-client guest-client "$p -n 100 @HOST@" "write-lat --iters 100" perf
    add_run write-lat guest-server "$p -n 100 -s 64" "write-lat --iters 100 --size 64" perf
    add_run write-lat-faults guest-server "$p -n 300 -s 1500" \
        "write-lat --iters 300 --size 1500 --drop 0.01 --corrupt-frame 7" perf
}

runs_ib_read_lat() {
    local p="ib_read_lat -d rxe0 -x @GID@ -F"
    add_run read-lat-guest-client guest-client "$p -n 100 @HOST@" "read-lat --iters 100" perf
    add_run read-lat guest-server "$p -n 100 -s 3000" "read-lat --iters 100 --size 3000" perf
    add_run read-lat-faults guest-server "$p -n 300 -s 2048" \
        "read-lat --iters 300 --size 2048 --drop 0.01 --corrupt-frame 3" perf
}

runs_ib_atomic_lat() {
    local p="ib_atomic_lat -d rxe0 -x @GID@ -F"
    add_run atomic-lat-guest-client guest-client "$p -n 100 @HOST@" "atomic-lat --iters 100" perf
    add_run atomic-lat-faults guest-server "$p -n 300" \
        "atomic-lat --iters 300 --drop 0.01 --corrupt-frame 4" perf
}

runs_ib_send_bw() {
    local p="ib_send_bw -d rxe0 -x @GID@ -F"
    add_run send-bw-guest-client guest-client "$p -n 100 -s 4096 @HOST@" \
        "send-bw --iters 100 --size 4096" perf
    add_run send-bw guest-server "$p -n 100 -s 3000" "send-bw --iters 100 --size 3000" perf
    add_run send-bw-guest-client-faults guest-client "$p -n 300 -s 1024 @HOST@" \
        "send-bw --iters 300 --size 1024 --drop 0.01 --corrupt-frame 8" perf
}

runs_ib_write_bw() {
    local p="ib_write_bw -d rxe0 -x @GID@ -F"
    add_run write-bw-guest-client guest-client "$p -n 50 @HOST@" "write-bw --iters 50" perf
    add_run write-bw-faults guest-server "$p -n 200 -s 4096" \
        "write-bw --iters 200 --size 4096 --drop 0.01 --corrupt-frame 9" perf
}

runs_ib_read_bw() {
    local p="ib_read_bw -d rxe0 -x @GID@ -F"
    add_run read-bw-guest-client-faults guest-client "$p -n 200 -s 4096 @HOST@" \
        "read-bw --iters 200 --size 4096 --drop 0.01 --corrupt-frame 6" perf
    add_run read-bw guest-server "$p -n 100 -s 8192" "read-bw --iters 100 --size 8192" perf
}

runs_rc_pingpong
runs_ud_pingpong
runs_srq_pingpong
runs_ib_write_lat
runs_ib_read_lat
runs_ib_atomic_lat
runs_ib_send_bw
runs_ib_write_bw
runs_ib_read_bw

# --- 1. Host packages ------------------------------------------------------------------------
guest_apt_install cpio tshark qemu-system-x86
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing"
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
for r in "${RUNS[@]}"; do
    IFS='|' read -r name _ gcmd _ <<<"$r"
    echo "$name ${gcmd//@HOST@/198.19.0.4}" >>"$ROOT/tests"
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
: >"$RELAY_LOG"
PYTHON=$(command -v python3) || die "python3 is missing (tests/rxe-qemu/relay.py)"
timeout "$BOOT_TIMEOUT" qemu-system-x86_64 -accel tcg -m 512M -smp 1 -nodefaults -display none \
    -no-reboot -monitor none -serial "file:$CONSOLE" \
    -netdev "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$GUEST_UDP,remote.type=inet,remote.host=127.0.0.1,remote.port=$MODEL_UDP" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,romfile= \
    -netdev "user,id=n1,net=198.19.0.0/24,host=198.19.0.2,dns=198.19.0.3,restrict=on,hostfwd=tcp:127.0.0.1:$EXCHANGE-198.19.0.15:18515,guestfwd=tcp:198.19.0.4:18515-cmd:$PYTHON $HERE/relay.py $REVERSE $RELAY_LOG" \
    -device virtio-net-pci,netdev=n1,mac=52:54:00:00:01:01,romfile= \
    -kernel "$VMLINUZ" -initrd "$INITRD" -append "$GUEST_APPEND" \
    </dev/null >"$QEMU_ERR" 2>&1 &
QEMU_PID=$!
PEER_PID=
trap 'kill "$QEMU_PID" $PEER_PID 2>/dev/null || true' EXIT

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
for r in "${RUNS[@]}"; do
    IFS='|' read -r name role _ hopts tool <<<"$r"
    left=$(awk -v a="$T_BOOT" -v b="$(now)" -v t="$BOOT_TIMEOUT" 'BEGIN { l = t - (b - a); print (l > 5 ? int(l) : 5) }')
    case $role in
    guest-server) side=(--connect "127.0.0.1:$EXCHANGE") ;;
    guest-client) side=(--listen "127.0.0.1:$REVERSE") ;;
    *) die "run $name: unknown role $role" ;;
    esac
    # shellcheck disable=SC2086
    "$MLX5" --seed 7 "$tool" "${side[@]}" --udp-local "127.0.0.1:$MODEL_UDP" \
        --udp-remote "127.0.0.1:$GUEST_UDP" --timeout "$left" --pcap "$OUT/$name.pcap" $hopts \
        >"$OUT/$name.host.txt" 2>&1 &
    PEER_PID=$!
    wait_peer "$PEER_PID" "$name"
    PEER_PID=
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
problems=$(guest_boot_problems "$END_MARKER")
if [ -n "$problems" ]; then
    say "guest: $problems"
    guest_dump_failure 40
    fails=$((fails + 1))
fi
for r in "${RUNS[@]}"; do
    IFS='|' read -r name role gcmd hopts tool <<<"$r"
    gcmd=${gcmd//@HOST@/198.19.0.4}
    grc=$(sed -n "s/^WI-END $name rc=\([0-9]*\).*/\1/p" "$CONSOLE.txt" | head -n1)
    # The programs' -c check prints this and still exits 0.
    invalid=$(sed -n "/^WI-BEGIN $name:/,/^WI-END $name /p" "$CONSOLE.txt" | grep -c 'invalid data' || true)
    if [ "${HOST_RC[$name]}" = 0 ] && [ "$grc" = 0 ] && [ "$invalid" = 0 ]; then
        echo "rxe-qemu: PASS $name  ($role; guest: $gcmd; host: mlx5 $tool $hopts)"
    else
        echo "rxe-qemu: FAIL $name  ($role; guest exit ${grc:-none}, host exit ${HOST_RC[$name]}, $invalid 'invalid data' lines)"
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
# One pass per capture: a line per frame with its BTH opcode (empty when not RoCE), its
# malformed marks and its expert severities (8388608 is Wireshark's PI_ERROR).
for c in "${caps[@]}"; do
    "${TSHARK[@]}" -r "$c" -T fields -e infiniband.bth.opcode -e _ws.malformed \
        -e _ws.expert.severity >"$c.fields" 2>/dev/null || : >"$c.fields"
    total=$(wc -l <"$c.fields")
    roce=$(awk -F'\t' '$1 != ""' "$c.fields" | wc -l)
    bad=$(awk -F'\t' '$2 != "" || $3 ~ /8388608/' "$c.fields" | wc -l)
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
