#!/usr/bin/env bash
# cargo-fuzz targets under libFuzzer, each for a bounded time (default 20 s;
# MLX5_FUZZ_SECONDS=N), starting from its seed corpus in fuzz/corpus/<target>/.
# With no arguments: the CLI's targets (cli_hexdump, cli_script, cli_trace,
# cli_fields; harnesses in cli/src/fuzz.rs). With arguments: those targets,
# e.g. `MLX5_FUZZ_SECONDS=5 tests/fuzz-cli.sh send_cqes wire_frames` (the send
# side and the wire; harnesses in tests/src/fuzz_send.rs). New inputs go to a
# scratch directory, not into the repository. A crash, a leak or a timeout
# fails the run with the input libFuzzer saved (fuzz/artifacts/<target>/).
#
# Installs the nightly toolchain and cargo-fuzz itself. If either cannot be
# installed it says so and exits non-zero: it never "passes" without
# running.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${MLX5_FUZZ_SECONDS:-20}"
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=(cli_hexdump cli_script cli_trace cli_fields)
fi

fail() {
    printf '\n**** FUZZING NOT RUN: %s ****\n\n' "$*" >&2
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
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo +nightly install cargo-fuzz --locked || fail "cannot install cargo-fuzz"
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd fuzz
for t in "${targets[@]}"; do
    [ -d "corpus/$t" ] || fail "no seed corpus fuzz/corpus/$t (unknown target?)"
    echo "== $t: ${seconds} s"
    mkdir -p "$scratch/$t"
    # -timeout: one input may take at most 10 s (a hang is a failure);
    # -rss_limit_mb: an input may not make the tool allocate past 2 GiB.
    cargo +nightly fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        || { echo "**** $t FAILED (input in fuzz/artifacts/$t/) ****" >&2; exit 1; }
done
echo "fuzz targets ${targets[*]}: no crash in ${seconds} s each"
