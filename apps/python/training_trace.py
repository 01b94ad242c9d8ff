#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Records the allocations and frees of bench.py's training loop (the MLP
1024-4096-4096-1024 with AdamW, batches cycling through 256, 512, 128, 1024
and 384) as a logging_adaptor log, for `replay` and for
`cudapmr_memory_bench --trace`, which replays it over every allocator.

On a GPU (`--device cuda`) PyTorch's memory history records what the loop
asked its allocator for, on which stream. Without one (`--device cpu`, the
default) PyTorch's profiler records the CPU allocator's blocks while the same
model and optimizer (its foreach path, as on a GPU) run on the CPU: an
approximation of the GPU's sequence, with the scalars a GPU run keeps on the
host among them and no cuBLAS workspace.

    python3 apps/python/training_trace.py [--steps 15] [--device cpu|cuda] [--out training_trace.csv]
"""

import argparse
import json
import os
import sys
import tempfile

CSV_HEADER = "sequence,time_ns,thread,action,pointer,bytes,alignment,stream,kind"
BATCHES = [256, 512, 128, 1024, 384]
CPU_DEVICE_TYPE = 0  # the profiler's "Device Type" of a CPU allocator's memory event


def record(steps, device):
    """The loop's memory events in order, as (time_ns, address, bytes, stream)
    with negative bytes for a free; the parameters, made before recording, first."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                                torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(device)
    # foreach=True: the path PyTorch takes on a GPU by default, also on the CPU.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step(batch):
        x = torch.randn(batch, 1024, device=device)
        y = torch.randn(batch, 1024, device=device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def run():
        for i in range(steps):
            step(BATCHES[i % len(BATCHES)])

    parameters = [(0, 0x1000 * (index + 1), parameter.nbytes, 0)  # fake addresses, below any real one
                  for index, parameter in enumerate(model.parameters())]
    events = on_gpu(torch, run) if device == "cuda" else on_cpu(torch, run)
    if not events:
        raise SystemExit(f"training_trace: nothing was recorded on {device}")
    start = events[0][0]
    return parameters + [(time_ns - start, address, size, stream) for time_ns, address, size, stream in events]


def on_gpu(torch, run):
    """What `run` asked the CUDA allocator for and gave back (its memory
    history: requested sizes, streams), in order."""
    torch.cuda.memory._record_memory_history(max_entries=1 << 20)
    try:
        run()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    signs = {"alloc": 1, "free_requested": -1}  # a free in program order; free_completed follows its stream
    return [(int(entry.get("time_us", 0) * 1000), entry["addr"], signs[entry["action"]] * entry["size"],
             entry["stream"])
            for entry in snapshot["device_traces"][torch.cuda.current_device()] if entry["action"] in signs]


def on_cpu(torch, run):
    """The CPU allocator's blocks that `run` took and gave back (PyTorch's
    profiler), in order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        profiler.export_chrome_trace(path)
        with open(path) as file:
            trace = json.load(file)
    memory = sorted((event for event in trace["traceEvents"]
                     if event.get("name") == "[memory]" and event["args"].get("Device Type") == CPU_DEVICE_TYPE),
                    key=lambda event: event["ts"])
    return [(int(event["ts"] * 1000), event["args"]["Addr"], event["args"]["Bytes"], 0) for event in memory]


def write_log(events, out):
    """Writes the events as a logging_adaptor log on one thread; frees of
    blocks allocated before recording began, and empty events, are left out."""
    live = set()
    lines = [CSV_HEADER]
    for time_ns, address, size, stream in events:
        if size > 0:
            live.add(address)
            action = "allocate"
        elif size < 0 and address in live:
            live.discard(address)
            action, size = "deallocate", -size
        else:
            continue
        lines.append(f"{len(lines) - 1},{time_ns},0,{action},{address:#x},{size},256,{stream:#x},device")
    with open(out, "w") as file:
        file.write("\n".join(lines) + "\n")
    return len(lines) - 1, len(live)


def main():
    parser = argparse.ArgumentParser(description="bench.py's training loop as a logging_adaptor log")
    parser.add_argument("--steps", type=int, default=15, help="training steps recorded (default 15)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", default="training_trace.csv")
    arguments = parser.parse_args()
    if arguments.steps < 1:
        parser.error(f"--steps must be at least 1, not {arguments.steps}")
    written, outstanding = write_log(record(arguments.steps, arguments.device), arguments.out)
    print(f"training_trace: {written} events of {arguments.steps} steps on {arguments.device} in {arguments.out} "
          f"({outstanding} blocks still allocated at the end: parameters, gradients, optimizer state)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
