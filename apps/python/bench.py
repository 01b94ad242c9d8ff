#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Allocation from Python, in one process: allocate + free pairs (256 B, 1 MiB
and a random mix of sizes) through cudapmr's resources, CuPy's pool,
cuda.core's DeviceMemoryResource and torch.empty, as a markdown table of
median nanoseconds per pair; then a small PyTorch training loop on PyTorch's
own allocator and on cudapmr through the pluggable allocator (step time, and
peak memory: the device memory in use, one measure for both, and each
allocator's own count of what it reserved), each in a fresh process. A peer
that is missing or cannot run is left out with a note.

    python3 apps/python/bench.py [--pairs N] [--repeats R] [--skip-training]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import cudapmr

MIB = 1 << 20
SIZES = {"256 B": [256], "1 MiB": [MIB]}


def mixed_sizes(count=1024, seed=7):
    """Sizes from 64 B to 4 MiB, log-uniform, fixed by the seed."""
    generator = random.Random(seed)
    return [int(2 ** generator.uniform(6, 22)) // 8 * 8 or 8 for _ in range(count)]


SIZES["random mix"] = mixed_sizes()


def time_pairs(pair, sizes, pairs, repeats):
    """Median over `repeats` runs of the nanoseconds per call of `pair(size)`."""
    cycle = [sizes[i % len(sizes)] for i in range(pairs)]
    for size in cycle[: min(len(cycle), 256)]:  # warm up
        pair(size)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for size in cycle:
            pair(size)
        samples.append((time.perf_counter_ns() - start) / pairs)
    return statistics.median(samples)


def cudapmr_peers(stream_handle):
    """(name, pair function) for cudapmr's resources, on one stream."""
    peers = []
    device = cudapmr.DeviceMemoryResource(0)
    cache = cudapmr.CachingResource(device)
    cache_unchecked = cudapmr.CachingResource(device, check_capture=False)
    malloc_cache = cudapmr.CachingResource(cudapmr.DeviceMallocResource(0))
    for name, resource in [("cudapmr CachingResource(DeviceMemoryResource)", cache),
                           ("cudapmr CachingResource(check_capture=False)", cache_unchecked),
                           ("cudapmr CachingResource(DeviceMallocResource)", malloc_cache),
                           ("cudapmr DeviceMemoryResource (CUDA pool)", device)]:
        allocate, deallocate = resource.allocate_raw, resource.deallocate_raw

        def pair(size, allocate=allocate, deallocate=deallocate):
            deallocate(allocate(size, stream_handle), size, stream_handle)

        peers.append((name, pair, resource))

    def buffer_pair(size, resource=cache):
        resource.allocate(size, stream=stream_handle).close()

    peers.append(("cudapmr CachingResource via Buffer", buffer_pair, cache))
    return peers


def cupy_peers():
    try:
        import cupy
    except ImportError as missing:
        print(f"note: CuPy left out ({missing})")
        return []
    pool = cupy.cuda.MemoryPool()
    malloc = pool.malloc

    def pair(size):
        malloc(size)  # the MemoryPointer dies at once: its memory goes back to the pool

    return [("CuPy MemoryPool", pair, pool)]


def cuda_core_peers():
    try:
        try:
            from cuda.core import Device, DeviceMemoryResource
        except ImportError:
            from cuda.core.experimental import Device, DeviceMemoryResource
    except ImportError as missing:
        print(f"note: cuda.core left out ({missing})")
        return []
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    resource = DeviceMemoryResource(0)

    def pair(size):
        resource.allocate(size, stream=stream).close(stream)

    peers = [("cuda.core DeviceMemoryResource", pair, (stream, resource))]
    from cudapmr.cuda_core import MemoryResource

    plugged = MemoryResource(cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)))

    def plugged_pair(size):
        plugged.allocate(size, stream=stream).close(stream)

    peers.append(("cuda.core MemoryResource over cudapmr CachingResource", plugged_pair, (stream, plugged)))
    return peers


def torch_peers():
    try:
        import torch
    except ImportError as missing:
        print(f"note: PyTorch left out ({missing})")
        return []
    if not torch.cuda.is_available():
        print("note: PyTorch left out (no CUDA in this build of torch)")
        return []
    empty, uint8 = torch.empty, torch.uint8

    def pair(size):
        empty(size, dtype=uint8, device="cuda")

    return [("torch.empty (caching allocator)", pair, None)]


def peers_of(make, *arguments):
    """The peers `make` sets up; none, with a note, where setting them up fails."""
    try:
        return make(*arguments)
    except Exception as failure:  # a library that is there but cannot run is a note, not the end
        print(f"note: {make.__name__} left out: {type(failure).__name__}: {failure}")
        return []


def allocation_table(pairs, repeats):
    stream = cudapmr.Stream(0)
    peers = cudapmr_peers(stream.handle)
    for make in (cupy_peers, cuda_core_peers, torch_peers):
        peers += peers_of(make)
    rows = []
    for name, pair, _keep in peers:
        try:
            rows.append((name, [time_pairs(pair, sizes, pairs, repeats) for sizes in SIZES.values()]))
        except Exception as failure:  # a peer that fails is reported, not fatal
            print(f"note: {name} failed: {type(failure).__name__}: {failure}")
    stream.synchronize()
    print(f"\nAllocate + free pairs from Python, median ns per pair ({pairs} pairs x {repeats} runs):\n")
    print("| resource | " + " | ".join(SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name, medians in rows:
        print(f"| {name} | " + " | ".join(f"{value:,.0f}" for value in medians) + " |")


TRAINING = r"""
import json, sys, time, torch
mode, steps = sys.argv[1], int(sys.argv[2])
if mode == "cudapmr":
    import cudapmr, cudapmr.torch
    pool = cudapmr.DeviceMemoryResource(0)
    cache = cudapmr.CachingResource(pool)
    torch.cuda.memory.change_current_allocator(cudapmr.torch.allocator(cache))
free, total = torch.cuda.mem_get_info(0)  # initializes CUDA (after the allocator is chosen)
baseline = device_peak = total - free
def sample():
    global device_peak
    free, total = torch.cuda.mem_get_info(0)
    device_peak = max(device_peak, total - free)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step(batch):
    x = torch.randn(batch, 1024, device="cuda"); y = torch.randn(batch, 1024, device="cuda")
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True); loss.backward(); optimizer.step()
batches = [256, 512, 128, 1024, 384]
for i in range(20):
    step(batches[i % len(batches)]); torch.cuda.synchronize(); sample()
times = []
for i in range(steps):
    start = time.perf_counter(); step(batches[i % len(batches)]); torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
    sample()
times.sort()
if mode == "cudapmr":
    reserved, source = pool.statistics().reserved_high, "CUDA pool reserved_high"
else:
    reserved, source = torch.cuda.max_memory_reserved(), "torch.cuda.max_memory_reserved"
print(json.dumps({"median_ms": times[len(times) // 2] * 1e3, "device_peak": device_peak - baseline,
                  "reserved_peak": reserved, "reserved_source": source}))
"""


def training_table(steps):
    """Prints the training loop's table; False where a run failed."""
    try:
        import torch  # noqa: F401
    except ImportError as missing:
        print(f"\nnote: the training loop is left out ({missing})")
        return True
    print(f"\nPyTorch training loop (MLP 1024-4096-4096-1024, AdamW, varying batch), {steps} steps, "
          "fresh process each.")
    print("Peak device memory is the same measure for both: the most device memory in use (cudaMemGetInfo,")
    print("sampled after every step; neither allocator hands memory back during the run) above what was in use")
    print("once CUDA was initialized. Peak reserved is each allocator's own count of what it took from CUDA.\n")
    print("| allocator | median step (ms) | peak device memory (MiB) | peak reserved (MiB) | reserved as counted by |")
    print("|---|---:|---:|---:|---|")
    results = {}
    for mode in ("torch", "cudapmr"):
        run = subprocess.run([sys.executable, "-c", TRAINING, mode, str(steps)], capture_output=True, text=True,
                             env=dict(os.environ))
        lines = run.stdout.strip().splitlines()
        if run.returncode != 0 or not lines:
            why = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
            print(f"| {mode} | failed | | | {why} |")
            continue
        result = json.loads(lines[-1])
        results[mode] = result
        print(f"| {'PyTorch caching allocator' if mode == 'torch' else 'cudapmr CachingResource (pluggable)'} | "
              f"{result['median_ms']:.3f} | {result['device_peak'] / MIB:,.1f} | "
              f"{result['reserved_peak'] / MIB:,.1f} | {result['reserved_source']} |")
    if len(results) == 2:
        cudapmr_run, torch_run = results["cudapmr"], results["torch"]
        print(f"\ncudapmr / PyTorch: step time {cudapmr_run['median_ms'] / torch_run['median_ms']:.3f}, "
              f"peak device memory {cudapmr_run['device_peak'] / max(torch_run['device_peak'], 1):.3f}, "
              f"peak reserved {cudapmr_run['reserved_peak'] / max(torch_run['reserved_peak'], 1):.3f}")
    return len(results) == 2


def main():
    parser = argparse.ArgumentParser(description="cudapmr allocation from Python against its peers")
    parser.add_argument("--pairs", type=int, default=20000, help="pairs per run (default 20000)")
    parser.add_argument("--repeats", type=int, default=7, help="runs per cell; the median is shown (default 7)")
    parser.add_argument("--steps", type=int, default=200, help="training steps timed (default 200)")
    parser.add_argument("--skip-training", action="store_true")
    arguments = parser.parse_args()
    if cudapmr.device_count() == 0:
        print("cannot run: no CUDA device was found", file=sys.stderr)
        return 2
    print(f"Device: {cudapmr.device_name(0)}; cudapmr {cudapmr.__version__}; Python {sys.version.split()[0]}")
    allocation_table(arguments.pairs, arguments.repeats)
    if not arguments.skip_training and not training_table(arguments.steps):
        return 1  # the tables are printed; a training run that failed fails the benchmark
    return 0


if __name__ == "__main__":
    sys.exit(main())
