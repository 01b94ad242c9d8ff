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

A refused allocation returns null to PyTorch. In a ``MemPool`` PyTorch frees
its cached blocks, retries and then raises ``torch.OutOfMemoryError``; after
``change_current_allocator`` PyTorch does not check, so leave headroom (or
use a pool). The cudapmr message is on stderr and in ``last_error()``.
"""

import torch as _torch

from . import _cudapmr

__all__ = ["allocator", "library_path", "MALLOC_NAME", "FREE_NAME", "last_error"]

MALLOC_NAME = "cudapmr_torch_malloc"
FREE_NAME = "cudapmr_torch_free"

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
    _cudapmr._torch_set_resource(device_id, resource)
    return _torch.cuda.memory.CUDAPluggableAllocator(library_path(), MALLOC_NAME, FREE_NAME)
