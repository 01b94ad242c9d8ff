# SPDX-License-Identifier: Apache-2.0
"""CuPy plug-in: allocators for ``cupy.cuda.set_allocator`` and
``cupy.cuda.set_pinned_memory_allocator`` drawing from cudapmr resources.

    cupy.cuda.set_allocator(cudapmr.cupy.allocator(cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0))))
    cupy.cuda.set_pinned_memory_allocator(cudapmr.cupy.pinned_allocator(cudapmr.default_pinned_resource()))

Each allocation is made in stream order on CuPy's current stream and freed
on that same stream when CuPy drops its last reference to the memory.
"""

import cupy as _cupy

from ._cudapmr import MemoryResource as _CudapmrResource
from ._cudapmr import default_device_stack as _default_device_stack

__all__ = ["allocator", "pinned_allocator"]


class _Allocation:
    """Memory CuPy holds: freed on its stream when the last reference goes."""

    __slots__ = ("ptr", "size", "device_id", "_stream", "_stream_owner", "_stream_device", "_deallocate")

    def __init__(self, resource, size, stream, stream_owner=None, stream_device=-1):
        self.ptr = 0  # what __del__ sees if the allocation raises
        self.ptr = resource.allocate_raw(size, stream)
        self.size = size
        self.device_id = resource.device_id
        self._stream = stream
        # CuPy destroys a Stream once it is collected: the free's stream is kept alive until the free.
        self._stream_owner = stream_owner
        # CuPy's null stream is handle 0, the current device's: its device is made current for the free.
        self._stream_device = stream_device
        self._deallocate = resource.deallocate_raw

    def __del__(self):
        if not self.ptr:
            return
        if self._stream_device >= 0 and _cupy.cuda.runtime.getDevice() != self._stream_device:
            with _cupy.cuda.Device(self._stream_device):
                self._deallocate(self.ptr, self.size, self._stream)
        else:
            self._deallocate(self.ptr, self.size, self._stream)
        self.ptr = 0


def _require(resource, what):
    if not isinstance(resource, _CudapmrResource):
        raise TypeError(f"cudapmr.cupy.{what} needs a cudapmr resource, not {type(resource).__name__}")


def allocator(resource=None):
    """A function for ``cupy.cuda.set_allocator``: ``nbytes`` -> a
    ``cupy.cuda.MemoryPointer`` into memory of ``resource`` (device or managed;
    by default the process's ``default_device_stack`` of the device current at each allocation)."""
    if resource is None:
        return _default_stack_allocator()
    _require(resource, "allocator")
    if not resource.is_device_accessible:
        raise ValueError(f"cudapmr.cupy.allocator needs device-accessible memory; {resource.description} is not")
    get_stream = _cupy.cuda.get_current_stream
    unowned = _cupy.cuda.UnownedMemory
    pointer = _cupy.cuda.MemoryPointer

    def allocate(nbytes):
        current = _cupy.cuda.runtime.getDevice()  # the device of CuPy's current stream
        device = resource.device_id if resource.device_id >= 0 else current
        stream = get_stream()
        allocation = _Allocation(resource, nbytes, stream.ptr, stream, current)
        return pointer(unowned(allocation.ptr, nbytes, allocation, device), 0)

    allocate.resource = resource
    return allocate


def _default_stack_allocator():
    """``allocator()`` with no resource: each device's default stack, looked up
    at each allocation from CuPy's current device (``set_allocator`` applies to
    every device)."""
    get_device = _cupy.cuda.runtime.getDevice
    per_device = {}

    def allocate(nbytes):
        device = get_device()
        inner = per_device.get(device)
        if inner is None:
            inner = per_device[device] = allocator(_default_device_stack(device))
        return inner(nbytes)

    allocate.resource = _default_device_stack(get_device())
    return allocate


def pinned_allocator(resource):
    """A function for ``cupy.cuda.set_pinned_memory_allocator``: ``nbytes`` ->
    a ``cupy.cuda.PinnedMemoryPointer`` into host-accessible memory of
    ``resource`` (pinned or managed), ready for the host when returned."""
    _require(resource, "pinned_allocator")
    if resource.kind not in ("pinned", "managed"):  # pageable memory would make CuPy's async copies stage
        raise ValueError(f"cudapmr.cupy.pinned_allocator needs pinned or managed memory; {resource.description} is "
                         f"{resource.kind} memory")
    pinned_pointer = _cupy.cuda.PinnedMemoryPointer

    def allocate(nbytes):
        # On the legacy default stream, then waited for: the host writes at once.
        allocation = _Allocation(resource, nbytes, 0)
        _cupy.cuda.runtime.streamSynchronize(0)
        return pinned_pointer(allocation, 0)

    allocate.resource = resource
    return allocate
