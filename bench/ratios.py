#!/usr/bin/env python3
"""Print driver/raw (and facade/ring, facade/raw) ratios from criterion's results (after `cargo bench -p mlx5-bench`).

Reads <target>/criterion/<group>/<driver|baseline>[/<param>]/new/estimates.json
and prints a markdown table: ns per element (median) for the driver and its
baseline in the same group, and their ratio. The baseline is the first of
`raw`, `plain_copy`, `model` that exists (for the model-backed control-path
benchmarks the "ratio" is driver time over model time, for information; their
targets are absolute).
"""
import json, os, sys

target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "target"))
root = os.path.join(target, "criterion")
if not os.path.isdir(root):
    sys.exit(f"no criterion results under {root}: run `cargo bench -p mlx5-bench` first")

def median_ns_per_elem(path):
    est = json.load(open(os.path.join(path, "new", "estimates.json")))
    bench = json.load(open(os.path.join(path, "new", "benchmark.json")))
    elems = (bench.get("throughput") or {}).get("Elements") or 1
    return est["median"]["point_estimate"] / elems

rows = []
for dirpath, dirnames, filenames in os.walk(root):
    if os.path.basename(dirpath) != "new" or "estimates.json" not in filenames:
        continue
    bench_dir = os.path.dirname(dirpath)
    rel = os.path.relpath(bench_dir, root).split(os.sep)
    # "driver" rows have one baseline; "facade" rows (the verbs facade) are
    # compared with the ring API ("ring"), the ring API with the facade's
    # checks ("checked", where measured) and the raw loop ("raw").
    who = "driver" if "driver" in rel else "facade" if "facade" in rel else None
    if who is None:
        continue
    bases = ("raw", "plain_copy", "model") if who == "driver" else ("ring", "checked", "raw")
    found = False
    for base in bases:
        raw_dir = os.path.join(root, *[base if p == who else p for p in rel])
        if not os.path.isdir(raw_dir):
            continue
        d, r = median_ns_per_elem(bench_dir), median_ns_per_elem(raw_dir)
        name = "/".join(p for p in rel if p != who)
        rows.append((name, base, d, r, d / r if r else float("inf")))
        if who == "driver":
            break

print("| benchmark | driver ns/elem | baseline | baseline ns/elem | ratio |")
print("|---|---|---|---|---|")
for name, base, d, r, q in sorted(rows):
    print(f"| {name} | {d:.2f} | {base} | {r:.2f} | {q:.2f}x |")
