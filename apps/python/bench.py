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

    python3 apps/python/bench.py [--pairs N] [--repeats R] [--steps N] [--rounds R] [--skip-training]
                                 [--allocators torch,torch-expandable,cudapmr-stack,...] [--skip-mixed]
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


def time_pairs(pair, sizes, pairs):
    """Nanoseconds per call of `pair(size)` over one run of `pairs` calls."""
    cycle = [sizes[i % len(sizes)] for i in range(pairs)]
    start = time.perf_counter_ns()
    for size in cycle:
        pair(size)
    return (time.perf_counter_ns() - start) / pairs


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
                           ("cudapmr CoalescingResource(DeviceMallocResource)",
                            cudapmr.CoalescingResource(cudapmr.DeviceMallocResource(0))),
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
    # The loop and a call with no allocation: the floor under every row.
    peers = [("(loop and call alone, no allocation)", lambda size: None, None)] + cudapmr_peers(stream.handle)
    for make in (cupy_peers, cuda_core_peers, torch_peers):
        peers += peers_of(make)
    # Rounds interleave the peers, so that whatever drifts in the process (clocks,
    # other libraries' threads) spreads over all of them; the first round warms up.
    samples = {name: [[] for _ in SIZES] for name, _pair, _keep in peers}
    for round_index in range(repeats + 1):
        for name, pair, _keep in list(peers):
            try:
                for column, sizes in enumerate(SIZES.values()):
                    value = time_pairs(pair, sizes, pairs)
                    if round_index > 0:
                        samples[name][column].append(value)
            except Exception as failure:  # a peer that fails is reported, not fatal
                print(f"note: {name} failed: {type(failure).__name__}: {failure}")
                peers.remove((name, pair, _keep))
    rows = [(name, [statistics.median(column) for column in samples[name]]) for name, _pair, _keep in peers]
    stream.synchronize()
    print(f"\nAllocate + free pairs from Python, median ns per pair ({pairs} pairs x {repeats} runs):\n")
    print("| resource | " + " | ".join(SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name, medians in rows:
        print(f"| {name} | " + " | ".join(f"{value:,.0f}" for value in medians) + " |")


TRAINING = r"""
import contextlib, json, sys, time, torch
mode, steps = sys.argv[1], int(sys.argv[2])
on_malloc = mode == "cudapmr-coalescing"
routed = contextlib.nullcontext()
if mode.startswith("cudapmr"):
    import cudapmr, cudapmr.torch
    if mode.startswith("cudapmr-stack"):
        resource = leaf = cudapmr.default_device_stack(0)
    elif on_malloc:
        leaf = cudapmr.DeviceMallocResource(0)
        resource = cudapmr.CoalescingResource(leaf)
    else:
        leaf = cudapmr.DeviceMemoryResource(0)
        resource = cudapmr.CachingResource(leaf)
    allocator = cudapmr.torch.allocator(resource)
    if mode == "cudapmr-stack-mempool":  # PyTorch's allocator in charge, its segments from the stack
        pool = torch.cuda.MemPool(allocator.allocator())
        routed = torch.cuda.use_mem_pool(pool)
    else:
        torch.cuda.memory.change_current_allocator(allocator)
free, total = torch.cuda.mem_get_info(0)  # initializes CUDA (after the allocator is chosen)
baseline = device_peak = total - free
def sample():
    global device_peak
    free, total = torch.cuda.mem_get_info(0)
    device_peak = max(device_peak, total - free)
routed.__enter__()  # the whole run inside the MemPool, where there is one
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
routed.__exit__(None, None, None)
if mode == "cudapmr-stack-mempool":  # PyTorch's count: the backward pass's thread allocates outside the MemPool
    reserved, source = torch.cuda.max_memory_reserved(), "torch.cuda.max_memory_reserved (every pool)"
elif mode.startswith("cudapmr-stack"):
    reserved, source = leaf.state()["peak_reserved_bytes"], "the stack's peak_reserved_bytes"
elif on_malloc:
    reserved, source = leaf.allocated_bytes_high, "DeviceMallocResource allocated_bytes_high"
elif mode.startswith("cudapmr"):
    reserved, source = leaf.statistics().reserved_high, "CUDA pool reserved_high"
else:
    reserved, source = torch.cuda.max_memory_reserved(), "torch.cuda.max_memory_reserved"
print(json.dumps({"median_ms": times[len(times) // 2] * 1e3, "device_peak": device_peak - baseline,
                  "reserved_peak": reserved, "reserved_source": source}))
"""


TRAINING_ALLOCATORS = {
    "torch": "PyTorch caching allocator",
    "torch-expandable": "PyTorch caching allocator, expandable_segments:True",
    "cudapmr-stack": "cudapmr default_device_stack (current allocator)",
    "cudapmr-stack-mempool": "cudapmr default_device_stack under a MemPool",
    "cudapmr-cache": "cudapmr CachingResource over DeviceMemoryResource (current allocator)",
    "cudapmr-coalescing": "cudapmr CoalescingResource over DeviceMallocResource (current allocator)",
}


def allocator_list(text):
    """--allocators: names of TRAINING_ALLOCATORS, comma-separated."""
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in TRAINING_ALLOCATORS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'none named'}; "
            f"choose from {', '.join(TRAINING_ALLOCATORS)}")
    return chosen


def training_table(steps, rounds, modes=tuple(TRAINING_ALLOCATORS)):
    """Prints the training loop's table for `modes`; False where a run failed."""
    try:
        import torch  # noqa: F401
    except ImportError as missing:
        print(f"\nnote: the training loop is left out ({missing})")
        return True
    print(f"\nPyTorch training loop (MLP 1024-4096-4096-1024, AdamW, varying batch), {steps} steps, "
          f"a fresh process each, {rounds} rounds alternating the allocators, medians of the rounds.")
    print("Peak device memory is the same measure for both: the most device memory in use (cudaMemGetInfo,")
    print("sampled after every step) above what was in use")
    print("once CUDA was initialized. Peak reserved is each allocator's own count of what it took from CUDA.\n")
    print("| allocator | median step (ms) | peak device memory (MiB) | peak reserved (MiB) | reserved as counted by |")
    print("|---|---:|---:|---:|---|")
    names = {mode: TRAINING_ALLOCATORS[mode] for mode in modes}
    # Fresh processes, alternating the allocators round by round; medians of the rounds.
    runs = {mode: [] for mode in names}
    failed = False
    for _ in range(rounds):
        for mode in names:
            environment = dict(os.environ)
            environment.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if mode == "torch-expandable":
                environment["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
            run = subprocess.run([sys.executable, "-c", TRAINING, mode, str(steps)], capture_output=True, text=True,
                                 env=environment)
            lines = run.stdout.strip().splitlines()
            if run.returncode != 0 or not lines:
                why = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
                print(f"note: a {mode} run failed: {why}")
                failed = True
                continue
            runs[mode].append(json.loads(lines[-1]))
    results = {}
    for mode, mode_runs in runs.items():
        if not mode_runs:
            print(f"| {names[mode]} | failed | | | |")
            continue
        result = {key: statistics.median(run[key] for run in mode_runs)
                  for key in ("median_ms", "device_peak", "reserved_peak")}
        results[mode] = result
        print(f"| {names[mode]} | {result['median_ms']:.3f} | {result['device_peak'] / MIB:,.1f} | "
              f"{result['reserved_peak'] / MIB:,.1f} | {mode_runs[0]['reserved_source']} |")
    for reference_mode in ("torch", "torch-expandable"):
        if reference_mode not in results:
            continue
        reference = results[reference_mode]
        print()
        for mode, result in results.items():
            if mode.startswith("cudapmr"):
                print(f"{names[mode]} / {names[reference_mode]}: step time "
                      f"{result['median_ms'] / reference['median_ms']:.3f}, peak device memory "
                      f"{result['device_peak'] / max(reference['device_peak'], 1):.3f}, peak reserved "
                      f"{result['reserved_peak'] / max(reference['reserved_peak'], 1):.3f}")
    return not failed and len(results) == len(names)

MIXED = r"""
import json, sys, time
mode = sys.argv[1]
import cupy, torch
if mode == "one-stack":
    import cudapmr
    outcome = cudapmr.install_allocators(frameworks=("cupy", "torch"))
    assert set(outcome.values()) == {"installed"}, outcome
free, total = torch.cuda.mem_get_info(0)
baseline = device_peak = total - free
def sample():
    global device_peak
    free, total = torch.cuda.mem_get_info(0)
    device_peak = max(device_peak, total - free)
sizes = [(16 + 37 * i % 240) << 20 for i in range(24)]  # 16..239 MiB, about 3 GiB a phase
start = time.perf_counter()
for round in range(4):
    arrays = [cupy.ones(size // 4, dtype=cupy.float32) for size in sizes]  # CuPy's phase
    total_cupy = sum(float(a[-1]) for a in arrays)
    cupy.cuda.runtime.deviceSynchronize(); sample()
    del arrays
    tensors = [torch.ones(size // 4, device="cuda") for size in reversed(sizes)]  # PyTorch's phase
    total_torch = sum(float(t[-1]) for t in tensors)
    torch.cuda.synchronize(); sample()
    del tensors
    assert total_cupy == total_torch == len(sizes)
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "device_peak": device_peak - baseline}))
"""


def mixed_frameworks_table(rounds):
    """CuPy and PyTorch in one process, alternating phases of about 3 GiB each:
    each framework on its own pool against both on cudapmr's one stack."""
    try:
        import cupy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as missing:
        print(f"\nnote: the mixed CuPy + PyTorch workload is left out ({missing})")
        return True
    names = {"own-pools": "CuPy's MemoryPool and PyTorch's caching allocator, each its own",
             "one-stack": "both on cudapmr's default stack (install_allocators)"}
    runs = {mode: [] for mode in names}
    failed = False
    for _ in range(rounds):
        for mode in names:
            run = subprocess.run([sys.executable, "-c", MIXED, mode], capture_output=True, text=True)
            lines = run.stdout.strip().splitlines()
            if run.returncode != 0 or not lines:
                print(f"note: a {mode} run failed: {run.stderr.strip().splitlines()[-1:] or run.returncode}")
                failed = True
                continue
            runs[mode].append(json.loads(lines[-1]))
    print(f"\nCuPy and PyTorch alternating phases of about 3 GiB (24 blocks of 16-239 MiB each), 4 rounds of both, "
          f"a fresh process each, medians of {rounds} runs. Peak device memory: cudaMemGetInfo after each phase, "
          f"above what was in use once CUDA was initialized.\n")
    print("| allocators | time (s) | peak device memory (MiB) |")
    print("|---|---:|---:|")
    for mode, mode_runs in runs.items():
        if not mode_runs:
            print(f"| {names[mode]} | failed | |")
            continue
        print(f"| {names[mode]} | {statistics.median(r['seconds'] for r in mode_runs):.3f} | "
              f"{statistics.median(r['device_peak'] for r in mode_runs) / MIB:,.0f} |")
    return not failed


def main():
    parser = argparse.ArgumentParser(description="cudapmr allocation from Python against its peers")
    parser.add_argument("--pairs", type=int, default=20000, help="pairs per run (default 20000)")
    parser.add_argument("--repeats", type=int, default=7,
                        help="rounds over all peers; each cell shows the median (default 7)")
    parser.add_argument("--steps", type=int, default=500, help="training steps timed per run (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="training runs per allocator (default 3)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--allocators", type=allocator_list, default=list(TRAINING_ALLOCATORS),
                        help=f"the training loop's allocators, comma-separated (default all: "
                             f"{','.join(TRAINING_ALLOCATORS)})")
    parser.add_argument("--skip-mixed", action="store_true", help="leave out the mixed CuPy + PyTorch workload")
    arguments = parser.parse_args()
    if cudapmr.device_count() == 0:
        print("cannot run: no CUDA device was found", file=sys.stderr)
        return 2
    print(f"Device: {cudapmr.device_name(0)}; cudapmr {cudapmr.__version__}; Python {sys.version.split()[0]}")
    allocation_table(arguments.pairs, arguments.repeats)
    if not arguments.skip_training and not training_table(arguments.steps, arguments.rounds, arguments.allocators):
        return 1  # the tables are printed; a training run that failed fails the benchmark
    if not arguments.skip_mixed and not mixed_frameworks_table(arguments.rounds):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
