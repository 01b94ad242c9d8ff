# SPDX-License-Identifier: Apache-2.0
"""PyTorch plug-in: cudapmr resources behind PyTorch's CUDA allocator hooks.

``allocator(resource)`` registers ``resource`` for its device and returns a
``torch.cuda.memory.CUDAPluggableAllocator`` over the C entry points
``cudapmr_torch_malloc`` and ``cudapmr_torch_free``, which the native module
exports. Use it for one pool, or for the whole process:

    allocator = cudapmr.torch.allocator(cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)))
    pool = torch.cuda.MemPool(allocator.allocator())
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(1 << 20, device="cuda")

    # or, before PyTorch allocates anything on the GPU:
    torch.cuda.memory.change_current_allocator(allocator)

PyTorch allocates and frees in stream order on its current stream, which is
what cudapmr's stream-ordered resources expect. One resource serves a
device's new allocations at a time; registering another leaves the blocks of
the first to be freed into the first. A registered resource lives until the
process ends, since PyTorch may free into it as late as the interpreter's
shutdown.

As the current allocator, the hooks PyTorch offers are set and act on the
registered resources:

- ``Tensor.record_stream(s)``: the block is freed only once the work queued
  on ``s`` up to the free is done as well (on a side stream that waits for
  both, so the freeing stream waits for nothing);
- ``torch.cuda.empty_cache()``: every registered resource gives back what it
  holds unused (``trim``), after the device's work is done;
- ``torch.cuda.set_per_process_memory_fraction(f, d)``: the blocks of device
  ``d`` may hold at most ``f`` of its memory; past it allocations are refused.

PyTorch's own statistics, snapshot and history calls raise with a
pluggable current allocator; here ``memory_stats``,
``memory_allocated``, ``max_memory_allocated``, ``memory_reserved``,
``max_memory_reserved``, ``reset_peak_memory_stats``,
``reset_accumulated_memory_stats`` and ``memory_fraction`` answer under
PyTorch's names and keys, from the bridge's counts and the registered
resource's ``state()``; ``_record_memory_history``, ``_snapshot``,
``memory_snapshot`` and ``_dump_snapshot`` (also without the underscore)
keep and write the bridge's history and blocks in PyTorch's snapshot format,
which its viewer opens.

A refused allocation leaves cudapmr's message on stderr and in
``last_error()``. Where the allocator ``allocator()`` returns is PyTorch's
current one, it then raises ``torch.OutOfMemoryError`` where memory ran out
(the resource's refusal, the memory fraction) and ``RuntimeError`` for any
other failure (no resource registered, a CUDA error): the bridge throws
PyTorch's own C++ error, found in the c10 library PyTorch loaded. In a
``MemPool`` it returns null, and PyTorch raises ``torch.OutOfMemoryError``
itself after its own retries.
"""

import ctypes as _ctypes

import torch as _torch

from . import _cudapmr
from ._torch_stats import (_dump_snapshot, _record_memory_history, _snapshot, dump_snapshot, max_memory_allocated,
                           max_memory_reserved, memory_allocated, memory_fraction, memory_reserved, memory_snapshot,
                           memory_stats, record_memory_history, reset_accumulated_memory_stats,
                           reset_peak_memory_stats, snapshot)

__all__ = ["allocator", "library_path", "MALLOC_NAME", "FREE_NAME", "last_error", "memory_stats", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
           "reset_accumulated_memory_stats", "memory_fraction", "record_memory_history", "snapshot",
           "memory_snapshot", "dump_snapshot", "_record_memory_history", "_snapshot", "_dump_snapshot"]

MALLOC_NAME = "cudapmr_torch_malloc"
FREE_NAME = "cudapmr_torch_free"

# PyTorch's optional hooks: the setter on its allocator object, and the entry point here.
_HOOKS = (
    ("set_init_fn", "cudapmr_torch_init"),
    ("set_record_stream_fn", "cudapmr_torch_record_stream"),
    ("set_reset_fn", "cudapmr_torch_empty_cache"),
    ("set_memory_fraction_fn", "cudapmr_torch_set_memory_fraction"),
)

def library_path():
    """The shared library that exports the entry points (the native module)."""
    return _cudapmr.__file__


def last_error():
    """The message of the last allocation the entry points refused ("" if none)."""
    return _cudapmr._torch_last_error()


def allocator(resource=None, device_id=None):
    """Registers ``resource`` for ``device_id`` (default: the resource's
    device, else the current one) and returns a CUDAPluggableAllocator over it.
    With no resource, the process's ``default_device_stack`` of that device."""
    if resource is None:
        if device_id is None:
            device_id = _cudapmr.current_device()
        resource = _cudapmr.default_device_stack(device_id)
    if not isinstance(resource, _cudapmr.MemoryResource):
        raise TypeError(f"cudapmr.torch.allocator needs a cudapmr resource, not {type(resource).__name__}")
    if not resource.is_device_accessible:
        raise ValueError(f"cudapmr.torch.allocator needs device-accessible memory; {resource.description} is not")
    if device_id is None:  # not torch.cuda.current_device(): that initializes PyTorch's allocator
        device_id = resource.device_id if resource.device_id >= 0 else _cudapmr.current_device()
    pluggable = _torch.cuda.memory.CUDAPluggableAllocator(library_path(), MALLOC_NAME, FREE_NAME)
    _set_hooks(pluggable.allocator())
    # Last: an allocator PyTorch refused to make leaves the device's registration as it was.
    _cudapmr._torch_set_resource(device_id, resource)
    return pluggable


def _set_hooks(hooks):
    """Sets each hook this PyTorch offers; one it lacks is left alone."""
    library = _ctypes.CDLL(library_path())
    for setter, entry_point in _HOOKS:
        if hasattr(hooks, setter):
            getattr(hooks, setter)(_ctypes.cast(getattr(library, entry_point), _ctypes.c_void_p).value)
