# SPDX-License-Identifier: Apache-2.0
"""cudapmr behind PyTorch, one scenario per process (PyTorch takes its
current allocator once): run as ``python torch_routes.py SCENARIO``; it
prints ``ok``, fails with an assertion, or exits with UNAVAILABLE where
PyTorch or a GPU is missing.

The first scenarios install ``cudapmr.torch.allocator()`` over the process's
default stack as PyTorch's current allocator before PyTorch allocates
anything on the GPU; the ``pool_*`` ones route a ``torch.cuda.MemPool`` to
it, PyTorch's own allocator staying in charge."""

import faulthandler
import gc
import importlib.util
import math
import sys

UNAVAILABLE = 3  # conftest.UNAVAILABLE
MIB = 1 << 20


def import_torch():
    try:
        import torch
    except ImportError:
        print("needs torch")
        sys.exit(UNAVAILABLE)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        sys.exit(UNAVAILABLE)
    return torch


def install():
    """cudapmr's default stack as PyTorch's current allocator."""
    torch = import_torch()
    import cudapmr.torch as plugin

    torch.cuda.memory.change_current_allocator(plugin.allocator())
    return torch, plugin


def mem_pool():
    """A MemPool whose segments come from the default stack, counted."""
    torch = import_torch()
    import cudapmr
    import cudapmr.torch as plugin

    counted = cudapmr.StatisticsAdaptor(cudapmr.default_device_stack(0))
    return torch, counted, torch.cuda.MemPool(plugin.allocator(counted).allocator())


def record_stream():
    """A tensor read on a second stream is not handed out again before that
    stream's work is done: the next tensor on the first stream would overwrite
    it while the second still reads. Without record_stream the block is reused
    at once (the control), which is what makes the check able to fail."""
    torch, plugin = install()
    count = 16 * MIB // 4
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()

    def read_late_on_side(source):
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # the side stream reads long after the free
            return source * 2

    # Control: no record_stream, the block goes straight back to the main stream's cache.
    source = torch.ones(count, device="cuda")
    address = source.data_ptr()
    doubled = read_late_on_side(source)
    del source
    reused = torch.empty(count, device="cuda")
    control_reused = reused.data_ptr() == address
    side.synchronize()
    del reused, doubled
    torch.cuda.synchronize()

    source = torch.ones(count, device="cuda")
    doubled = read_late_on_side(source)
    source.record_stream(side)
    assert plugin.memory_stats()["cudapmr.blocks_used_on_other_streams"] == 1
    del source
    overwriting = torch.full((count,), 7.0, device="cuda")  # on the main stream, at once
    side.synchronize()
    assert bool((doubled == 2).all()), "the side stream read a block that was handed out again"
    del overwriting
    assert plugin.memory_stats()["cudapmr.frees_after_other_streams"] >= 1
    assert control_reused, "the control did not reuse the block: this check could not fail"
    assert plugin.last_error() == ""


def free_with_another_device_current():
    """PyTorch frees with no device guard, on handle 0 for its default stream:
    a cuda:0 tensor dropped while device 1 is current is freed after device
    0's work, so a tensor made at once on another stream of device 0 does not
    overwrite it while device 0's default stream still reads it."""
    if import_torch().cuda.device_count() < 2:
        print("needs two GPUs")
        sys.exit(UNAVAILABLE)
    torch, plugin = install()
    count = 16 * MIB // 4
    side = torch.cuda.Stream(device=0)
    source = torch.ones(count, device="cuda:0")
    torch.cuda._sleep(200_000_000)  # device 0's default stream reads the block long after the free
    doubled = source * 2
    with torch.cuda.device(1):
        del source
    with torch.cuda.stream(side):
        overwriting = torch.full((count,), 7.0, device="cuda:0")
    torch.cuda.synchronize(0)
    assert bool((doubled == 2).all()), "a block freed with device 1 current was handed out under device 0's work"
    del overwriting, doubled
    assert plugin.last_error() == ""


def empty_cache():
    """``torch.cuda.empty_cache()`` reaches the stack: what it holds unused goes back."""
    torch, plugin = install()
    blocks = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    held = plugin.memory_reserved()
    assert held >= 512 * MIB, held
    del blocks  # the stack keeps some of it for reuse
    torch.cuda.synchronize()
    kept = plugin.memory_reserved()
    torch.cuda.empty_cache()
    after = plugin.memory_reserved()
    assert after < held // 8 and after <= kept, (held, kept, after)
    assert plugin.memory_stats()["cudapmr.empty_cache_calls"] >= 1
    assert plugin.last_error() == ""


def memory_fraction():
    """``set_per_process_memory_fraction`` caps what the tensors may hold:
    within the cap allocations succeed, past it they are refused with a
    message naming the fraction."""
    torch, plugin = install()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(0.01, 0)
    assert plugin.memory_fraction(0) == 0.01
    cap = int(total * 0.01)
    within = torch.empty(cap // 2, dtype=torch.uint8, device="cuda")
    assert plugin.memory_allocated() >= cap // 2
    try:
        torch.empty(cap, dtype=torch.uint8, device="cuda")
        raise AssertionError("an allocation past the memory fraction was not refused")
    except torch.OutOfMemoryError as error:
        assert "memory fraction 0.01" in str(error), str(error)
    assert "memory fraction 0.01" in plugin.last_error(), plugin.last_error()
    assert plugin.memory_stats()["num_ooms"] >= 1
    del within


def out_of_memory():
    """A refusal of the resource raises ``torch.OutOfMemoryError`` carrying
    cudapmr's message, takes nothing, and later allocations succeed."""
    torch = import_torch()
    import cudapmr
    import cudapmr.torch as plugin

    capped = cudapmr.LimitingAdaptor(cudapmr.default_device_stack(0), 64 * MIB)
    torch.cuda.memory.change_current_allocator(plugin.allocator(capped))
    # float32, whose sum reads the tensor as it is: a uint8 sum first widens it to an int64 copy, past the cap
    kept = torch.ones(4 * MIB, dtype=torch.float32, device="cuda")
    try:
        torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
        raise AssertionError("an allocation past the resource's cap was not refused")
    except torch.OutOfMemoryError as error:
        message = str(error)
    assert message.startswith("CUDA out of memory. Tried to allocate"), message
    assert f"the cap is {64 * MIB} bytes" in message, message  # the limiting adaptor's own words
    assert plugin.memory_stats()["num_ooms"] == 1
    assert plugin.memory_allocated() == 16 * MIB, plugin.memory_allocated()
    again = torch.ones(8 * MIB, dtype=torch.float32, device="cuda")
    assert int(again.sum()) == 8 * MIB and int(kept.sum()) == 4 * MIB
    print(f"refused: {message.splitlines()[0]}", file=sys.stderr)


def statistics():
    """``cudapmr.torch``'s statistics answer under PyTorch's names."""
    torch, plugin = install()
    base = plugin.memory_allocated()
    tensors = [torch.empty(n * MIB, dtype=torch.uint8, device="cuda") for n in (1, 2, 3)]
    assert plugin.memory_allocated() - base >= 6 * MIB
    stats = plugin.memory_stats()
    assert stats["allocation.all.current"] >= 3
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"] >= 6 * MIB
    assert plugin.memory_reserved() >= plugin.memory_allocated()
    del tensors
    torch.cuda.synchronize()
    assert plugin.memory_allocated() == base
    assert plugin.max_memory_allocated() >= base + 6 * MIB
    plugin.reset_peak_memory_stats()
    assert plugin.max_memory_allocated() == base
    assert plugin.max_memory_reserved() >= plugin.memory_reserved()


def snapshot():
    """``cudapmr.torch``'s snapshot, in PyTorch's format, lists the tensors
    alive and the history recorded since ``record_memory_history``; the
    dumped file is what PyTorch's own viewer renders."""
    torch, plugin = install()
    import os
    import pickle
    import tempfile

    from torch.cuda import _memory_viz

    plugin._record_memory_history(max_entries=10_000)
    kept = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    dropped = torch.empty(5 * MIB, dtype=torch.uint8, device="cuda")
    address = dropped.data_ptr()
    del dropped
    taken = plugin._snapshot()
    assert {"segments", "device_traces"} <= taken.keys(), taken.keys()
    blocks = [block for segment in taken["segments"] for block in segment["blocks"]]
    assert any(b["address"] == kept.data_ptr() and b["size"] == 3 * MIB and b["state"] == "active_allocated"
               for b in blocks), blocks
    assert all(b["address"] != address for b in blocks), "a freed tensor is still listed"
    trace = taken["device_traces"][torch.cuda.current_device()]
    actions = [(entry["action"], entry["size"]) for entry in trace]
    assert ("alloc", 3 * MIB) in actions and ("alloc", 5 * MIB) in actions and ("free_requested", 5 * MIB) in actions, actions
    assert plugin.memory_snapshot() == taken["segments"]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snapshot.pickle")
        plugin._dump_snapshot(path)
        with open(path, "rb") as file:
            dumped = pickle.load(file)
        assert [s["address"] for s in dumped["segments"]] == [s["address"] for s in taken["segments"]]
    # PyTorch's own readers take it: segsum checks that each segment's blocks
    # add up, trace replays the history's entries.
    assert isinstance(_memory_viz.segsum(dumped), str)
    assert isinstance(_memory_viz.trace(dumped), str)
    plugin._record_memory_history(enabled=None)
    assert not any(plugin._snapshot()["device_traces"]), "the history was kept after recording stopped"
    stats = plugin.memory_stats()
    assert stats["allocation.all.allocated"] - stats["allocation.all.freed"] == stats["allocation.all.current"]
    assert stats["allocated_bytes.all.allocated"] >= 8 * MIB and stats["allocated_bytes.all.freed"] >= 5 * MIB
    plugin.reset_accumulated_memory_stats()
    assert plugin.memory_stats()["allocation.all.allocated"] == 0
    del kept


def capture():
    """A graph that allocates, uses and frees temporaries is captured over
    the stack and replayed 200 times with the right results and the device
    memory the stack holds flat."""
    torch, plugin = install()
    count = 1 << 20
    static_in = torch.ones(count, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch asks
        for _ in range(3):
            (static_in * 2 + 1).sum()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        doubled = static_in * 2
        shifted = doubled + 1
        static_out = shifted.sum()
        del doubled, shifted
    graph.replay()
    torch.cuda.synchronize()
    reserved = plugin.memory_reserved()
    for step in range(200):
        static_in.fill_(float(step))
        graph.replay()
        assert math.isclose(float(static_out), count * (2 * step + 1), rel_tol=1e-5), step
    torch.cuda.synchronize()
    assert plugin.memory_reserved() == reserved, (reserved, plugin.memory_reserved())
    assert plugin.last_error() == ""


def pool_graph():
    """A graph captured into the MemPool replays 200 times with the right
    results; its memory came from cudapmr."""
    torch, counted, pool = mem_pool()
    count = 1 << 20
    static_in = torch.ones(count, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        (static_in * 2 + 1).sum()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool.id):
        static_out = (static_in * 2 + 1).sum()
    assert counted.statistics().bytes.current > 0, "the graph's memory did not come from cudapmr"
    for step in range(200):
        static_in.fill_(float(step))
        graph.replay()
        assert math.isclose(float(static_out), count * (2 * step + 1), rel_tol=1e-5), step
    del graph, static_out
    torch.cuda.synchronize()


def pool_statistics():
    """PyTorch's statistics and snapshots see the MemPool's tensors, whose segments cudapmr holds."""
    torch, counted, pool = mem_pool()
    with torch.cuda.use_mem_pool(pool):
        tensor = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() >= 8 * MIB
    assert torch.cuda.memory_stats()["allocated_bytes.all.current"] >= 8 * MIB
    assert counted.statistics().bytes.current >= 8 * MIB
    segments = pool.snapshot()
    assert sum(segment["total_size"] for segment in segments) >= 8 * MIB, segments
    assert any(segment["total_size"] >= 8 * MIB for segment in torch.cuda.memory_snapshot())
    del tensor
    torch.cuda.synchronize()


def pool_compile():
    """``torch.compile(mode="reduce-overhead")`` runs in a process whose
    tensors come from the MemPool (its CUDA graphs take their memory from
    PyTorch's own graph pools, which no plug-in sees: what this shows is that
    the MemPool route leaves it working, where a pluggable current allocator
    makes it raise)."""
    torch, counted, pool = mem_pool()
    try:
        import triton  # noqa: F401
    except ImportError:
        print("needs triton for torch.compile")
        sys.exit(UNAVAILABLE)
    with torch.cuda.use_mem_pool(pool):
        weight = torch.randn(256, 256, device="cuda")
    step = torch.compile(lambda x: torch.relu(x @ weight) + 1, mode="reduce-overhead")
    x = torch.randn(64, 256, device="cuda")
    for _ in range(4):
        out = step(x)
    expected = torch.relu(x @ weight) + 1
    assert torch.allclose(out, expected, atol=1e-3), float((out - expected).abs().max())
    assert counted.statistics().bytes.current >= 256 * 256 * 4


def one_stack_for_all():
    """``cudapmr.install_allocators`` makes one counted stack the allocator of
    CuPy, PyTorch, cuda.core and, where numba-cuda is installed, Numba; memory
    freed by one framework serves another with no more taken from the device."""
    torch = import_torch()
    try:
        import cupy
        from cuda.core import Device
    except ImportError as missing:
        print(f"needs cupy and cuda.core ({missing})")
        sys.exit(UNAVAILABLE)
    import cudapmr

    stack = cudapmr.default_device_stack(0)
    counted = cudapmr.StatisticsAdaptor(stack)
    outcome = cudapmr.install_allocators(counted, 0)
    expected_numba = "installed" if importlib.util.find_spec("numba_cuda") else "absent"
    assert outcome == {"cupy": "installed", "torch": "installed", "numba": expected_numba, "cuda.core": "installed"}, outcome
    from_cupy = cupy.ones(MIB, dtype=cupy.float64)  # 8 MiB
    from_torch = torch.ones(MIB, device="cuda")  # 4 MiB
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    from_core = device.allocate(MIB, stream=stream)
    from_numba = None
    if expected_numba == "installed":
        from numba import cuda as numba_cuda

        from_numba = numba_cuda.device_array(MIB, dtype="float32")  # 4 MiB, through Numba's memory manager
    numba_bytes = 0 if from_numba is None else 4 * MIB
    held = counted.statistics()
    frameworks = 3 if from_numba is None else 4
    assert held.allocations.current == frameworks and held.bytes.current >= 8 * MIB + 4 * MIB + MIB + numba_bytes, held
    assert float(from_cupy.sum()) == float(MIB) and float(from_torch.sum()) == float(MIB)
    del from_cupy
    cupy.cuda.runtime.deviceSynchronize()
    held = counted.statistics()
    assert held.allocations.current == frameworks - 1 and held.bytes.current >= 4 * MIB + MIB + numba_bytes, held
    if from_numba is not None:
        del from_numba
        gc.collect()
        numba_cuda.synchronize()  # the memory manager's block was freed into the stack as the array was dropped
        assert counted.statistics().allocations.current == 2, counted.statistics()
    reserved = stack.state()["reserved_bytes"]
    from_torch_again = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")  # CuPy's 8 MiB, on the same stream
    torch.cuda.synchronize()
    assert stack.state()["reserved_bytes"] == reserved, "PyTorch took new memory where CuPy's freed block would do"
    from_core.close(stream)
    stream.sync()
    del from_torch, from_torch_again
    torch.cuda.synchronize()
    assert counted.statistics().allocations.current == 0, counted.statistics()


def init_hook():
    """Host only, no PyTorch: the bridge is marked PyTorch's current allocator
    by the init hook with a device count, not by the call at construction;
    unmarked, a refusal is a null (what a MemPool retries on)."""
    import ctypes

    import cudapmr

    library = ctypes.CDLL(cudapmr._cudapmr.__file__)
    init, malloc = library.cudapmr_torch_init, library.cudapmr_torch_malloc
    init.restype, init.argtypes = None, [ctypes.c_int]
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

    def current():
        return cudapmr._cudapmr._torch_bridge_state(7)["current_allocator"]

    assert not current()
    assert malloc(64, 7, None) is None  # nothing registered for device 7
    assert "device 7" in cudapmr._cudapmr._torch_last_error()
    init(0)  # PyTorch's call at the allocator's construction, current or not
    assert not current()
    init(2)  # its CUDA lazy init, on the current allocator only
    assert current()


def pool_out_of_memory():
    """In a MemPool a refusal goes back to PyTorch as a null, and PyTorch
    raises ``torch.OutOfMemoryError`` itself (inside ``use_mem_pool`` it skips
    its last free-everything retry, PyTorch issues #159674, #175015); the
    pool goes on serving what fits."""
    torch = import_torch()
    import cudapmr
    import cudapmr.torch as plugin

    capped = cudapmr.LimitingAdaptor(cudapmr.default_device_stack(0), 64 * MIB)
    pool = torch.cuda.MemPool(plugin.allocator(capped).allocator())
    with torch.cuda.use_mem_pool(pool):
        kept = torch.ones(4 * MIB, dtype=torch.float32, device="cuda")  # float32: its sum needs no widened copy
        try:
            torch.empty(96 * MIB, dtype=torch.uint8, device="cuda")
            raise AssertionError("an allocation past the cap was not refused")
        except torch.OutOfMemoryError:
            pass
        assert "the cap is" in plugin.last_error(), plugin.last_error()
        again = torch.ones(8 * MIB, dtype=torch.float32, device="cuda")
        assert int(again.sum()) == 8 * MIB and int(kept.sum()) == 4 * MIB
        del kept, again
    assert not cudapmr._cudapmr._torch_bridge_state(0)["current_allocator"]
    del pool
    torch.cuda.synchronize()


SCENARIOS = {scenario.__name__: scenario for scenario in (record_stream, free_with_another_device_current, empty_cache, memory_fraction, out_of_memory,
                                                          statistics, snapshot, capture, init_hook, pool_out_of_memory,
                                                          pool_graph, pool_statistics, pool_compile, one_stack_for_all)}

if __name__ == "__main__":
    faulthandler.dump_traceback_later(240, exit=True)
    SCENARIOS[sys.argv[1]]()
    print("ok")
