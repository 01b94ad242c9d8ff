# SPDX-License-Identifier: Apache-2.0
"""Random programs over Buffers, checked against a model: allocate, fill,
copy to and from host objects and other Buffers, export through DLPack to a
consumer (NumPy, CuPy, PyTorch), write through the export, drop it, close,
release the resource's cache; several threads at once, each with its own
Buffers, and all of them over a few Buffers they share (which any of them
may close while another copies). Checked: no crash, contents as written,
the StatisticsAdaptor on top counting exactly the Buffers still open or
exported, and nothing live once all is dropped.

Hypothesis settings: the profile named by CUDAPMR_HYPOTHESIS_PROFILE, "ci"
(the default: 100 examples a test), "quick" (25: a GPU machine lent for
minutes) or "long"."""

import gc
import os
import sys
import threading

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("quick", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=20000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("CUDAPMR_HYPOTHESIS_PROFILE", "ci"))

SIZES = [1, 7, 64, 256, 4096, 65536, (1 << 20) + 3]
SLOTS = 4
SHARED = 3
SHARED_SIZE = 4096
_PATTERN = bytes(range(256))


def pattern(seed, size):
    """`size` bytes that differ from one `seed` to another."""
    turns = size // 256 + 2
    return (_PATTERN * turns)[seed % 256:seed % 256 + size]


slot = st.integers(0, SLOTS - 1)
byte = st.integers(0, 255)
operation = st.one_of(
    st.tuples(st.just("allocate"), slot, st.sampled_from(SIZES)),
    st.tuples(st.just("fill"), slot, byte),
    st.tuples(st.just("copy_from"), slot, byte),
    st.tuples(st.just("copy_to"), slot),
    st.tuples(st.just("copy_between"), slot, slot),
    st.tuples(st.just("export"), slot),
    st.tuples(st.just("write_export"), slot, byte),
    st.tuples(st.just("drop_export"), slot),
    st.tuples(st.just("close"), slot),
    st.tuples(st.just("release")),
    st.tuples(st.just("shared"), st.integers(0, SHARED - 1),
              st.sampled_from(["fill", "copy_to", "copy_from", "export", "close"]), byte),
)


def programs(threads):
    """One list of operations per thread, for `threads` threads (an int or a strategy)."""
    count = threads if isinstance(threads, st.SearchStrategy) else st.just(threads)
    return count.flatmap(lambda n: st.lists(st.lists(operation, max_size=20), min_size=n, max_size=n))


class Allocation:
    """One Buffer's memory as the model sees it: its bytes (None until
    written) and the consumer's arrays over it, which outlive the Buffer."""

    def __init__(self, buffer, size):
        self.buffer = buffer
        self.size = size
        self.content = None
        self.arrays = []

    @property
    def live(self):
        return self.buffer is not None or bool(self.arrays)


class Program:
    """Runs one thread's operations on its own slots and on the shared Buffers."""

    def __init__(self, resource, consumer, shared):
        self.resource = resource
        self.consumer = consumer
        self.shared = shared
        self.slots = {}
        self.closed = []  # allocations whose arrays outlive their Buffer

    def allocations(self):
        return list(self.slots.values()) + self.closed

    def close(self, index):
        allocation = self.slots.pop(index, None)
        if allocation is None:
            return
        allocation.buffer.close()
        allocation.buffer = None
        if allocation.arrays:
            self.closed.append(allocation)

    def check(self, allocation):
        if allocation.content is None:
            return
        if allocation.buffer is not None:
            out = bytearray(allocation.size)
            allocation.buffer.copy_to(out)
            assert out == allocation.content, "a Buffer's bytes differ from those written"
        for array in allocation.arrays:
            assert self.consumer.read(array) == allocation.content, "an export's bytes differ from those written"

    def run(self, operations):
        for name, *arguments in operations:
            getattr(self, "do_" + name)(*arguments)

    def do_allocate(self, index, size):
        self.close(index)
        self.slots[index] = Allocation(self.resource.allocate(size), size)

    def do_fill(self, index, value):
        if allocation := self.slots.get(index):
            allocation.buffer.fill(value)
            allocation.content = bytes([value]) * allocation.size

    def do_copy_from(self, index, seed):
        if allocation := self.slots.get(index):
            data = pattern(seed, allocation.size)
            allocation.buffer.copy_from(data)
            allocation.content = data

    def do_copy_to(self, index):
        if allocation := self.slots.get(index):
            self.check(allocation)

    def do_copy_between(self, source_index, destination_index):
        source, destination = self.slots.get(source_index), self.slots.get(destination_index)
        if source and destination and source.size == destination.size:
            destination.buffer.copy_from(source.buffer)
            destination.content = source.content

    def do_export(self, index):
        if allocation := self.slots.get(index):
            allocation.arrays.append(self.consumer.take(allocation.buffer))
            self.check(allocation)

    def do_write_export(self, index, value):
        allocation = self.slots.get(index) or next((a for a in self.closed if a.arrays), None)
        if allocation and allocation.arrays:
            self.consumer.write(allocation.arrays[-1], value)
            allocation.content = bytes([value]) * allocation.size
            self.check(allocation)

    def do_drop_export(self, index):
        exported = [allocation for allocation in self.allocations() if allocation.arrays]
        if exported:
            allocation = exported[index % len(exported)]
            self.check(allocation)
            allocation.arrays.pop()
        self.closed = [allocation for allocation in self.closed if allocation.arrays]

    def do_close(self, index):
        allocation = self.slots.get(index)
        self.close(index)
        if allocation is not None:
            self.check(allocation)

    def do_release(self):
        release = getattr(self.resource.upstream, "release", None)
        if release is not None:
            release()

    def do_shared(self, index, action, value):
        """Whatever another thread does to the same Buffer: only a closed Buffer may refuse."""
        buffer = self.shared[index]
        try:
            if action == "fill":
                buffer.fill(value)
            elif action == "copy_to":
                buffer.copy_to(bytearray(SHARED_SIZE))
            elif action == "copy_from":
                buffer.copy_from(pattern(value, SHARED_SIZE))
            elif action == "export":
                array = self.consumer.take(buffer)
                assert len(self.consumer.read(array)) == SHARED_SIZE
                del array
            else:
                buffer.close()
        except ValueError as refused:
            assert "closed" in str(refused), refused


def live_bytes(allocations):
    return sum(allocation.size for allocation in allocations if allocation.live)


def check_after_join(counted, runners, shared):
    """Contents as written, and the statistics count exactly the Buffers open or exported."""
    allocations = [allocation for runner in runners for allocation in runner.allocations()]
    for allocation in allocations:
        runners[0].check(allocation)
    open_shared = sum(buffer.is_open for buffer in shared)
    statistics = counted.statistics()
    assert statistics.bytes.current == live_bytes(allocations) + SHARED_SIZE * open_shared, statistics
    assert statistics.allocations.current == sum(a.live for a in allocations) + open_shared, statistics


def check_programs(counted, consumer, thread_programs, bottom=None):
    """Runs `thread_programs` (one list of operations per thread) at once on
    `counted` (a StatisticsAdaptor) and checks the model; then drops all and
    checks that nothing is live (and, after a release, that `bottom`, the host
    resource, holds nothing)."""
    shared = [counted.allocate(SHARED_SIZE) for _ in range(SHARED)]
    runners = [Program(counted, consumer, shared) for _ in thread_programs]
    failures = []
    start = threading.Barrier(len(runners))

    def run(runner, operations):
        try:
            start.wait()
            runner.run(operations)
        except BaseException as failure:  # re-raised on the main thread
            failures.append(failure)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(runners, thread_programs)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads interleave between operations, not only at GIL-free calls
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    if failures:
        raise failures[0]

    check_after_join(counted, runners, shared)

    for buffer in shared:
        buffer.close()
    for runner in runners:
        for index in list(runner.slots):
            runner.close(index)
        runner.closed.clear()
    runners.clear()
    gc.collect()
    consumer.settle()
    statistics = counted.statistics()
    assert (statistics.bytes.current, statistics.allocations.current) == (0, 0), statistics
    release = getattr(counted.upstream, "release", None)
    if release is not None:
        release()
    if bottom is not None:
        assert bottom.used_bytes == 0, bottom.used_bytes


class NumpyConsumer:
    def __init__(self, numpy):
        self.numpy = numpy

    def take(self, buffer):
        return self.numpy.from_dlpack(buffer)

    def read(self, array):
        return array.tobytes()

    def write(self, array, value):
        array[:] = value

    def settle(self):
        pass
