#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Records the allocations and frees of bench.py's training loop (the MLP
1024-4096-4096-1024 with AdamW, batches cycling through 256, 512, 128, 1024
and 384) as a logging_adaptor log, for `replay` and for
`cudapmr_memory_bench --trace`, which replays it over every allocator.

PyTorch's profiler records each block its allocator hands out and takes
back. On a machine without a GPU the loop runs on the CPU (`--device cpu`,
the default); the model, the optimizer's foreach path and the order of the
tensors are those of the GPU loop, which `--device cuda` records directly.

    python3 apps/python/training_trace.py [--steps 15] [--device cpu|cuda] [--out training_trace.csv]
"""

import argparse
import json
import os
import sys
import tempfile

CSV_HEADER = "sequence,time_ns,thread,action,pointer,bytes,alignment,stream,kind"
BATCHES = [256, 512, 128, 1024, 384]
DEVICE_TYPES = {"cpu": 0, "cuda": 1}  # the profiler's "Device Type" of a memory event


def record(steps, device):
    """The loop's memory events in order, as (time_ns, address, bytes) with
    negative bytes for a free; the parameters, made before the profile, first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

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

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, profile_memory=True) as profiler:
        for i in range(steps):
            step(BATCHES[i % len(BATCHES)])
        if device == "cuda":
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        profiler.export_chrome_trace(path)
        with open(path) as file:
            trace = json.load(file)
    memory = sorted((event for event in trace["traceEvents"] if event.get("name") == "[memory]"
                     and event["args"].get("Device Type") == DEVICE_TYPES[device]), key=lambda event: event["ts"])
    if not memory:
        raise SystemExit(f"training_trace: the profiler recorded no {device} memory events")
    start = memory[0]["ts"]
    events = [(0, 0x1000 * (index + 1), parameter.nbytes)
              for index, parameter in enumerate(model.parameters())]  # fake addresses below any real one
    events += [(int((event["ts"] - start) * 1000), event["args"]["Addr"], event["args"]["Bytes"]) for event in memory]
    return events


def write_log(events, out):
    """Writes the events as a logging_adaptor log on one thread and one stream;
    frees of blocks allocated before the profile began are left out."""
    live = set()
    lines = [CSV_HEADER]
    for time_ns, address, size in events:
        if size > 0:
            live.add(address)
            action = "allocate"
        elif address in live:
            live.discard(address)
            action, size = "deallocate", -size
        else:
            continue
        lines.append(f"{len(lines) - 1},{time_ns},0,{action},{address:#x},{size},256,0x0,device")
    with open(out, "w") as file:
        file.write("\n".join(lines) + "\n")
    return len(lines) - 1, len(live)


def main():
    parser = argparse.ArgumentParser(description="bench.py's training loop as a logging_adaptor log")
    parser.add_argument("--steps", type=int, default=15, help="training steps recorded (default 15)")
    parser.add_argument("--device", choices=sorted(DEVICE_TYPES), default="cpu")
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
