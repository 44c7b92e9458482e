#!/usr/bin/env python3
"""Instruction budgets of the hot paths, counted with valgrind's callgrind.

Runs the instruction-count probes (bench/examples/profile_*), each probe
function `#[inline(never)]`, under callgrind, divides each probe's inclusive
instruction count by the operations it performed (the probe prints the count)
and compares the result with its budget: the instructions rdma-core's libmlx5
spends on the same operation (docs/perf.md, "Budgets"). Exits 1 when a path
is over its budget, 2 when a probe could not be measured.

    cargo build --release -p mlx5-bench --examples
    python3 bench/budget.py [--bin-dir target/release/examples] [--only NAME]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

# (path, probe binary, arguments, probed function, budget in instructions
# per operation). Every probe of one run of a binary is read from that run.
# The divisor is the operation count the probe prints ("N requests", "N calls").
PROBES = [
    ("poll_cq empty", "profile_poll", [], "facade_empty", 90),
    ("poll_cq receive, batch 1", "profile_poll", [], "facade_one", 258),
    ("poll_cq receive, per CQE at 16", "profile_poll", [], "facade_b16", 182),
    ("extended CQ loop, batch 1", "profile_poll", [], "lazy_one", 258),
    ("extended CQ loop, per CQE at 16", "profile_poll", [], "lazy_b16", 182),
    ("send-CQ poll, batch 1", "profile_facade_send", ["sge1", "1"], "facade_poll", 179),
    ("send-CQ poll, per CQE at 16", "profile_facade_send", ["sge1", "16"], "facade_poll", 100),
    ("post_send 1 SGE, 1 per call", "profile_facade_send", ["sge1", "1"], "facade_post", 267),
    ("post_send 1 SGE, 16 per call", "profile_facade_send", ["sge1", "16"], "facade_post", 167),
    ("post_send 4 SGEs, 1 per call", "profile_facade_send", ["sge4", "1"], "facade_post", 357),
    ("post_send 4 SGEs, 16 per call", "profile_facade_send", ["sge4", "16"], "facade_post", 257),
    ("post_send 64 B inline, 1 per call", "profile_facade_send", ["inline64", "1"], "facade_post", 352),
    ("post_send 64 B inline, 16 per call", "profile_facade_send", ["inline64", "16"], "facade_post", 200),
    ("post_srq_recv 1 SGE, 1 per call", "profile_facade_post", ["1", "1"], "facade_post", 137),
    ("post_srq_recv 1 SGE, 16 per call", "profile_facade_post", ["1", "16"], "facade_post", 82),
    ("post_srq_recv 4 SGEs, 1 per call", "profile_facade_post", ["4", "1"], "facade_post", 180),
    ("post_srq_recv 4 SGEs, 16 per call", "profile_facade_post", ["4", "16"], "facade_post", 125),
]


def inclusive_counts(out_file):
    """Inclusive instructions per function name (the part after `::`)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out_file],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counts = {}
    # "  1,978,835 ( 5.22%)  bench/examples/x.rs:x::facade_one [/path/x]"
    for m in re.finditer(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*::(\w+) \[", text, re.M):
        name = m.group(2)
        counts[name] = max(counts.get(name, 0), int(m.group(1).replace(",", "")))
    return counts


def run(bin_dir, binary, args, tmp):
    out = os.path.join(tmp, "cg-%s-%s.out" % (binary, "-".join(args) or "default"))
    p = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=" + out,
            os.path.join(bin_dir, binary),
        ]
        + args,
        check=True,
        capture_output=True,
        text=True,
    )
    ops = re.search(r"(\d+) (?:requests|calls|completions)", p.stdout)
    if not ops:
        raise RuntimeError("%s %s printed no operation count" % (binary, args))
    return int(ops.group(1)), inclusive_counts(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default="target/release/examples")
    ap.add_argument("--only", help="only the paths whose name contains this")
    a = ap.parse_args()
    runs = {}
    over = missing = 0
    print("%-38s %9s %7s" % ("path", "instr/op", "budget"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, binary, args, func, budget in PROBES:
            if a.only and a.only not in name:
                continue
            key = (binary, tuple(args))
            if key not in runs:
                runs[key] = run(a.bin_dir, binary, args, tmp)
            ops, counts = runs[key]
            if func not in counts:
                print("%-38s %9s %7d  NOT MEASURED (no %s in %s)" % (name, "-", budget, func, binary))
                missing += 1
                continue
            per = counts[func] / ops
            verdict = "ok" if per <= budget else "OVER BUDGET"
            over += per > budget
            print("%-38s %9.1f %7d  %s" % (name, per, budget, verdict))
    if missing:
        print("%d path(s) not measured" % missing)
        return 2
    if over:
        print("%d path(s) over budget" % over)
        return 1
    print("every path within its budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
