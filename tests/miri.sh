#!/usr/bin/env bash
# Miri: run the unsafe-bearing crates' tests and a subset of the
# driver-against-model tests under Miri to catch undefined behaviour in the
# volatile DMA accesses, MMIO and barriers.
#
#   tests/miri.sh          full run (see docs/reliability.md for the time)
#   tests/miri.sh --quick  the .ci/run subset: mlx5-hal, mlx5-regs,
#                          mlx5-bare-metal, mlx5-driver --lib (no model)
#
# Installs the nightly toolchain and the miri component itself. If Miri
# cannot be installed it says so and exits non-zero: it never "passes"
# without running.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[ "${1:-}" = "--quick" ] && quick=1

fail() {
    printf '\n**** MIRI NOT RUN: %s ****\n\n' "$*" >&2
    exit 2
}

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
command -v rustup >/dev/null 2>&1 || fail "rustup is not installed"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal || fail "cannot install the nightly toolchain"
fi
rustup +nightly component add miri rust-src || fail "cannot install the miri component"
cargo +nightly miri --version >/dev/null 2>&1 || fail "cargo miri does not run"
cargo +nightly miri setup || fail "cargo miri setup failed"

# The model translates IOVAs with integer-to-pointer casts (permissive
# provenance); tests read the clock and spawn no processes (isolation off
# for std::time in the model's threaded mode code paths).
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-permissive-provenance}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"

start=$(date +%s)
step() { printf '\n==== miri: %s (%ss so far)\n' "$*" "$(( $(date +%s) - start ))"; }

step "mlx5-hal (host platform, DMA regions, windows)"
cargo +nightly miri test -p mlx5-hal --features host
step "mlx5-regs (field accessors; the crate forbids unsafe: the exhaustive sweeps are left out)"
cargo +nightly miri test -p mlx5-regs --lib
cargo +nightly miri test -p mlx5-regs --test integration accessors:: -- --skip every_width_at_every_position
step "mlx5-bare-metal (identity-mapped Hal; time_advances reads the TSC, which Miri cannot run)"
# Its tests leak their fake BARs on purpose ('static, as a real mapping).
MIRIFLAGS="$MIRIFLAGS -Zmiri-ignore-leaks" cargo +nightly miri test -p mlx5-bare-metal -- --skip time_advances
step "mlx5-driver --lib (rings, pages, command queue on HostHal)"
cargo +nightly miri test -p mlx5-driver --lib

if [ "$quick" = 0 ]; then
    step "fuzz seed corpora on HostHal and the model (tests/tests/fuzz_props.rs)"
    cargo +nightly miri test -p mlx5-tests --test integration -- --exact fuzz_props::seed_corpora_replay_cleanly
    # Driver against the synchronous model: one CQ and one SRQ scenario
    # (a bring-up under Miri costs minutes; threaded-mode tests are left out).
    step "driver against the model: CQ arm/events, SRQ out-of-order free list"
    cargo +nightly miri test -p mlx5-tests --test integration -- --exact cq::each_arm_gives_exactly_one_completion_event &
    cq=$!
    cargo +nightly miri test -p mlx5-tests --test integration -- --exact srq::completed_wqes_return_to_the_free_list_even_out_of_order &
    srq=$!
    wait "$cq"
    wait "$srq"
    step "driver against a hostile model: byte count beyond the buffer"
    cargo +nightly miri test -p mlx5-tests --test integration -- --exact hostile::cqe_with_byte_count_beyond_the_posted_buffer_fails_that_request
fi

printf '\n==== miri: all passed in %ss\n' "$(( $(date +%s) - start ))"
