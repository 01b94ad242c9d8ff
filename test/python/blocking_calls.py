# SPDX-License-Identifier: Apache-2.0
"""Calls into cudapmr that block must not hold the GIL. Run as
``python blocking_calls.py SCENARIO`` in a child process; it prints ``ok``,
or, deadlocked, the watchdog dumps every thread's stack and exits 1; it exits
with UNAVAILABLE where a device scenario finds no CUDA runtime to call.

A LoggingAdaptor writes to a FIFO whose pipe holds one page, read by a
Python thread: each write of the log's buffer (several pages) returns only
after that thread has read, between reads, with the GIL. Each scenario
makes one kind of call write the log, so a call that blocks with the GIL
held deadlocks, as one waiting for the device would with a pending host
callback that needs the GIL. The device scenarios show that case itself:
a host function that needs the GIL is queued on the stream a
DeviceMallocResource frees on, and the free waits for it."""

import ctypes
import faulthandler
import fcntl
import gc
import os
import sys
import tempfile
import threading
import time

import cudapmr

UNAVAILABLE = 3  # conftest.UNAVAILABLE
DEADLOCK_SECONDS = 60  # a watchdog only: each scenario takes well under a second
PAGE = 4096
LOG_BUFFER = 4 * PAGE
COUNT = 2000  # events of one kind: some 40 writes of the log's buffer
_SET_PIPE_SIZE = 1031  # F_SETPIPE_SZ


class FifoLog:
    """A LoggingAdaptor over the host resource, logging into a FIFO that a Python thread reads."""

    def __init__(self, directory, buffer_bytes):
        path = os.path.join(directory, "log")
        os.mkfifo(path)
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # so that the writer's open does not wait
        fcntl.fcntl(self._fd, _SET_PIPE_SIZE, PAGE)
        self.host = cudapmr.HostMemoryResource()
        self.logged = cudapmr.LoggingAdaptor(self.host, path, buffer_bytes=buffer_bytes)
        os.set_blocking(self._fd, True)
        self.bytes_read = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while chunk := os.read(self._fd, PAGE):
            self.bytes_read += len(chunk)

    def drain(self):
        """Writes what the log holds, so that the next scenario's calls write their own."""
        self.logged.flush()


def allocate_and_close(log):
    buffers = [log.logged.allocate(64) for _ in range(COUNT)]
    log.drain()
    for buffer in buffers:
        buffer.close()


def allocate_and_exit(log):
    buffers = [log.logged.allocate(64) for _ in range(COUNT)]
    log.drain()
    for buffer in buffers:
        with buffer:
            pass


def dropped(log):
    buffers = [log.logged.allocate(64) for _ in range(COUNT)]
    log.drain()
    del buffers  # each Buffer is freed as it is deallocated
    gc.collect()


def copy_to_new_buffers(log):
    source = log.logged.allocate(64)
    copies = [source.copy_to() for _ in range(COUNT)]
    log.drain()
    del copies
    source.close()


def raw(log):
    pointers = [log.logged.allocate_raw(64) for _ in range(COUNT)]
    log.drain()
    for pointer in pointers:
        log.logged.deallocate_raw(pointer, 64)


def deallocate_checked(log):
    tracked = cudapmr.TrackingAdaptor(log.logged)
    pointers = [tracked.allocate_raw(64) for _ in range(COUNT)]
    log.drain()
    for pointer in pointers:
        tracked.deallocate_checked(pointer, 64)


def consumer_lets_go(log):
    import numpy

    buffers = [log.logged.allocate(64) for _ in range(COUNT)]
    arrays = [numpy.from_dlpack(buffer) for buffer in buffers]
    for buffer in buffers:
        buffer.close()
    log.drain()
    del arrays  # the last shares: the consumer's deleter frees


def flush(log):
    """With a log buffer that holds every event: only flush() writes."""
    pointers = [log.logged.allocate_raw(64) for _ in range(COUNT)]
    for pointer in pointers:
        log.logged.deallocate_raw(pointer, 64)
    log.drain()


def caching_release(log):
    cache = cudapmr.CachingResource(log.logged)
    pointers = [cache.allocate_raw(64 << (index % 8)) for index in range(COUNT)]
    for index, pointer in enumerate(pointers):
        cache.deallocate_raw(pointer, 64 << (index % 8))
    log.drain()
    cache.release()


def coalescing_release(log):
    arena = cudapmr.CoalescingResource(log.logged)
    sizes = [(2 << 20) + 1] * (COUNT // 4)  # one segment each, never touched
    pointers = [arena.allocate_raw(size) for size in sizes]
    for pointer, size in zip(pointers, sizes):
        arena.deallocate_raw(pointer, size)
    log.drain()
    arena.release()


HOST_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Unavailable(RuntimeError):
    """No CUDA runtime library to queue a host function with."""


def launch_host_function():
    """cudaLaunchHostFunc, called with the GIL held (PyDLL), as the code that follows it runs."""
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for name in (os.path.join(home, "lib64", "libcudart.so"), "libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            launch = ctypes.PyDLL(name).cudaLaunchHostFunc
        except OSError:
            continue
        launch.argtypes, launch.restype = [ctypes.c_void_p, HOST_FUNCTION, ctypes.c_void_p], ctypes.c_int
        return launch
    raise Unavailable("no libcudart found to queue a host function with")


def free_behind_a_host_function(free):
    """Queues a Python host function on the stream, then runs ``free(resource, held, stream)``,
    which frees the one Buffer in ``held``, a list, on that stream."""
    launch = launch_host_function()
    stream = cudapmr.Stream(0)
    resource = cudapmr.DeviceMallocResource(0)
    held = [resource.allocate(1 << 20, stream=stream)]
    ran = []

    def record(_):
        time.sleep(0.2)  # widens the window in which the free waits for this function
        ran.append(True)

    callback = HOST_FUNCTION(record)
    status = launch(int(stream), callback, None)
    assert status == 0, f"cudaLaunchHostFunc: error {status}"
    free(resource, held, stream)
    stream.synchronize()
    assert ran == [True] and resource.allocated_bytes == 0, (ran, resource.allocated_bytes)


def device_close(_):
    free_behind_a_host_function(lambda resource, held, stream: held.pop().close())


def device_exit(_):
    def leave(resource, held, stream):
        with held.pop():
            pass
    free_behind_a_host_function(leave)


def device_dropped(_):
    free_behind_a_host_function(lambda resource, held, stream: held.clear())


def device_consumer_lets_go(_):
    def let_go(resource, held, stream):
        capsule = held[0].__dlpack__(stream=-1)
        held.pop().close()
        del capsule  # the last share
    free_behind_a_host_function(let_go)


SCENARIOS = {function.__name__: function for function in (
    device_close, device_exit, device_dropped, device_consumer_lets_go,
    allocate_and_close, allocate_and_exit, dropped, copy_to_new_buffers, raw, deallocate_checked, consumer_lets_go,
    flush, caching_release, coalescing_release)}
WHOLE_LOG = 1 << 30

if __name__ == "__main__":
    faulthandler.dump_traceback_later(DEADLOCK_SECONDS, exit=True)
    scenario = sys.argv[1]
    if scenario.startswith("device_"):
        try:
            SCENARIOS[scenario](None)
        except Unavailable as missing:
            print(missing)
            sys.exit(UNAVAILABLE)
    else:
        with tempfile.TemporaryDirectory() as directory:
            log = FifoLog(directory, WHOLE_LOG if scenario == "flush" else LOG_BUFFER)
            SCENARIOS[scenario](log)
            log.drain()
            assert log.host.used_bytes == 0, log.host.used_bytes
    print("ok")
