# SPDX-License-Identifier: Apache-2.0
"""How PyTorch's memory viewer reads a snapshot pickle, for the checks that
compare cudapmr's snapshots with its statistics."""


def trace_peak(entries):
    """The peak of the Active Memory Timeline over one device's trace (alloc
    adds, free_completed removes), and what is live at its end."""
    live, current, peak = {}, 0, 0
    for entry in entries:
        if entry["action"] == "alloc":
            live[entry["addr"]] = entry["size"]
            current += entry["size"]
            peak = max(peak, current)
        elif entry["action"] == "free_completed" and entry["addr"] in live:
            current -= live.pop(entry["addr"])
    return peak, current
