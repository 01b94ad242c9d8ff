#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws device memory over time, one line per allocator, from the CSV that
cudapmr_memory_bench writes (--timeline; the 4-stream random mix).

usage: plot_memory.py MEMORY_TIMELINE_CSV OUTPUT_PNG [GPU]

GPU, where given, names the machine in the title (e.g. "H100 80GB HBM3").
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    machine = f" ({sys.argv[3]})" if len(sys.argv) == 4 else ""
    series = defaultdict(lambda: ([], []))
    workload = ""
    with open(sys.argv[1], newline="") as handle:
        for row in csv.DictReader(handle):
            operations, used = series[row["allocator"]]
            operations.append(int(row["operation"]))
            used.append(float(row["device_mib"]) / 1024)
            workload = row["workload"]
    if not series:
        sys.exit(f"{sys.argv[1]}: no samples")
    figure, axes = plt.subplots(figsize=(10, 5.5))
    for name, (operations, used) in sorted(series.items()):
        ours = name.startswith("cudapmr:")
        axes.plot(operations, used, label=name.split(":", 1)[1], linewidth=2.2 if ours else 1.2,
                  linestyle="-" if ours else "--")
    axes.set_yscale("log")
    axes.set_xlabel("operation")
    axes.set_ylabel("device memory in use (GiB, log scale)")
    axes.set_title(f"Device memory over time: {workload}, one run per allocator{machine}")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
