#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws allocation latency by allocator and size from cudapmr_bench's JSON.

usage: plot_latency.py BENCH_JSON OUTPUT_PNG

Reads the alloc/<kind>/<workload>/<entrant> benchmarks (ns per pair, or per
operation for the mix) and draws one panel per memory kind, log scale.
"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WORKLOADS = ["256B", "64KiB", "1MiB", "mix"]
KINDS = ["device", "pinned", "managed"]


def load(path):
    with open(path) as handle:
        report = json.load(handle)
    latency = defaultdict(dict)  # (kind, entrant) -> workload -> ns
    for run in report["benchmarks"]:
        if run.get("run_type") != "iteration" or run.get("threads", 1) != 1:
            continue
        parts = run.get("run_name", run["name"]).split("/")
        if len(parts) < 4 or parts[0] != "alloc" or parts[2] not in WORKLOADS:
            continue
        kind, workload, entrant = parts[1], parts[2], parts[3]
        items = run.get("items_per_second")
        if items:
            latency[(kind, entrant)][workload] = 1e9 / items
    return latency


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    latency = load(sys.argv[1])
    figure, axes = plt.subplots(1, len(KINDS), figsize=(17, 5.5), sharey=True)
    for axis, kind in zip(axes, KINDS):
        entrants = sorted(e for (k, e) in latency if k == kind)
        width = 0.8 / max(len(entrants), 1)
        for index, entrant in enumerate(entrants):
            values = [latency[(kind, entrant)].get(w, float("nan")) for w in WORKLOADS]
            positions = [w + index * width for w in range(len(WORKLOADS))]
            hatch = None if entrant.startswith("cudapmr:") else "//"
            axis.bar(positions, values, width, label=entrant.split(":", 1)[1], hatch=hatch)
        axis.set_yscale("log")
        axis.set_xticks([w + 0.4 - width / 2 for w in range(len(WORKLOADS))])
        axis.set_xticklabels(["256 B pair", "64 KiB pair", "1 MiB pair", "mix, per op"])
        axis.set_title(f"{kind} memory")
        axis.grid(axis="y", which="both", alpha=0.3)
        axis.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("ns (log scale; hatched = peers)")
    figure.suptitle("Allocation latency on an NVIDIA H200, one thread, one stream")
    figure.tight_layout()
    figure.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
