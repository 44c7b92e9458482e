#!/usr/bin/env bash
# Seed sweep: runs every seeded random test of mlx5-tests over N seeds, in release mode, and
# reports each failing seed with the command that replays it.
#
#   tests/sweep.sh N [FILTER]
#
# N       seeds per test: FROM .. FROM+N-1, FROM = $MLX5_SWEEP_FROM (default 1000).
# FILTER  only tests whose "module::test" name contains it (e.g. cq_prop, verbs_random,
#         qp_random, fuzz_props::sim_cmd).
#
# Each test (a "module::test" of the `integration` binary) runs once over the whole range
# (MLX5_PROP_SEED=FROM..END, see tests/src/seeds.rs): a failing seed is reported and the next
# one still runs. A seed running longer than $MLX5_SEED_TIMEOUT seconds (default 60) stops the
# process; the sweep reports it and goes on from the next seed. Logs:
# target/sweep/<module>__<test>.log. Exit status 1 if any seed failed, 2 on a usage error.
# docs/reliability.md §7 has timings; tests/README.md says when to sweep.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
n=$1
filter=${2:-}
case $n in '' | *[!0-9]*) usage ;; esac
[ "$n" -gt 0 ] || usage
from=${MLX5_SWEEP_FROM:-1000}
export MLX5_SEED_TIMEOUT=${MLX5_SEED_TIMEOUT:-60}

# module::test of every seeded test. The opt-in million-operation runs of verbs_random and
# qp_random are left out (a million operations per seed); sweep them by hand with
# MLX5_PROP_SEED if needed.
tests=(
    cq_prop::random_inject_poll_resize_arm_sequences_deliver_every_completion_once_in_order
    verbs_random::random_verbs_sequences_match_the_reference_model
    verbs_random::random_verbs_sequences_with_the_device_on_its_own_thread
    qp_random::random_qp_sequences_match_the_reference
    qp_random::random_qp_sequences_with_the_device_on_its_own_thread
    fuzz_props::cqe_ring
    fuzz_props::srq_ring
    fuzz_props::eqe
    fuzz_props::cmd_output
    fuzz_props::mailbox
    fuzz_props::sim_cmd
    stale_events::a_destroyed_cqs_pending_event_never_reaches_its_successor
    stale_events::a_destroyed_cqs_pending_event_never_reaches_its_successor_threaded
    two_hosts_faults::seeded_wire_faults_below_the_retry_budget_deliver_every_message_once_in_order
)

selected=()
for t in "${tests[@]}"; do
    [[ -z $filter || $t == *"$filter"* ]] && selected+=("$t")
done
if [ ${#selected[@]} -eq 0 ]; then
    echo "sweep: no seeded test matches '$filter'" >&2
    exit 2
fi

echo "sweep: seeds $from..$((from + n - 1)) for ${#selected[@]} test(s), release build"
cargo test --release -p mlx5-tests --test integration --no-run --quiet
mkdir -p target/sweep

fails=()
start_all=$SECONDS
for t in "${selected[@]}"; do
    log=target/sweep/${t%%::*}__${t#*::}.log
    : >"$log"
    first=$from
    end=$((from + n))
    t0=$SECONDS
    while [ "$first" -lt "$end" ]; do
        set +e
        MLX5_PROP_SEED="$first..$end" cargo test --release --quiet -p mlx5-tests --test integration \
            -- --exact "$t" >>"$log" 2>&1
        rc=$?
        set -e
        if [ $rc -eq 124 ]; then
            # A seed hung: the seeds module named it; go on after it.
            hung=$(sed -n 's/^mlx5-seeds: TIMEOUT seed \([0-9]*\).*/\1/p' "$log" | tail -n 1)
            if [ -z "$hung" ]; then
                echo "sweep: $t: status 124 without a TIMEOUT line, see $log" >&2
                fails+=("$t: process stopped, see $log")
                break
            fi
            first=$((hung + 1))
            continue
        fi
        if [ $rc -ne 0 ] && ! grep -q '^mlx5-seeds: FAIL seed' "$log"; then
            # Not a seed failure (build error, crash): the rest of the range did not run.
            fails+=("$t: exit status $rc before the end of $first..$end, see $log")
        fi
        break
    done
    count=0
    while IFS= read -r line; do
        fails+=("$t: ${line#mlx5-seeds: }")
        count=$((count + 1))
    done < <(grep -E '^mlx5-seeds: (FAIL|TIMEOUT) seed' "$log" || true)
    printf 'sweep: %-95s %5d seeds, %4d failed, %4ds\n' "$t" "$n" "$count" $((SECONDS - t0))
done

echo "sweep: done in $((SECONDS - start_all))s"
if [ ${#fails[@]} -ne 0 ]; then
    echo "sweep: ${#fails[@]} failure(s); each line ends with the command that replays it:"
    printf '  %s\n' "${fails[@]}"
    exit 1
fi
echo "sweep: no failure"
