# SPDX-License-Identifier: Apache-2.0
"""A Buffer closed by another thread while a copy or fill of it runs without
the GIL: the call must keep the memory until it returns. Run as
``python close_during_call.py SCENARIO`` in a child process, since without
that guarantee the call writes to unmapped memory and the process dies; the
child prints ``ok`` when every check held, else it raises; it exits with
UNAVAILABLE where the kernel refuses userfaultfd.

The memory is large enough (64 MiB) that the host resource's allocator maps
it for itself and unmaps it at the free; the call is stopped at its first
touch of a fresh page (userfaultfd) while the helper thread closes."""

import gc
import sys

from userfault import PauseOnTouch, Region, Unavailable

import cudapmr

UNAVAILABLE = 3  # conftest.UNAVAILABLE
SIZE = 64 << 20
PAGE = 4096


def stack():
    host = cudapmr.HostMemoryResource()
    return host, cudapmr.StatisticsAdaptor(host)


def live_bytes(counted):
    return counted.statistics().bytes.current


def close_while_touched(counted, address, call, *buffers):
    """Runs ``call()``, which first touches memory at ``address``; on that
    touch, closes ``buffers`` from the helper thread and checks that their
    memory is still live. Returns what the helper saw."""
    seen = {}

    def on_touch():
        for buffer in buffers:
            buffer.close()
        seen["closed"] = all(not buffer.is_open for buffer in buffers)
        seen["live_during_call"] = live_bytes(counted)

    pause = PauseOnTouch(address, SIZE - PAGE, on_touch)
    call()
    pause.join()
    return seen


def expect(seen, live_during_call, counted):
    gc.collect()
    assert seen["closed"], seen
    assert seen["live_during_call"] == live_during_call, (seen, live_during_call)
    assert live_bytes(counted) == 0, live_bytes(counted)


def copy_from_host_object():
    _, counted = stack()
    buffer = counted.allocate(SIZE)
    source = Region(SIZE)  # the copy waits on reading its first page
    seen = close_while_touched(counted, source.address, lambda: buffer.copy_from(source.view), buffer)
    expect(seen, SIZE, counted)


def copy_to_host_object():
    _, counted = stack()
    buffer = counted.allocate(SIZE)
    destination = Region(SIZE)
    seen = close_while_touched(counted, destination.address, lambda: buffer.copy_to(destination.view), buffer)
    expect(seen, SIZE, counted)


def copy_between_buffers():
    _, counted = stack()
    source, destination = counted.allocate(SIZE), counted.allocate(SIZE)
    # The source's fresh pages: the copy waits on reading the first whole one.
    seen = close_while_touched(counted, source.handle + PAGE, lambda: destination.copy_from(source), source,
                               destination)
    expect(seen, 2 * SIZE, counted)


def copy_to_new_buffer():
    _, counted = stack()
    source = counted.allocate(SIZE)
    copies = []
    seen = close_while_touched(counted, source.handle + PAGE, lambda: copies.append(source.copy_to()), source)
    assert copies[0].is_open and copies[0].size == SIZE
    copies.clear()
    expect(seen, 2 * SIZE, counted)  # the source, kept by the copy, and the new Buffer


def fill():
    _, counted = stack()
    buffer = counted.allocate(SIZE)
    seen = close_while_touched(counted, buffer.handle + PAGE, lambda: buffer.fill(0x5A), buffer)
    expect(seen, SIZE, counted)


SCENARIOS = {function.__name__: function for function in (copy_from_host_object, copy_to_host_object,
                                                          copy_between_buffers, copy_to_new_buffer, fill)}

if __name__ == "__main__":
    try:
        SCENARIOS[sys.argv[1]]()
    except Unavailable as refused:
        print(refused)
        sys.exit(UNAVAILABLE)
    print("ok")
