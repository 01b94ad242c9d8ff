#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares the peaks in cudapmr's snapshots with the statistics a program
printed. Called by memviz.sh:

  memviz_check.py demo LOG PICKLE JSON    the demo's --report log
  memviz_check.py replay LOG PICKLE JSON  replay's log ("peak: N bytes")

Prints one line per comparison and exits 1 when a peak differs."""
import json
import pickle
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "exports"))
from pytorch_snapshot import trace_peak  # noqa: E402


def demo_peaks(log):
    """(name, peak bytes) of each resource in the demo's --report, in its order."""
    peaks, name = [], None
    for line in log.splitlines():
        if line.startswith("  [") and not line.startswith("   "):
            name = line.strip()
        match = re.match(r"^    peak bytes: (\d+)", line)
        if match and name is not None:
            peaks.append((name, int(match.group(1))))
    return peaks


def main():
    program, log_path, pickle_path, json_path = sys.argv[1:5]
    log = open(log_path).read()
    snapshot = pickle.load(open(pickle_path, "rb"))
    stacks = json.load(open(json_path))["stacks"]
    device_peak, _ = trace_peak(snapshot["device_traces"][0])
    failed = False

    def compare(what, ours, theirs):
        nonlocal failed
        same = ours == theirs
        failed |= not same
        print(f"{'same' if same else 'DIFFERENT'}: {what}: snapshot {ours} bytes, statistics {theirs} bytes")

    if program == "demo":
        printed = demo_peaks(log)
        if len(printed) != len(stacks):
            print(f"DIFFERENT: {len(printed)} resources printed, {len(stacks)} stacks in the JSON")
            return 1
        for (name, peak), stack in zip(printed, stacks):
            compare(f"JSON {name}", stack["peak_live_bytes"], peak)
        # The demo's device resources hold memory one section after another:
        # device 0's trace peaks at the larger of their peaks.
        device = [peak for name, peak in printed if re.match(r"^\[\d\] device", name)]
        compare("pickle device 0 (the device resources' sections)", device_peak, max(device))
    else:
        match = re.search(r"^peak: (\d+) bytes", log, re.MULTILINE)
        if not match:
            print("DIFFERENT: replay printed no peak")
            return 1
        compare("JSON replay", stacks[0]["peak_live_bytes"], int(match.group(1)))
        compare("pickle device 0 (replay)", device_peak, int(match.group(1)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
