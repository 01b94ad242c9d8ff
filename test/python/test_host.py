# SPDX-License-Identifier: Apache-2.0
"""What runs anywhere: the host resource, adaptors over it, buffers, DLPack
into NumPy, stream arguments and argument checks."""

import ctypes
import gc

import pytest
from conftest import needs, no_gpu, run_child

import cudapmr


@pytest.fixture
def host():
    return cudapmr.HostMemoryResource()


def test_the_package_exports_every_public_name_of_the_extension():
    # A class bound in C++ but not re-exported is out of users' reach (as
    # VirtualMemoryResource, DeviceStack and default_device_stack once were).
    from cudapmr import _cudapmr

    public = {name for name in dir(_cudapmr) if not name.startswith("_")}
    assert sorted(public - set(dir(cudapmr))) == []


def test_host_resource_describes_itself(host):
    assert host.kind == "pageable"
    assert host.device_id == -1
    assert host.is_host_accessible and not host.is_device_accessible
    assert "host_memory_resource" in repr(host)


def test_raw_allocation_round_trip_counts_bytes(host):
    pointer = host.allocate_raw(1000)
    assert pointer % 256 == 0
    assert host.used_bytes == 1000
    host.deallocate_raw(pointer, 1000)
    assert host.used_bytes == 0


def test_zero_bytes_round_trip(host):
    pointer = host.allocate_raw(0)
    host.deallocate_raw(pointer, 0)
    with host.allocate(0) as buffer:
        assert buffer.size == 0


def test_buffer_properties_and_close(host):
    buffer = host.allocate(128, stream=None)
    assert buffer.size == len(buffer) == 128
    assert buffer.is_open and buffer.memory_resource is host
    assert buffer.kind == "pageable" and buffer.is_host_accessible
    buffer.close()
    buffer.close()  # closing twice does nothing
    assert not buffer.is_open and buffer.size == 0 and buffer.handle == 0
    assert host.used_bytes == 0


def test_buffer_context_manager_frees(host):
    with host.allocate(64) as buffer:
        assert host.used_bytes == 64
    assert not buffer.is_open
    assert host.used_bytes == 0


def test_buffer_collected_frees(host):
    buffer = host.allocate(64)
    del buffer
    gc.collect()
    assert host.used_bytes == 0


def test_closed_buffer_refuses_operations(host):
    buffer = host.allocate(8)
    buffer.close()
    with pytest.raises(ValueError, match="fill"):
        buffer.fill(1)
    with pytest.raises(ValueError, match="__dlpack__"):
        buffer.__dlpack__()


def test_copies_to_and_from_host_objects(host):
    with host.allocate(16) as buffer:
        buffer.copy_from(bytes(range(16)))
        out = bytearray(16)
        assert buffer.copy_to(out) is out
        assert out == bytes(range(16))
        with pytest.raises(ValueError, match="16"):
            buffer.copy_from(bytes(15))
        with pytest.raises(ValueError):
            buffer.copy_to(bytearray(17))
        with pytest.raises(BufferError):
            buffer.copy_to(bytes(16))  # read-only


def test_copies_between_buffers(host):
    with host.allocate(32) as source, host.allocate(32) as destination:
        source.fill(0xAB)
        source.copy_to(destination)
        out = bytearray(32)
        destination.copy_to(out)
        assert out == b"\xab" * 32
        fresh = source.copy_to()
        assert fresh.size == 32 and fresh.memory_resource is host
        fresh.close()
        with host.allocate(16) as small, pytest.raises(ValueError):
            small.copy_from(source)


def test_fill_widths_and_checks(host):
    with host.allocate(8) as buffer:
        buffer.fill(0x01020304, 4)
        out = bytearray(8)
        buffer.copy_to(out)
        assert out == (0x01020304).to_bytes(4, "little") * 2
        with pytest.raises(ValueError, match="width 3"):
            buffer.fill(0, 3)
        with pytest.raises(ValueError, match="does not fit"):
            buffer.fill(256, 1)
    with host.allocate(6) as odd, pytest.raises(ValueError, match="6 bytes"):
        odd.fill(0, 4)


def test_dlpack_into_numpy_shares_memory(host):
    np = needs("numpy")
    with host.allocate(16) as buffer:
        assert buffer.__dlpack_device__() == (1, 0)
        array = np.from_dlpack(buffer)
        assert array.dtype == np.uint8 and array.shape == (16,)
        assert array.ctypes.data == buffer.handle
        buffer.fill(5)
        assert (array == 5).all()
        array[:] = 9
        out = bytearray(16)
        buffer.copy_to(out)
        assert out == b"\x09" * 16
        del array


def test_dlpack_capsule_versions(host):
    with host.allocate(4) as buffer:
        assert "dltensor_versioned" in repr(buffer.__dlpack__(max_version=(1, 0)))
        assert "dltensor" in repr(buffer.__dlpack__(max_version=(0, 8)))
        assert "dltensor" in repr(buffer.__dlpack__())
    gc.collect()
    assert host.used_bytes == 0  # unconsumed capsules let the buffer go


def test_dlpack_refuses_copy_and_other_devices(host):
    with host.allocate(4) as buffer:
        with pytest.raises(BufferError, match="copy"):
            buffer.__dlpack__(copy=True)
        with pytest.raises(BufferError, match="not"):
            buffer.__dlpack__(dl_device=(2, 0))


def test_numpy_view_keeps_the_memory(host):
    np = needs("numpy")
    buffer = host.allocate(8)
    buffer.fill(3)
    array = np.from_dlpack(buffer)
    del buffer
    gc.collect()
    assert host.used_bytes == 8 and (array == 3).all()
    del array
    gc.collect()
    assert host.used_bytes == 0


def test_close_under_a_dlpack_export_leaves_the_memory_to_the_consumer(host):
    np = needs("numpy")
    counted = cudapmr.StatisticsAdaptor(host)
    buffer = counted.allocate(4096, stream=5)
    buffer.fill(7)
    array = np.from_dlpack(buffer)
    buffer.close(stream=9)
    assert not buffer.is_open and buffer.handle == 0
    assert counted.statistics().bytes.current == 4096  # the export owns the memory now
    assert counted.statistics(stream=9).bytes.current == 0
    assert (array == 7).all()
    array[:] = 8  # still ours to write
    assert (array == 8).all()
    del array
    gc.collect()
    assert counted.statistics().bytes.current == 0
    assert counted.statistics(stream=9).bytes.current == -4096  # freed at last on the stream close named
    assert host.used_bytes == 0


def test_with_block_leaves_exported_memory_to_every_consumer(host):
    np = needs("numpy")
    counted = cudapmr.StatisticsAdaptor(host)
    with counted.allocate(256) as buffer:
        buffer.fill(3)
        first = np.from_dlpack(buffer)
        second = np.from_dlpack(buffer)
        unconsumed = buffer.__dlpack__(max_version=(1, 0))
    assert counted.statistics().bytes.current == 256
    assert (first == 3).all() and (second == 3).all()
    del first
    gc.collect()
    assert counted.statistics().bytes.current == 256 and (second == 3).all()
    del second
    gc.collect()
    assert counted.statistics().bytes.current == 256  # the capsule still holds it
    del unconsumed
    gc.collect()
    assert counted.statistics().bytes.current == 0 and host.used_bytes == 0


@pytest.mark.parametrize("scenario", ["copy_from_host_object", "copy_to_host_object", "copy_between_buffers",
                                      "copy_to_new_buffer", "fill"])
def test_a_buffer_closed_during_a_call_without_the_gil_stays_until_the_call_returns(scenario):
    run_child("close_during_call.py", scenario)  # without the guarantee the call touches unmapped memory and dies


@pytest.mark.parametrize("scenario", ["allocate_and_close", "allocate_and_exit", "dropped", "copy_to_new_buffers",
                                      "raw", "deallocate_checked", "consumer_lets_go", "flush", "caching_release",
                                      "coalescing_release"])
def test_calls_that_block_release_the_gil(scenario):
    if scenario == "consumer_lets_go":
        needs("numpy")
    run_child("blocking_calls.py", scenario)  # a call that blocks with the GIL deadlocks


class ProtocolStream:
    def __init__(self, handle):
        self.handle_value = handle

    def __cuda_stream__(self):
        return (0, self.handle_value)


class CupyLikeStream:
    ptr = 1234


def test_stream_arguments():
    assert cudapmr.stream_handle(None) == 0
    assert cudapmr.stream_handle(77) == 77
    assert cudapmr.stream_handle(ProtocolStream(99)) == 99
    assert cudapmr.stream_handle(CupyLikeStream()) == 1234
    with pytest.raises(ValueError, match="-5"):
        cudapmr.stream_handle(-5)
    with pytest.raises(TypeError, match="str"):
        cudapmr.stream_handle("stream")


def test_statistics_adaptor_counts(host):
    counted = cudapmr.StatisticsAdaptor(host)
    pointer = counted.allocate_raw(100, 5)
    with counted.allocate(50, stream=7):
        stats = counted.statistics()
        assert stats.bytes.current == 150 and stats.allocations.current == 2
    counted.deallocate_raw(pointer, 100, 5)
    stats = counted.statistics()
    assert (stats.bytes.current, stats.bytes.peak, stats.bytes.total) == (0, 150, 150)
    assert counted.statistics(stream=5).bytes.total == 100
    assert {entry.stream for entry in counted.per_stream()} == {5, 7}
    counted.reset_peak()
    assert counted.statistics().bytes.peak == 0
    assert counted.upstream is host


def test_every_resource_reports_its_state_and_trims(host):
    arena = cudapmr.CoalescingResource(host)
    counted = cudapmr.StatisticsAdaptor(arena)
    kept = counted.allocate_raw(4 << 20, 1)
    counted.deallocate_raw(counted.allocate_raw(6 << 20, 2), 6 << 20, 2)
    state = arena.state()
    assert state["name"] == "coalescing_resource" and state["kind"] == "pageable"
    assert (state["used_bytes"], state["reserved_bytes"], state["cached_bytes"]) == (4 << 20, 10 << 20, 6 << 20)
    assert state["releasable_bytes"] == 6 << 20 and state["cached_bytes_by_stream"] == {2: 6 << 20}
    assert counted.state()["used_bytes"] == 4 << 20 and counted.state()["cap_bytes"] is None
    assert host.state()["used_bytes"] == 10 << 20
    assert counted.upstream is arena and arena.upstream is host and host.upstream is None
    counted.trim(2)
    assert host.used_bytes == 4 << 20 and arena.state()["releasable_bytes"] == 0
    counted.deallocate_raw(kept, 4 << 20, 1)
    arena.release()
    assert host.used_bytes == 0


def test_coalescing_resource_serves_smaller_requests_from_a_freed_block(host):
    arena = cudapmr.CoalescingResource(host)
    big = arena.allocate_raw(16 << 20)
    arena.deallocate_raw(big, 16 << 20)
    first = arena.allocate_raw(6 << 20)
    second = arena.allocate_raw(6 << 20)
    assert (first, second) == (big, big + (6 << 20))
    stats = arena.statistics()
    assert (stats.segments, stats.reserved_bytes, stats.used_bytes) == (1, 16 << 20, 12 << 20)
    assert "reserved_peak=16777216" in repr(stats)
    assert (stats.segment_allocations, stats.segments_adopted, stats.pending_blocks) == (1, 0, 0)
    arena.deallocate_raw(first, 6 << 20)
    arena.deallocate_raw(second, 6 << 20)
    arena.release()
    assert host.used_bytes == 0
    with pytest.raises(ValueError, match="segment_granularity of 3145728 bytes"):
        cudapmr.CoalescingResource(host, segment_granularity=3 << 20)


@pytest.mark.parametrize("hand_back", [False, True])
def test_caching_resource_hands_its_streams_blocks_back_before_a_large_request_when_asked(host, hand_back):
    cache = cudapmr.CachingResource(host, max_cached_block=64 << 10, hand_back_before_large=hand_back)
    stream = 0x1000  # a made-up handle: the host resource ignores streams, the cache keys on them
    for _ in range(4):  # past the frees a new stream seals
        cache.deallocate_raw(cache.allocate_raw(4096, stream), 4096, stream)
    assert host.used_bytes == 4096
    large = cache.allocate_raw(100 << 10, stream)
    assert host.used_bytes == (100 << 10) + (0 if hand_back else 4096)
    cache.deallocate_raw(large, 100 << 10, stream)
    cache.release()
    assert host.used_bytes == 0


@pytest.mark.parametrize("share", [None, 16 << 10])
def test_caching_resource_offers_a_streams_freed_blocks_to_other_streams_past_its_stream_share(host, share):
    cache = cudapmr.CachingResource(host, stream_share=share)
    quiet, other = 0x1000, 0x2000  # made-up handles: the host resource ignores streams, the cache keys on them
    for _ in range(4):  # past the frees a new stream offers
        cache.deallocate_raw(cache.allocate_raw(4096, quiet), 4096, quiet)
    blocks = [cache.allocate_raw(4096, quiet) for _ in range(8)]
    for block in blocks:
        cache.deallocate_raw(block, 4096, quiet)
    held = host.used_bytes
    taken = cache.allocate_raw(4096, other)
    # 32 KiB freed: past a 16 KiB share the other stream reuses one; below the default share it is the quiet stream's.
    assert host.used_bytes == held + (0 if share is not None else 4096)
    cache.deallocate_raw(taken, 4096, other)
    cache.release()
    assert host.used_bytes == 0


def test_caching_resource_with_max_cached_per_live_keeps_a_multiple_of_what_is_live(host):
    def cached_with_16_mib_live(**options):
        cache = cudapmr.CachingResource(host, **options)
        blocks = [cache.allocate_raw(1 << 20) for _ in range(128)]
        for block in blocks[16:]:
            cache.deallocate_raw(block, 1 << 20)
        cached = cache.statistics().cached_bytes
        for block in blocks[:16]:
            cache.deallocate_raw(block, 1 << 20)
        return cached

    assert cached_with_16_mib_live() == 112 << 20  # the recent peak's worth, kept
    by_factor = {x: cached_with_16_mib_live(max_cached_per_live=x) for x in (1.0, 2.0, 4.0)}
    for x, cached in by_factor.items():
        assert cached <= x * (16 << 20), by_factor  # no memory of the peak
    assert by_factor[1.0] < by_factor[2.0] < by_factor[4.0], by_factor
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="max_cached_per_live of .* is not a finite positive number"):
            cudapmr.CachingResource(host, max_cached_per_live=bad)


def test_coalescing_resource_gives_back_idle_segments_past_max_idle_bytes(host):
    def held_after_freeing(**options):
        arena = cudapmr.CoalescingResource(host, **options)
        first, second = arena.allocate_raw(8 << 20), arena.allocate_raw(8 << 20)  # a segment each
        arena.deallocate_raw(first, 8 << 20)
        arena.deallocate_raw(second, 8 << 20)
        held = host.state()["used_bytes"]
        released = arena.release_idle()
        return held, released, host.state()["used_bytes"]

    assert held_after_freeing() == (16 << 20, 16 << 20, 0)  # kept until release_idle
    assert held_after_freeing(max_idle_bytes=0) == (8 << 20, 8 << 20, 0)  # half the peak kept at the free
    arena = cudapmr.CoalescingResource(host)
    blocks = [arena.allocate_raw(8 << 20) for _ in range(4)]
    for block in blocks:
        arena.deallocate_raw(block, 8 << 20)
    assert arena.release_idle(keep=8 << 20) == 24 << 20 and host.state()["used_bytes"] == 8 << 20
    arena.release()


def test_limiting_adaptor_raises_out_of_memory_naming_the_request(host):
    limited = cudapmr.LimitingAdaptor(host, 1000)
    kept = limited.allocate_raw(800)
    with pytest.raises(cudapmr.OutOfMemoryError, match="300 bytes") as failure:
        limited.allocate_raw(300)
    assert isinstance(failure.value, MemoryError)
    assert failure.value.requested_bytes == 300
    assert "limiting_adaptor" in str(failure.value)
    limited.deallocate_raw(kept, 800)
    limited.deallocate_raw(limited.allocate_raw(300), 300)  # works again after exhaustion
    assert limited.used_bytes == 0 and limited.cap == 1000


def test_host_capacity_exhaustion(host):
    small = cudapmr.HostMemoryResource(capacity=64)
    with pytest.raises(cudapmr.OutOfMemoryError):
        small.allocate(65)


def test_tracking_adaptor_reports_leaks_and_bad_frees(host):
    tracked = cudapmr.TrackingAdaptor(host)
    pointer = tracked.allocate_raw(64)
    assert tracked.outstanding_count == 1 and tracked.outstanding_bytes == 64
    assert "64" in tracked.leak_report()
    with pytest.raises(cudapmr.MisuseError, match="wrong size"):
        tracked.deallocate_checked(pointer, 32)
    tracked.deallocate_checked(pointer, 64)
    with pytest.raises(cudapmr.MisuseError, match="double free"):
        tracked.deallocate_checked(pointer, 64)
    assert tracked.outstanding_count == 0


def test_tracking_adaptor_lists_what_is_outstanding_oldest_first(host):
    tracked = cudapmr.TrackingAdaptor(host, capture_call_stacks=True)
    first = tracked.allocate_raw(64)
    second = tracked.allocate_raw(100, stream=7, alignment=512)
    listed = tracked.outstanding()
    assert [(r["address"], r["bytes"], r["alignment"], r["stream"], r["sequence"]) for r in listed] == [
        (first, 64, 256, 0, 1), (second, 100, 512, 7, 2)]
    assert all(r["thread"] == listed[0]["thread"] and r["call_stack"] for r in listed)
    tracked.deallocate_raw(first, 64)
    assert [r["address"] for r in tracked.outstanding()] == [second]
    tracked.deallocate_raw(second, 100, stream=7, alignment=512)
    assert tracked.outstanding() == []


def test_history_adaptor_keeps_the_latest_events_and_named_regions(host):
    history = cudapmr.HistoryAdaptor(host, capacity=4)
    with history.annotate("phase"):
        pointer = history.allocate_raw(1000)
        history.deallocate_raw(pointer, 1000)
    events = history.events()
    assert [(e["action"], e["address"], e["bytes"], e["stream"]) for e in events] == [
        ("allocate", pointer, 1000, 0), ("free", pointer, 1000, 0), ("free_completed", pointer, 1000, 0)]
    assert [e["sequence"] for e in events] == [1, 2, 3] and events[0]["call_stack"] == []
    assert [(a["name"], a["stage"]) for a in history.annotations()] == [("phase", "begin"), ("phase", "end")]
    history.deallocate_raw(history.allocate_raw(8), 8)  # six events in a ring of four
    assert (history.capacity, history.recorded, history.dropped) == (4, 6, 2)
    assert [e["sequence"] for e in history.events()] == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="capacity of 1099511627776 events"):
        cudapmr.HistoryAdaptor(host, capacity=1 << 40)


def test_a_refusal_through_a_history_adaptor_carries_the_stacks_report():
    history = cudapmr.HistoryAdaptor(cudapmr.HostMemoryResource(capacity=1 << 20))
    kept = history.allocate_raw(4096)
    with pytest.raises(cudapmr.OutOfMemoryError) as refused:
        history.allocate_raw(2 << 20)
    assert refused.value.requested_bytes == 2 << 20
    assert refused.value.report.startswith("out-of-memory report: 2 MiB (2097152 bytes")
    assert "live: 4 KiB in 1 block\n" in refused.value.report and refused.value.report in str(refused.value)
    assert history.events()[-1]["action"] == "out_of_memory"
    history.deallocate_raw(kept, 4096)
    for rewording in (cudapmr.CachingResource(history), cudapmr.CoalescingResource(history)):
        with pytest.raises(cudapmr.OutOfMemoryError) as refused:  # each rewords the refusal for its own request
            rewording.allocate_raw(2 << 20)
        assert refused.value.report is not None and refused.value.report in str(refused.value)
    with pytest.raises(cudapmr.OutOfMemoryError) as unexplained:  # no history in the stack: no report
        cudapmr.LimitingAdaptor(cudapmr.HostMemoryResource(), 16).allocate_raw(64)
    assert unexplained.value.report is None


def test_snapshot_of_a_stack_in_each_format(host, tmp_path):
    import json
    import pickle
    history = cudapmr.HistoryAdaptor(cudapmr.CachingResource(host))
    counted = cudapmr.StatisticsAdaptor(history)
    with history.annotate("step"):
        live = counted.allocate_raw(3000)
    taken = cudapmr.snapshot(counted)
    assert taken["format"] == "cudapmr-memory-snapshot" and len(taken["stacks"]) == 1
    stack = taken["stacks"][0]
    assert [r["name"].split(" ")[0] for r in stack["resources"]] == [
        "statistics_adaptor", "history_adaptor", "caching_resource", "host_memory_resource"]
    assert stack["resources"][0]["statistics"]["bytes"]["current"] == 3000
    assert [(b["address"], b["bytes"]) for b in stack["live_blocks"]] == [(live, 3000)]
    assert [a["name"] for a in stack["annotations"]] == ["step", "step"]
    cudapmr.dump_snapshot(counted, tmp_path / "run.pickle")
    with open(tmp_path / "run.pickle", "rb") as file:
        pytorch = pickle.load(file)
    assert [(s["address"], s["total_size"]) for s in pytorch["segments"]] == [(live, 3000)]
    cudapmr.dump_snapshot(counted, str(tmp_path / "run.json"))
    assert json.loads((tmp_path / "run.json").read_text())["stacks"][0]["live_blocks"] == stack["live_blocks"]
    cudapmr.dump_snapshot(counted, tmp_path / "run.trace.json")
    assert "traceEvents" in json.loads((tmp_path / "run.trace.json").read_text())
    other = cudapmr.HistoryAdaptor(host)
    both = cudapmr.snapshot([counted, other])["stacks"]
    assert [s["resources"][0]["name"].split(" ")[0] for s in both] == ["statistics_adaptor", "history_adaptor"]
    (tmp_path / "kept.json").write_text("kept")
    with pytest.raises(ValueError, match="cannot tell the format of .*kept.txt"):
        cudapmr.dump_snapshot(counted, tmp_path / "kept.txt")
    assert not (tmp_path / "kept.txt").exists()
    with pytest.raises(ValueError, match='format "yaml" is none of'):
        cudapmr.dump_snapshot(counted, tmp_path / "kept.json", format="yaml")
    assert (tmp_path / "kept.json").read_text() == "kept"  # a refused format writes nothing
    counted.deallocate_raw(live, 3000)


def test_failure_callback_adaptor_retries_while_the_callback_makes_room():
    host = cudapmr.HostMemoryResource(capacity=1 << 20)
    forgotten = [host.allocate(900 << 10)]  # what a program still holds, say, in a cycle gc would collect
    told = []

    def make_room(failure):
        told.append(failure)
        if forgotten:
            forgotten.pop().close()
            return True
        return False

    second_chance = cudapmr.FailureCallbackAdaptor(host, make_room)
    granted = second_chance.allocate_raw(512 << 10)
    assert [(f["bytes"], f["attempt"], f["stream"]) for f in told] == [(512 << 10, 1, 0)]
    assert "could not allocate 524288 bytes" in told[0]["error"]
    with pytest.raises(cudapmr.OutOfMemoryError) as refused:  # nothing more to free: the refusal goes through
        second_chance.allocate_raw(900 << 10)
    assert refused.value.requested_bytes == 900 << 10 and told[-1]["attempt"] == 1
    second_chance.deallocate_raw(granted, 512 << 10)

    def broken(_failure):
        raise KeyError("the callback's own error")

    with pytest.raises(KeyError, match="the callback's own error"):
        cudapmr.FailureCallbackAdaptor(host, broken).allocate_raw(2 << 20)
    with pytest.raises(TypeError):
        cudapmr.FailureCallbackAdaptor(host, None)


def test_failure_callback_adaptor_serves_threads_and_passes_a_history_report_on():
    import threading
    import weakref
    capped = cudapmr.HostMemoryResource(capacity=4 << 20)
    history = cudapmr.HistoryAdaptor(capped)
    reports = []
    cache_above = None

    def trim_the_cache_above(failure):
        reports.append(failure["report"])
        cache = cache_of()
        if cache is None or failure["attempt"] > 1:
            return False
        cache.trim()  # what the cache keeps goes back, and the request is tried again
        return True

    second_chance = cudapmr.FailureCallbackAdaptor(history, trim_the_cache_above)
    cache_above = cudapmr.CachingResource(second_chance)
    cache_of = weakref.ref(cache_above)  # not the cache itself: a cycle through the callback is never collected

    def churn(size):
        for _ in range(50):
            block = cache_above.allocate_raw(size)
            cache_above.deallocate_raw(block, size)

    threads = [threading.Thread(target=churn, args=((1 + i % 3) << 20,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reports and all(r.startswith("out-of-memory report:") for r in reports)
    assert capped.state()["used_bytes"] == cache_above.statistics().cached_bytes  # nothing lost


def test_logging_adaptor_writes_csv(host, tmp_path):
    path = tmp_path / "log.csv"
    logged = cudapmr.LoggingAdaptor(host, str(path))
    logged.deallocate_raw(logged.allocate_raw(256), 256)
    logged.flush()
    lines = path.read_text().splitlines()
    assert lines[0].startswith("sequence,time_ns")
    assert [line.split(",")[3] for line in lines[1:]] == ["allocate", "deallocate"]


def test_adaptors_keep_their_upstream_alive():
    counted = cudapmr.StatisticsAdaptor(cudapmr.HostMemoryResource())
    gc.collect()
    with counted.allocate(16) as buffer:
        assert buffer.size == 16
    assert counted.upstream.kind == "pageable"


def test_negative_sizes_name_the_value(host):
    with pytest.raises(ValueError, match="allocate: nbytes -5 is negative"):
        host.allocate(-5)
    with pytest.raises(ValueError, match="allocate_raw: nbytes -1 is negative"):
        host.allocate_raw(-1)
    with pytest.raises(ValueError, match="deallocate_raw: nbytes -8 is negative"):
        host.deallocate_raw(0, -8)
    assert host.used_bytes == 0


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda h: cudapmr.HostMemoryResource(-1), "HostMemoryResource: capacity -1 is negative"),
        (lambda h: cudapmr.HostMemoryResource(1 << 70), r"capacity 1180591620717411303424 is past 2\*\*64 - 1"),
        (lambda h: cudapmr.LimitingAdaptor(h, -5), "LimitingAdaptor: cap -5 is negative"),
        (lambda h: cudapmr.HistoryAdaptor(h, capacity=-3), "HistoryAdaptor: capacity -3 is negative"),
        (lambda h: cudapmr.TrackingAdaptor(h, freed_history=-2), "TrackingAdaptor: freed_history -2 is negative"),
        (lambda h: cudapmr.CachingResource(h, max_cached_bytes=-9), "CachingResource: max_cached_bytes -9"),
        (lambda h: cudapmr.CachingResource(h, max_cached_block=-9), "CachingResource: max_cached_block -9"),
        (lambda h: cudapmr.CoalescingResource(h, max_idle_bytes=-9), "CoalescingResource: max_idle_bytes -9"),
        (lambda h: cudapmr.DeviceMemoryResourceOptions(max_size=-9), "max_size -9 is negative"),
        (lambda h: cudapmr.PinnedMemoryResourceOptions(initial_size=-9), "initial_size -9 is negative"),
        (lambda h: setattr(cudapmr.ManagedMemoryResourceOptions(), "release_threshold", -1),
         "release_threshold -1 is negative"),
        (lambda h: h.allocate(1 << 70), r"allocate: nbytes 1180591620717411303424 is past 2\*\*64 - 1"),
        (lambda h: h.allocate_raw(64, alignment=-256), "allocate_raw: alignment -256 is negative"),
    ],
)
def test_negative_and_too_large_counts_are_value_errors_naming_the_argument(host, make, named):
    # A std::size_t parameter gave nanobind's TypeError, naming neither the argument nor the value.
    with pytest.raises(ValueError, match=named):
        make(host)
    assert host.used_bytes == 0


def test_a_managed_pool_with_no_preferred_device_refuses_a_release_threshold():
    # Checked before CUDA is asked anything: such a pool keeps its pages (CUDA 13.0 lost what the
    # device wrote to memory it handed out again after releasing pages).
    options = cudapmr.ManagedMemoryResourceOptions(release_threshold=0)
    with pytest.raises(ValueError, match="release_threshold of 0 bytes needs a preferred_device"):
        cudapmr.ManagedMemoryResource(options)


def test_counts_take_other_integer_types_and_refuse_what_is_no_integer():
    np = needs("numpy")
    assert cudapmr.HostMemoryResource(np.int64(4096)).capacity == 4096
    for not_a_count in (4096.0, True, "4096"):
        with pytest.raises(TypeError):
            cudapmr.HostMemoryResource(not_a_count)

    class Refusing:
        def __index__(self):
            raise OverflowError("this count refuses to be read")

    with pytest.raises(OverflowError, match="refuses to be read"):  # its own error, not a mismatch of types
        cudapmr.HostMemoryResource(Refusing())


def test_fill_names_a_value_out_of_range(host):
    with host.allocate(64) as buffer:
        with pytest.raises(ValueError, match="fill: value -1 is negative"):
            buffer.fill(-1)
        with pytest.raises(ValueError, match="fill: value 8589934592 does not fit 4 bytes"):
            buffer.fill(1 << 33, 4)


def test_options_show_their_fields():
    assert repr(cudapmr.DeviceMemoryResourceOptions(max_size=4096)) == (
        "DeviceMemoryResourceOptions(initial_size=0, max_size=4096, release_threshold=18446744073709551615, "
        "ipc_enabled=False)")
    assert "numa_node=None" in repr(cudapmr.PinnedMemoryResourceOptions())
    assert "preferred_device=0" in repr(cudapmr.ManagedMemoryResourceOptions(preferred_device=0))


def test_logging_adaptor_takes_a_path_object(host, tmp_path):
    logged = cudapmr.LoggingAdaptor(host, tmp_path / "log.csv")
    logged.deallocate_raw(logged.allocate_raw(64), 64)
    logged.flush()
    assert len((tmp_path / "log.csv").read_text().splitlines()) == 3


def test_an_annotation_with_a_lone_surrogate_reads_as_replacement_characters(host):
    history = cudapmr.HistoryAdaptor(host)
    with history.annotate("step\ud800one"):
        pass
    names = [annotation["name"] for annotation in history.annotations()]
    assert names == ["step\ufffd\ufffd\ufffdone"] * 2  # as bytes.decode("utf-8", "replace") reads it


def test_a_snapshot_of_something_else_names_its_type(host, tmp_path):
    with pytest.raises(TypeError, match="snapshot: expected a MemoryResource or a list of them; got an object of "
                                        "type NoneType"):
        cudapmr.snapshot(None)
    with pytest.raises(TypeError, match="the list holds an object of type int"):
        cudapmr.dump_snapshot([host, 5], tmp_path / "s.json")
    assert not (tmp_path / "s.json").exists()


def test_the_stream_protocol_is_read_in_its_version_0_only():
    class Protocol:
        def __init__(self, answer):
            self.answer = answer

        def __cuda_stream__(self):
            return self.answer

    assert cudapmr.stream_handle(Protocol((0, 42))) == 42
    for answer in [(1, 42), (0, 42, 3), [0, 42], 42, (False, 42)]:
        with pytest.raises(ValueError, match=r"the CUDA stream protocol's version 0 gives a tuple \(0, handle\)"):
            cudapmr.stream_handle(Protocol(answer))


def _import_over_stand_ins(monkeypatch, plugin):
    """``cudapmr.<plugin>`` imported anew over the stand-ins the test put in
    ``sys.modules``; the test's end puts the module and the package's
    attribute back as they were, so no later test meets the stand-ins."""
    import importlib
    import sys

    name = f"cudapmr.{plugin}"
    monkeypatch.setitem(sys.modules, name, sys.modules.get(name))
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(cudapmr, plugin, getattr(cudapmr, plugin, None), raising=False)
    return importlib.import_module(name)


def test_cupy_pinned_allocator_refuses_pageable_memory(host, monkeypatch):
    # CuPy copies from a PinnedMemoryPointer as from page-locked memory; pageable memory would be staged.
    import sys
    import types

    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    plugin = _import_over_stand_ins(monkeypatch, "cupy")
    with pytest.raises(ValueError, match="pinned or managed memory; host_memory_resource is pageable memory"):
        plugin.pinned_allocator(host)
    with pytest.raises(ValueError, match="pinned or managed memory"):
        plugin.pinned_allocator(cudapmr.CachingResource(host))


def test_per_stream_statistics_are_refused_where_none_are_kept(host):
    # Zeros read as a stream that allocated nothing.
    counted = cudapmr.StatisticsAdaptor(host, per_stream=False)
    assert not counted.per_stream_counting
    counted.deallocate_raw(counted.allocate_raw(64, 7), 64, 7)
    assert counted.statistics().bytes.total == 64
    with pytest.raises(ValueError, match=r"counts no stream on its own \(per_stream=False\)"):
        counted.statistics(stream=7)
    assert cudapmr.StatisticsAdaptor(host).per_stream_counting


def test_buffers_are_weak_referenceable(host):
    import weakref

    buffer = host.allocate(64)
    reference = weakref.ref(buffer)
    assert reference() is buffer
    del buffer
    gc.collect()
    assert reference() is None and host.used_bytes == 0


def test_stream_arguments_take_other_integer_types():
    np = needs("numpy")
    assert cudapmr.stream_handle(np.int64(42)) == 42
    assert cudapmr.stream_handle(np.uint64(7)) == 7


def test_dlpack_stream_values(host):
    with host.allocate(4) as buffer:  # pageable memory: every stream value is accepted and ignored
        for stream in (None, -1, 1, 2, 1 << 70):
            assert "dltensor" in repr(buffer.__dlpack__(stream=stream))


def test_dlpack_stream_that_names_no_stream_is_refused_even_for_pageable_memory(host):
    with host.allocate(4) as buffer:
        with pytest.raises(TypeError, match="str"):
            buffer.__dlpack__(stream="x")
        assert "dltensor" in repr(buffer.__dlpack__())  # the buffer is still whole


def torch_entry_points():
    """cudapmr_torch_malloc and cudapmr_torch_free, loaded as CUDAPluggableAllocator does with library_path()."""
    import ctypes

    library = ctypes.CDLL(cudapmr._cudapmr.__file__)
    malloc, free = library.cudapmr_torch_malloc, library.cudapmr_torch_free
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    return malloc, free


def test_torch_entry_points_load_from_the_module_and_use_the_registered_resource():
    malloc, free = torch_entry_points()
    assert malloc(64, 5, None) is None  # nothing registered for device 5
    assert "device 5" in cudapmr._cudapmr._torch_last_error()
    host = cudapmr.HostMemoryResource(capacity=1024)
    cudapmr._cudapmr._torch_set_resource(5, host)
    try:
        pointer = malloc(512, 5, None)
        assert pointer and host.used_bytes == 512
        assert malloc(4096, 5, None) is None and "4096 bytes" in cudapmr._cudapmr._torch_last_error()
        free(pointer, 512, 5, None)
        assert host.used_bytes == 0
    finally:
        cudapmr._cudapmr._torch_set_resource(5, None)
    assert malloc(64, 5, None) is None


def test_torch_free_returns_memory_to_the_resource_that_allocated_it():
    malloc, free = torch_entry_points()
    first, second = cudapmr.HostMemoryResource(), cudapmr.HostMemoryResource()
    cudapmr._cudapmr._torch_set_resource(6, first)
    try:
        early = malloc(512, 6, None)
        cudapmr._cudapmr._torch_set_resource(6, second)  # blocks of the first are still out
        late = malloc(256, 6, None)
        assert (first.used_bytes, second.used_bytes) == (512, 256)
        free(early, 512, 6, None)
        assert (first.used_bytes, second.used_bytes) == (0, 256)
        cudapmr._cudapmr._torch_set_resource(6, None)
        free(late, 256, 6, None)  # after unregistering too
        assert second.used_bytes == 0
        free(late, 256, 6, None)  # a second free of the block reaches no resource
        assert second.used_bytes == 0 and "not allocated by cudapmr_torch_malloc" in cudapmr._cudapmr._torch_last_error()
    finally:
        cudapmr._cudapmr._torch_set_resource(6, None)


def test_torch_hooks_count_record_stream_and_refuse_a_bad_fraction():
    import ctypes

    malloc, free = torch_entry_points()
    library = ctypes.CDLL(cudapmr._cudapmr.__file__)
    record = library.cudapmr_torch_record_stream
    record.restype, record.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p]
    fraction = library.cudapmr_torch_set_memory_fraction
    fraction.restype, fraction.argtypes = None, [ctypes.c_double, ctypes.c_int]
    host = cudapmr.HostMemoryResource()
    cudapmr._cudapmr._torch_set_resource(63, host)  # a device no machine has
    try:
        pointer = malloc(512, 63, None)
        record(pointer, None)  # the stream it was allocated on: nothing to wait for
        assert cudapmr._cudapmr._torch_bridge_state(63)["blocks_used_on_other_streams"] == 0
        per_thread = 2  # cudaStreamPerThread: a stream handle valid with or without a GPU
        record(pointer, per_thread)
        record(pointer, per_thread)  # once is enough
        record(0x10, per_thread)  # not handed out here: ignored
        state = cudapmr._cudapmr._torch_bridge_state(63)
        assert (state["bytes"], state["peak_bytes"], state["blocks"], state["blocks_used_on_other_streams"]) == (
            512, 512, 1, 1)
        # No order can be built on streams of a device that does not exist (nor, with no GPU, on
        # any stream): the free still happens.
        free(pointer, 512, 63, None)
        assert host.used_bytes == 0 and cudapmr._cudapmr._torch_bridge_state(63)["bytes"] == 0
        cudapmr._cudapmr._torch_reset_peak(63)
        assert cudapmr._cudapmr._torch_bridge_state(63)["peak_bytes"] == 0
        fraction(1.5, 63)
        assert "memory fraction 1.5" in cudapmr._cudapmr._torch_last_error()
        assert cudapmr._cudapmr._torch_bridge_state(63)["memory_fraction"] == 1.0
    finally:
        cudapmr._cudapmr._torch_set_resource(63, None)
    with pytest.raises(ValueError, match="device 99"):
        cudapmr._cudapmr._torch_bridge_state(99)


def test_torch_statistics_answer_under_pytorchs_keys():
    from cudapmr import _torch_stats as stats

    malloc, free = torch_entry_points()
    host = cudapmr.HostMemoryResource(capacity=4096)
    cudapmr._cudapmr._torch_set_resource(61, host)  # a device no machine has
    try:
        first, second = malloc(1000, 61, None), malloc(2000, 61, None)
        assert malloc(5000, 61, None) is None  # past the capacity: refused
        free(first, 1000, 61, None)
        got = stats.memory_stats(61)
        for name in ("allocated_bytes", "active_bytes", "requested_bytes"):
            assert [got[f"{name}.all.{k}"] for k in ("current", "peak", "allocated", "freed")] == [2000, 3000, 3000, 1000]
        for name in ("allocation", "active"):
            assert [got[f"{name}.all.{k}"] for k in ("current", "peak", "allocated", "freed")] == [1, 2, 2, 1]
        assert got["num_ooms"] == 1
        stats.reset_peak_memory_stats(61)
        got = stats.memory_stats(61)
        assert (got["allocation.all.peak"], got["allocated_bytes.all.peak"]) == (1, 2000)
        stats.reset_accumulated_memory_stats("cuda:61")
        got = stats.memory_stats(61)
        assert (got["allocation.all.allocated"], got["allocated_bytes.all.freed"], got["num_ooms"]) == (0, 0, 0)
        assert got["allocation.all.current"] == 1  # what is alive stays counted
        free(second, 2000, 61, None)
    finally:
        cudapmr._cudapmr._torch_set_resource(61, None)
    with pytest.raises(ValueError, match="'cpu'"):
        stats.memory_stats("cpu")


def test_torch_snapshot_lists_the_live_blocks_and_the_recorded_history_in_pytorchs_format(tmp_path):
    import pickle

    from cudapmr import _torch_stats as stats

    malloc, free = torch_entry_points()
    host = cudapmr.HostMemoryResource(capacity=4096)
    cudapmr._cudapmr._torch_set_resource(60, host)
    try:
        untraced = malloc(100, 60, None)  # before the history: listed alive, not in the trace
        stats.record_memory_history(max_entries=100)
        first, second = malloc(1000, 60, None), malloc(2000, 60, None)
        assert malloc(5000, 60, None) is None
        free(first, 1000, 60, None)
        taken = stats.snapshot(60)
        assert {"segments", "device_traces", "external_annotations"} <= taken.keys()
        blocks = [(b["address"], b["size"], b["state"]) for s in taken["segments"] for b in s["blocks"]]
        assert blocks == [(untraced, 100, "active_allocated"), (second, 2000, "active_allocated")]
        assert all(s["device"] == 60 and s["total_size"] == s["blocks"][0]["size"] for s in taken["segments"])
        trace = taken["device_traces"][60]
        assert [(e["action"], e["size"]) for e in trace] == [
            ("segment_alloc", 1000), ("alloc", 1000), ("segment_alloc", 2000), ("alloc", 2000), ("oom", 5000),
            ("free_requested", 1000), ("free_completed", 1000), ("segment_free", 1000)]
        assert [e["addr"] for e in trace if e["action"] == "alloc"] == [first, second]
        assert stats.memory_snapshot() == stats.snapshot()["segments"] == taken["segments"]
        path = tmp_path / "snapshot.pickle"
        stats.dump_snapshot(str(path))
        with open(path, "rb") as file:
            assert pickle.load(file)["device_traces"][60] == trace
        oom = next(e for e in trace if e["action"] == "oom")
        assert oom["device_free"] == 0  # a device no machine has: CUDA cannot say
        stats.record_memory_history(max_entries=2)  # keeps the last two events: the refusal and the free
        assert [e["action"] for e in stats.snapshot(60)["device_traces"][60]] == [
            "oom", "free_requested", "free_completed", "segment_free"]
        stats.record_memory_history(max_entries=2, clear_history=True)  # on, with nothing kept
        assert stats.snapshot(60)["device_traces"][60] == []
        stats.record_memory_history(True, trace_alloc_max_entries=10)  # PyTorch's older form
        again = malloc(10, 60, None)
        free(again, 10, 60, None)
        assert len(stats.snapshot(60)["device_traces"][60]) == 5
        stats.record_memory_history(enabled=None)  # off: the history goes, the live blocks stay
        taken = stats.snapshot(60)
        assert taken["device_traces"][60] == [] and len(taken["segments"]) == 2
        free(second, 2000, 60, None)
        free(untraced, 100, 60, None)
        assert stats.snapshot(60)["segments"] == []
    finally:
        stats.record_memory_history(enabled=None)
        cudapmr._cudapmr._torch_set_resource(60, None)
    for bad in ({"enabled": "sometimes"}, {"enabled": 1}, {"context": "frames"}, {"stacks": "rust"},
                {"max_entries": 0}):
        with pytest.raises(ValueError, match=repr(next(iter(bad.values())))):
            stats.record_memory_history(**bad)
    with pytest.raises(ValueError, match="device 64"):
        stats.snapshot(64)
    with pytest.raises(ValueError, match="device -1"):
        stats.snapshot(-1)


def test_torch_init_hook_marks_the_current_allocator_and_until_then_a_refusal_is_null():
    """PyTorch initializes only its current allocator, with the device count;
    until then (as in a MemPool) a refusal hands PyTorch a null to retry on.
    From then on a refusal throws instead, which only PyTorch's C++ frames can
    catch (the GPU scenarios see it). Run in a child: the mark is for the
    whole process."""
    run_child("torch_routes.py", "init_hook")


def test_install_allocators_refuses_what_it_cannot_install(host):
    with pytest.raises(ValueError, match="tensorflow"):
        cudapmr.install_allocators(host, frameworks=["tensorflow"])
    with pytest.raises(ValueError, match=r"\['tensorflow'\]"):  # one name, not a list of its letters
        cudapmr.install_allocators(host, frameworks="tensorflow")
    with pytest.raises(ValueError, match="device-accessible"):
        cudapmr.install_allocators(host, device_id=0)
    with pytest.raises(TypeError, match="cudapmr resource"):
        cudapmr.install_allocators(object())
    with pytest.raises(ValueError, match="device-accessible"):  # said before any device is asked for
        cudapmr.install_allocators(host)


def test_numba_memory_manager_speaks_emm_version_1_and_refuses_host_memory(host):
    plugin = pytest.importorskip("cudapmr.numba", reason="needs numba-cuda")
    manager = plugin.memory_manager()
    assert manager(context=None).interface_version == 1  # what numba.cuda.set_memory_manager checks first
    with pytest.raises(ValueError, match="device-accessible"):
        plugin.memory_manager(host)
    with pytest.raises(TypeError, match="cudapmr resource"):
        plugin.memory_manager(object())


def test_bad_alignment_names_the_value(host):
    with pytest.raises(ValueError, match="alignment 3"):
        host.allocate_raw(10, alignment=3)


def test_options_objects():
    options = cudapmr.DeviceMemoryResourceOptions(max_size=1 << 20, initial_size=4096)
    assert options.max_size == 1 << 20 and options.initial_size == 4096 and not options.ipc_enabled
    managed = cudapmr.ManagedMemoryResourceOptions(preferred_device=0)
    assert managed.preferred_device == 0
    assert cudapmr.PinnedMemoryResourceOptions().max_size == 0


@no_gpu
def test_without_a_gpu_cuda_resources_say_so():
    assert cudapmr.device_count() == 0
    for make in (lambda: cudapmr.DeviceMemoryResource(0), cudapmr.PinnedMemoryResource,
                 cudapmr.ManagedMemoryResource, lambda: cudapmr.default_device_resource(0), lambda: cudapmr.Stream(0),
                 cudapmr.current_device, cudapmr.default_pinned_resource, cudapmr.default_managed_resource):
        with pytest.raises(cudapmr.CudaError, match="no CUDA device was found"):
            make()
    with pytest.raises(cudapmr.CudaError, match="no CUDA device was found") as refused:
        cudapmr.synchronize_device(0)
    assert "cudaGetDevice(" not in str(refused.value)  # the device named, not the line that asked


def test_host_numa_topology_is_listed_and_pages_are_located():
    nodes = cudapmr.host_numa_nodes()
    assert nodes and nodes == sorted(nodes) and all(node >= 0 for node in nodes)
    assert cudapmr.ANY_NUMA_NODE == -1
    written = bytearray(b"\x01" * (1 << 16))
    address = ctypes.addressof((ctypes.c_char * len(written)).from_buffer(written)) + 8192
    node = cudapmr.numa_node_of(address)
    if node is None:
        pytest.skip("the kernel does not report where pages are here (move_pages refused)")
    assert node in nodes


def test_pinned_options_refuse_a_numa_node_the_machine_lacks_before_any_cuda_call():
    options = cudapmr.PinnedMemoryResourceOptions(numa_node=9999)
    assert options.numa_node == 9999
    assert cudapmr.PinnedMemoryResourceOptions().numa_node is None
    with pytest.raises(ValueError, match="NUMA node 9999 is not one this process may use"):
        cudapmr.PinnedMemoryResource(options)
    with pytest.raises(ValueError, match="NUMA node 9999 is not one this process may use"):
        cudapmr.PinnedMemoryResource(numa_node=9999)  # the option as a keyword
    with pytest.raises(ValueError, match="numa_node=0 and options.numa_node=9999 name different nodes"):
        cudapmr.PinnedMemoryResource(options, numa_node=0)


class _ReachableHost(cudapmr.HostMemoryResource):
    """Host memory that says it is device-accessible: a plug-in's checks pass without a GPU."""

    is_device_accessible = True


def _stand_in_torch(monkeypatch, *, makes_allocators):
    """A torch whose CUDAPluggableAllocator is made (or refused) and whose
    change_current_allocator refuses, as PyTorch's does once its allocator has allocated."""
    import sys
    import types

    class Pluggable:
        def __init__(self, path, malloc_name, free_name):
            if not makes_allocators:
                raise RuntimeError("no pluggable allocator (stand-in)")

        def allocator(self):
            return object()

    def change_current_allocator(allocator):
        raise RuntimeError("Can't swap an already initialized allocator")

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(CUDAPluggableAllocator=Pluggable,
                                                                    change_current_allocator=change_current_allocator))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return _import_over_stand_ins(monkeypatch, "torch")


@pytest.mark.parametrize("refused_at", ["allocator", "install"])
def test_a_refused_torch_allocator_leaves_the_devices_resource_as_it_was(monkeypatch, refused_at):
    # A MemPool over an earlier allocator() draws from the device's registered resource: a refusal must not swap it.
    from cudapmr import _cudapmr
    from cudapmr._frameworks import _install_torch

    plugin = _stand_in_torch(monkeypatch, makes_allocators=refused_at != "allocator")
    device = 61  # a slot no GPU of this machine uses
    first, second = _ReachableHost(), _ReachableHost()
    _cudapmr._torch_set_resource(device, first)
    try:
        with pytest.raises(RuntimeError, match="stand-in" if refused_at == "allocator" else "already initialized"):
            if refused_at == "allocator":
                plugin.allocator(second, device_id=device)
            else:
                _install_torch(second, device)
        assert _cudapmr._torch_resource(device) is first
    finally:
        _cudapmr._torch_set_resource(device, None)


def _stand_in_cupy(monkeypatch):
    """A cupy with streams, a current device that ``cupy.cuda.Device`` switches,
    and the memory classes the plug-in makes; returns the plug-in and the
    current stream and device (one-element lists the test changes)."""
    import contextlib
    import sys
    import types

    class Stream:
        def __init__(self, handle):
            self.ptr = handle

    class UnownedMemory:
        def __init__(self, ptr, size, owner, device_id=-1):
            self.ptr, self.owner = ptr, owner

    class MemoryPointer:
        def __init__(self, memory, offset):
            self.mem = memory

    current_stream, current_device = [Stream(0)], [0]

    @contextlib.contextmanager
    def device(ordinal):
        previous, current_device[0] = current_device[0], ordinal
        try:
            yield
        finally:
            current_device[0] = previous

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: current_stream[0], UnownedMemory=UnownedMemory,
                                      MemoryPointer=MemoryPointer, Device=device, Stream=Stream,
                                      runtime=types.SimpleNamespace(getDevice=lambda: current_device[0]))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return _import_over_stand_ins(monkeypatch, "cupy"), current_stream, current_device


def test_cupy_memory_keeps_the_stream_it_is_freed_on_alive(monkeypatch):
    # CuPy destroys a Stream once it is collected; a free on its handle after that would use a dead stream.
    import weakref

    plugin, current_stream, _ = _stand_in_cupy(monkeypatch)
    allocate = plugin.allocator(_ReachableHost())
    Stream = type(current_stream[0])
    current_stream[0] = Stream(0x1234)
    memory = allocate(4096)
    stream = weakref.ref(current_stream[0])
    current_stream[0] = Stream(0)
    gc.collect()
    assert stream() is not None, "the stream the block is freed on was collected while the block is live"
    del memory
    gc.collect()
    assert stream() is None, "the block's free kept its stream alive for good"


def test_cupy_memory_is_freed_with_its_streams_device_current(monkeypatch):
    # CuPy's null stream is handle 0, which CUDA reads as the current device's legacy stream.
    plugin, _, current_device = _stand_in_cupy(monkeypatch)
    seen = []

    class Recording(_ReachableHost):
        def deallocate_raw(self, address, size, stream=None):
            seen.append((current_device[0], stream))
            super().deallocate_raw(address, size, stream)

    memory = plugin.allocator(Recording())(4096)  # on device 0's null stream
    current_device[0] = 1
    del memory
    gc.collect()
    assert seen == [(0, 0)], seen
    assert current_device[0] == 1


def test_numba_refuses_device_memory_of_another_device_for_a_context(monkeypatch):
    # Numba makes one manager per context: device 0's memory in device 1's kernels is an illegal address.
    import sys
    import types

    class HostOnlyCUDAMemoryManager:
        def __init__(self, *args, **kwargs):
            self.context = kwargs["context"]

    driver = types.ModuleType("numba.cuda.cudadrv.driver")
    driver.HostOnlyCUDAMemoryManager = HostOnlyCUDAMemoryManager
    driver.MemoryInfo = driver.MemoryPointer = object
    for name in ("numba", "numba.cuda", "numba.cuda.cudadrv"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv.driver", driver)
    plugin = _import_over_stand_ins(monkeypatch, "numba")

    class DeviceZero(_ReachableHost):
        kind = "device"
        device_id = 0
        description = "device memory of device 0 (stand-in)"

    def context_on(device):
        return types.SimpleNamespace(device=types.SimpleNamespace(id=device))

    manager = plugin.memory_manager(DeviceZero())
    manager(context=context_on(0)).initialize()
    with pytest.raises(ValueError, match="device memory of device 0 .* holds memory of device 0, and Numba's "
                                         "context is on device 1"):
        manager(context=context_on(1)).initialize()
    managed = _ReachableHost()  # kind "pageable" here: memory any device may serve is not refused
    plugin.memory_manager(managed)(context=context_on(1)).initialize()
