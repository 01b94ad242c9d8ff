# SPDX-License-Identifier: Apache-2.0
"""The GPU suite: the CUDA kinds, buffers across them, DLPack into NumPy,
CuPy and PyTorch, the plug-ins and the errors. Skipped where no GPU exists."""

import ctypes
import gc

import pytest
from conftest import gpu, needs, run_child

import cudapmr

pytestmark = gpu


@pytest.fixture
def stream():
    owned = cudapmr.Stream(0)
    yield owned
    owned.synchronize()


def host_bytes(buffer, stream):
    out = bytearray(buffer.size)
    buffer.copy_to(out, stream=stream)
    stream.synchronize()
    return bytes(out)


@pytest.mark.parametrize("make, kind", [
    (lambda: cudapmr.DeviceMemoryResource(0), "device"),
    (lambda: cudapmr.DeviceMemoryResource(0, cudapmr.DeviceMemoryResourceOptions()), "device"),
    (cudapmr.PinnedMemoryResource, "pinned"),
    (lambda: cudapmr.ManagedMemoryResource(cudapmr.ManagedMemoryResourceOptions(preferred_device=0)), "managed"),
    (lambda: cudapmr.DeviceMallocResource(0), "device"),
    (lambda: cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)), "device"),
    (lambda: cudapmr.VirtualMemoryResource(0), "device"),
    (lambda: cudapmr.DeviceStack(0), "device"),
])
def test_each_kind_allocates_fills_and_copies(make, kind, stream):
    resource = make()
    assert resource.kind == kind
    with resource.allocate(1 << 16, stream=stream) as buffer:
        assert buffer.handle % 256 == 0
        buffer.fill(0x5A, stream=stream)
        assert host_bytes(buffer, stream) == b"\x5a" * (1 << 16)
        buffer.copy_from(bytes(range(256)) * 256, stream=stream)
        assert host_bytes(buffer, stream) == bytes(range(256)) * 256
        buffer.close(stream)


def test_pool_statistics_follow_allocations(stream):
    pool = cudapmr.DeviceMemoryResource(0, cudapmr.DeviceMemoryResourceOptions())
    assert pool.owns_pool
    with pool.allocate(1 << 20, stream=stream):
        stats = pool.statistics()
        assert stats.used_current >= 1 << 20 and stats.reserved_current >= stats.used_current
    stream.synchronize()
    pool.trim_to(0)
    assert pool.statistics().used_current == 0


def test_caching_resource_statistics_and_raw_path(stream):
    cache = cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0))
    for _ in range(10):
        cache.deallocate_raw(cache.allocate_raw(256, stream), 256, stream)
    stats = cache.statistics()
    assert stats.hits >= 9 and stats.misses >= 1 and stats.cached_bytes >= 256
    cache.release()
    assert cache.statistics().cached_bytes == 0


def test_device_stack_reports_each_layer_and_trims(stream):
    stack = cudapmr.DeviceStack(0)
    with stack.allocate(64 << 20, stream=stream):
        names = []
        layer = stack
        while layer is not None:
            names.append(layer.state()["name"])
            layer = layer.upstream
        assert names == ["device_stack (device 0)", "caching_resource", "coalescing_resource",
                         "virtual_memory_resource (device 0)"]
        assert stack.upstream.upstream.upstream.state()["reserved_bytes"] >= 64 << 20
    stack.trim(stream)
    leaf = stack.upstream.upstream.upstream
    assert leaf.state()["reserved_bytes"] == 0
    assert cudapmr.default_device_stack(0) is cudapmr.default_device_stack(0)


def test_buffers_copy_across_kinds(stream):
    device = cudapmr.DeviceMemoryResource(0).allocate(4096, stream=stream)
    pinned = cudapmr.PinnedMemoryResource().allocate(4096, stream=stream)
    pinned.fill(7, stream=stream)
    device.copy_from(pinned, stream=stream)
    back = device.copy_to(stream=stream)
    assert back.kind == "device"
    assert host_bytes(back, stream) == b"\x07" * 4096
    for buffer in (device, pinned, back):
        buffer.close(stream)


def test_out_of_memory_names_bytes_resource_and_cuda(stream):
    small = cudapmr.DeviceMemoryResource(0, cudapmr.DeviceMemoryResourceOptions(max_size=64 << 20))
    with pytest.raises(cudapmr.OutOfMemoryError) as failure:
        small.allocate(1 << 30, stream=stream)
    message = str(failure.value)
    assert str(1 << 30) in message and "device_memory_resource" in message
    assert failure.value.requested_bytes == 1 << 30
    with small.allocate(1 << 20, stream=stream) as buffer:  # still works afterwards
        buffer.close(stream)


def test_default_and_current_resources():
    default = cudapmr.default_device_resource(0)
    assert default is cudapmr.default_device_resource(0)
    assert cudapmr.get_current_device_resource(0) is default
    counted = cudapmr.StatisticsAdaptor(cudapmr.DeviceMemoryResource(0))
    previous = cudapmr.set_current_device_resource(counted, 0)
    try:
        assert cudapmr.get_current_device_resource(0) is counted
    finally:
        cudapmr.set_current_device_resource(previous, 0)


def test_default_pinned_and_managed_resources_are_caches_over_the_default_pools():
    for default, leaf in ((cudapmr.default_pinned_resource, cudapmr.PinnedMemoryResource),
                          (cudapmr.default_managed_resource, cudapmr.ManagedMemoryResource)):
        cache = default()
        assert cache is default()
        assert isinstance(cache, cudapmr.CachingResource)
        assert isinstance(cache.upstream, leaf) and not cache.upstream.owns_pool
        before = cache.statistics().hits
        for _ in range(3):
            with cache.allocate(4096) as buffer:
                buffer.fill(7)
        assert cache.statistics().hits >= before + 2


def test_managed_memory_taken_again_after_a_refused_request_reads_what_the_device_wrote():
    # The default managed cache trims its pool before it refuses a request. With CUDA 13.0 a managed
    # pool with no preferred location that released pages then handed them out again reading zeros.
    np = needs("numpy")
    cache = cudapmr.StatisticsAdaptor(cudapmr.default_managed_resource())
    with cache.allocate(1 << 16) as old:
        old.fill(9)
    with pytest.raises(cudapmr.OutOfMemoryError):
        cache.allocate_raw(2**64 - 255, alignment=256)
    managed = cudapmr.ManagedMemoryResource()
    assert not managed.gives_memory_back
    with managed.allocate(4096) as kept, managed.allocate(1 << 16) as taken:
        kept.fill(1)
        taken.fill(2)
        taken.prefetch_to_host()
        cudapmr.synchronize_device(0)
        assert int((np.from_dlpack(taken) != 2).sum()) == 0
    with pytest.raises(ValueError, match="release threshold of 0 bytes"):
        managed.release_threshold = 0
    preferring = cudapmr.ManagedMemoryResource(cudapmr.ManagedMemoryResourceOptions(preferred_device=0))
    assert preferring.gives_memory_back
    preferring.release_threshold = 0
    assert preferring.release_threshold == 0


def test_dlpack_devices_of_each_kind(stream):
    cases = [(cudapmr.DeviceMemoryResource(0), (2, 0)), (cudapmr.PinnedMemoryResource(), (3, 0)),
             (cudapmr.ManagedMemoryResource(), (13, 0))]
    for resource, device in cases:
        with resource.allocate(16, stream=stream) as buffer:
            assert buffer.__dlpack_device__() == device


def test_dlpack_orders_a_consumer_of_another_device_than_the_current_one():
    # PyTorch's from_dlpack passes the stream of the buffer's device with whatever device is current.
    if cudapmr.device_count() < 2:
        pytest.skip("needs two GPUs")
    current = cudapmr.current_device()
    other = 1 if current == 0 else 0
    stream = cudapmr.Stream(other)
    consumer = cudapmr.Stream(other)
    for resource in (cudapmr.DeviceMemoryResource(other), cudapmr.PinnedMemoryResource()):
        with resource.allocate(1 << 20, stream=stream) as buffer:
            buffer.fill(5, stream=stream)
            for named in (consumer.handle, 1, 2):
                capsule = buffer.__dlpack__(stream=named)
                del capsule
            consumer.synchronize()
            assert host_bytes(buffer, stream) == b"\x05" * (1 << 20)
    assert cudapmr.current_device() == current


@pytest.mark.parametrize("make", [cudapmr.PinnedMemoryResource, cudapmr.ManagedMemoryResource])
def test_numpy_sees_host_accessible_memory(make, stream):
    np = needs("numpy")
    with make().allocate(1024, stream=stream) as buffer:
        buffer.fill(3, stream=stream)
        array = np.from_dlpack(buffer)  # no stream: the buffer's stream is waited for
        assert array.ctypes.data == buffer.handle and (array == 3).all()
        array[:] = 4
        assert host_bytes(buffer, stream) == b"\x04" * 1024
        del array


def test_cupy_sees_device_memory_on_its_stream(stream):
    cupy = needs("cupy")
    with cudapmr.DeviceMemoryResource(0).allocate(1 << 20, stream=stream) as buffer:
        buffer.fill(9, stream=stream)
        consumer = cupy.cuda.Stream(non_blocking=True)
        with consumer:
            array = cupy.from_dlpack(buffer)  # ordered after the fill by an event
            assert array.data.ptr == buffer.handle
            assert int((array == 9).sum()) == 1 << 20
            array.fill(1)
        consumer.synchronize()
        assert host_bytes(buffer, stream) == b"\x01" * (1 << 20)
        del array


def test_torch_sees_device_memory(stream):
    torch = needs("torch")
    with cudapmr.DeviceMemoryResource(0).allocate(4096, stream=stream) as buffer:
        buffer.fill(2, stream=stream)
        tensor = torch.from_dlpack(buffer)
        assert tensor.device.type == "cuda" and tensor.data_ptr() == buffer.handle
        assert int(tensor.sum()) == 2 * 4096
        tensor.fill_(6)
        torch.cuda.synchronize()
        assert host_bytes(buffer, stream) == b"\x06" * 4096
        del tensor


def test_consumer_view_keeps_buffer_alive(stream):
    cupy = needs("cupy")
    pool = cudapmr.DeviceMemoryResource(0, cudapmr.DeviceMemoryResourceOptions())
    buffer = pool.allocate(1 << 20, stream=stream)
    buffer.fill(1, stream=stream)
    array = cupy.from_dlpack(buffer)
    del buffer
    gc.collect()
    assert int(array.sum()) == 1 << 20
    del array
    gc.collect()
    stream.synchronize()
    cupy.cuda.runtime.deviceSynchronize()
    assert pool.statistics().used_current == 0


def test_cuda_core_plugin_allocates_from_cudapmr():
    core = needs("cuda.core")
    from cudapmr.cuda_core import MemoryResource

    device = core.Device(0)
    device.set_current()
    core_stream = device.create_stream()
    counted = cudapmr.StatisticsAdaptor(cudapmr.DeviceMemoryResource(0))
    resource = MemoryResource(counted)
    assert resource.is_device_accessible and not resource.is_host_accessible and resource.device_id == 0
    assert not resource.is_managed
    buffer = resource.allocate(1 << 20, stream=core_stream)
    assert int(buffer.handle) != 0 and buffer.size == 1 << 20
    assert buffer.memory_resource is resource and buffer.is_device_accessible
    assert counted.statistics().bytes.current == 1 << 20
    assert counted.statistics(stream=core_stream).bytes.current == 1 << 20
    buffer.close(core_stream)
    core_stream.sync()
    assert counted.statistics().bytes.current == 0
    assert cudapmr.stream_handle(core_stream) == int(core_stream.handle)


def test_plugins_given_no_resource_draw_from_the_default_stack():
    cupy = needs("cupy")
    core = needs("cuda.core")
    import cudapmr.cupy as cupy_plugin
    from cudapmr.cuda_core import MemoryResource

    stack = cudapmr.default_device_stack(0)
    before = stack.state()["used_bytes"]
    resource = MemoryResource()
    assert resource.resource is stack
    device = core.Device(0)
    device.set_current()
    core_stream = device.create_stream()
    buffer = resource.allocate(1 << 20, stream=core_stream)
    assert stack.state()["used_bytes"] >= before + (1 << 20)
    buffer.close(core_stream)
    core_stream.sync()
    allocate = cupy_plugin.allocator()
    assert allocate.resource is stack
    cupy.cuda.set_allocator(allocate)
    try:
        array = cupy.ones(1 << 20, dtype=cupy.float32)
        assert stack.state()["used_bytes"] >= before + (4 << 20)
        assert float(array.sum()) == float(1 << 20)
        del array
        gc.collect()
    finally:
        cupy.cuda.set_allocator(cupy.cuda.MemoryPool().malloc)


def test_cupy_allocators_draw_from_cudapmr():
    cupy = needs("cupy")
    import cudapmr.cupy as plugin

    counted = cudapmr.StatisticsAdaptor(cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)))
    pinned = cudapmr.StatisticsAdaptor(cudapmr.PinnedMemoryResource())
    cupy.cuda.set_allocator(plugin.allocator(counted))
    cupy.cuda.set_pinned_memory_allocator(plugin.pinned_allocator(pinned))
    try:
        array = cupy.arange(1 << 20, dtype=cupy.float32)
        assert counted.statistics().bytes.current >= 4 << 20
        assert float(array[-1]) == (1 << 20) - 1
        host = cupy.asnumpy(array[:1024], blocking=True)
        assert host[10] == 10
        del array
        gc.collect()
        assert counted.statistics().bytes.current == 0
        staging = cupy.cuda.alloc_pinned_memory(4096)
        assert pinned.statistics().bytes.current == 4096 and staging.size() == 4096
        ctypes.memmove(int(staging), b"abcd", 4)  # ready for the host when returned
        assert ctypes.string_at(int(staging), 4) == b"abcd"
        del staging
        gc.collect()
        assert pinned.statistics().bytes.current == 0
    finally:
        cupy.cuda.set_allocator(cupy.cuda.MemoryPool().malloc)
        cupy.cuda.set_pinned_memory_allocator(cupy.cuda.PinnedMemoryPool().malloc)


def test_torch_pluggable_allocator_with_mem_pool():
    torch = needs("torch")
    import cudapmr.torch as plugin

    counted = cudapmr.StatisticsAdaptor(cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)))
    allocator = plugin.allocator(counted)
    pool = torch.cuda.MemPool(allocator.allocator())
    with torch.cuda.use_mem_pool(pool):
        tensor = torch.ones(1 << 20, device="cuda")
    assert counted.statistics().bytes.peak >= 4 << 20
    assert float(tensor.sum()) == float(1 << 20)
    del tensor
    torch.cuda.synchronize()
    del pool
    gc.collect()
    torch.cuda.empty_cache()
    assert plugin.last_error() == ""


@pytest.mark.parametrize("scenario", [
    "record_stream", "free_with_another_device_current", "empty_cache", "memory_fraction", "out_of_memory", "statistics", "snapshot", "capture"])
def test_torch_current_allocator(scenario):
    needs("torch")
    run_child("torch_routes.py", scenario)


@pytest.mark.parametrize("scenario", ["pool_graph", "pool_statistics", "pool_compile", "pool_out_of_memory"])
def test_torch_mem_pool(scenario):
    needs("torch")
    run_child("torch_routes.py", scenario)


def test_numba_kernels_on_cudapmr_memory():
    needs("numba.cuda")
    run_child("numba_plugin.py", "kernels_on_a_counted_stack")


def test_one_stack_for_every_framework():
    needs("torch")
    run_child("torch_routes.py", "one_stack_for_all")


def test_argument_errors_on_gpu(stream):
    with pytest.raises(ValueError):
        cudapmr.DeviceMemoryResource(cudapmr.device_count() + 5)
    with cudapmr.DeviceMemoryResource(0).allocate(16, stream=stream) as buffer:
        with pytest.raises(ValueError, match="managed"):
            buffer.prefetch_to_host(stream=stream)
        with pytest.raises(BufferError):
            buffer.__dlpack__(dl_device=(1, 0))


@pytest.mark.parametrize("scenario", ["device_close", "device_exit", "device_dropped", "device_consumer_lets_go"])
def test_a_free_waiting_for_a_host_function_that_needs_the_gil_does_not_deadlock(scenario):
    run_child("blocking_calls.py", scenario)


class CupyConsumer:
    """DLPack into CuPy, on the legacy default stream like the Buffers."""

    def __init__(self, cupy):
        self.cupy = cupy

    def take(self, buffer):
        return self.cupy.from_dlpack(buffer)

    def read(self, array):
        return self.cupy.asnumpy(array).tobytes()

    def write(self, array, value):
        array.fill(value)
        self.cupy.cuda.runtime.deviceSynchronize()

    def settle(self):
        self.cupy.cuda.runtime.deviceSynchronize()


class TorchConsumer:
    def __init__(self, torch):
        self.torch = torch

    def take(self, buffer):
        return self.torch.from_dlpack(buffer)

    def read(self, array):
        return array.cpu().numpy().tobytes()

    def write(self, array, value):
        array.fill_(value)
        self.torch.cuda.synchronize()

    def settle(self):
        self.torch.cuda.synchronize()


@pytest.mark.parametrize("consumer", ["cupy", "torch"])
@pytest.mark.parametrize("stack", ["device", "caching", "coalescing"])
def test_random_programs_on_ten_threads_keep_contents_and_statistics(stack, consumer):
    needs("hypothesis")
    module = needs(consumer)
    from buffer_model import check_programs, programs
    from hypothesis import given

    make_consumer = CupyConsumer if consumer == "cupy" else TorchConsumer
    stacks = {"device": lambda: cudapmr.DeviceMemoryResource(0),
              "caching": lambda: cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)),
              "coalescing": lambda: cudapmr.CoalescingResource(cudapmr.DeviceMallocResource(0))}

    @given(thread_programs=programs(10))
    def check(thread_programs):
        counted = cudapmr.StatisticsAdaptor(stacks[stack]())
        check_programs(counted, make_consumer(module), thread_programs)

    check()


def test_pinned_pools_are_on_the_numa_node_asked_for_and_by_default_near_the_device(stream):
    nearest = cudapmr.nearest_numa_node(0)
    default = cudapmr.PinnedMemoryResource()
    if default.placement_note:
        assert default.numa_node is None  # the driver refused: the fallback says so
    else:
        assert default.numa_node == nearest
    assert default.state()["numa_node"] == default.numa_node and default.state()["note"] == default.placement_note
    for node in cudapmr.host_numa_nodes():
        pinned = cudapmr.PinnedMemoryResource(cudapmr.PinnedMemoryResourceOptions(numa_node=node))
        if pinned.placement_note:
            continue
        assert pinned.numa_node == node and f"NUMA node {node}" in pinned.description
        with pinned.allocate(1 << 20, stream=stream) as block:
            stream.synchronize()
            block.fill(0x5A, 1, stream=stream)
            stream.synchronize()
            located = cudapmr.numa_node_of(block.handle)
            assert located in (None, node)  # None only where the kernel does not answer
    anywhere = cudapmr.PinnedMemoryResource(cudapmr.PinnedMemoryResourceOptions(numa_node=cudapmr.ANY_NUMA_NODE))
    assert anywhere.numa_node is None and anywhere.placement_note == ""
    if nearest is not None:  # the option as a keyword of the resource itself
        keyword = cudapmr.PinnedMemoryResource(numa_node=nearest)
        assert keyword.numa_node == (None if keyword.placement_note else nearest)


def test_history_and_snapshot_of_the_device_stack(stream, tmp_path):
    import pickle
    history = cudapmr.HistoryAdaptor(cudapmr.DeviceStack(0))
    with history.annotate("step"):
        live = history.allocate_raw(3 << 20, stream)
    stack = cudapmr.snapshot(history)["stacks"][0]
    names = [r["name"].split(" ")[0] for r in stack["resources"]]
    assert names[:2] == ["history_adaptor", "device_stack"] and "virtual_memory_resource" in names, names
    assert [(b["address"], b["bytes"]) for b in stack["live_blocks"]] == [(live, 3 << 20)]
    cudapmr.dump_snapshot(history, tmp_path / "stack.pickle")
    with open(tmp_path / "stack.pickle", "rb") as file:
        trace = pickle.load(file)["device_traces"][0]
    assert [e["action"] for e in trace if e["addr"] == live] == ["segment_alloc", "alloc"]
    history.deallocate_raw(live, 3 << 20, stream)

    capped = cudapmr.HistoryAdaptor(cudapmr.DeviceMemoryResource(0, cudapmr.DeviceMemoryResourceOptions(
        max_size=64 << 20)))
    with pytest.raises(cudapmr.OutOfMemoryError) as refused:
        capped.allocate_raw(128 << 20, stream)
    assert "device free memory: " in refused.value.report
    refusal = capped.events()[-1]
    assert refusal["action"] == "out_of_memory" and refusal["bytes"] == 128 << 20
    assert 0 < refusal["device_free_bytes"] <= cudapmr.device_memory_info(0)[1]
