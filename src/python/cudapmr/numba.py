# SPDX-License-Identifier: Apache-2.0
"""Numba plug-in: numba-cuda's External Memory Management (EMM) interface
over a cudapmr resource, so that device arrays made by Numba draw from it.

    import numba.cuda, cudapmr.numba
    numba.cuda.set_memory_manager(cudapmr.numba.memory_manager())        # the default stack
    numba.cuda.set_memory_manager(cudapmr.numba.memory_manager(cache))   # any device-accessible resource

or, with no code, ``NUMBA_CUDA_MEMORY_MANAGER=cudapmr.numba`` (the default
stack of each context's device). Either must come before Numba makes its
first context. Numba's pinned and mapped host memory stay Numba's own.

EMM (version 1) has no streams: each block is allocated and freed in order on
the legacy default stream, Numba's default stream, which every blocking
stream (Numba's ``cuda.stream()`` included) waits for and is waited for by,
so a kernel on any of them sees the block allocated and a free waits for the
kernels queued before it. Work on a non-blocking stream that uses a block
must be synchronized before the array is dropped. A block is freed when Numba
drops its last reference (at garbage collection, or in Numba's deferred
cleanup).
"""

import ctypes as _ctypes

from numba.cuda.cudadrv.driver import HostOnlyCUDAMemoryManager as _HostOnlyCUDAMemoryManager
from numba.cuda.cudadrv.driver import MemoryInfo as _MemoryInfo
from numba.cuda.cudadrv.driver import MemoryPointer as _MemoryPointer

from . import _cudapmr

__all__ = ["memory_manager"]


def _release(resource, address, size):
    """The finalizer of one block: it keeps the resource alive, not the Numba objects."""

    def release():
        resource.deallocate_raw(address, size, stream=None)

    return release


def memory_manager(resource=None):
    """A class for ``numba.cuda.set_memory_manager`` whose device allocations
    come from ``resource`` (any device-accessible cudapmr resource; by
    default the process's ``default_device_stack`` of each context's device)."""
    if resource is not None:
        if not isinstance(resource, _cudapmr.MemoryResource):
            raise TypeError(f"cudapmr.numba.memory_manager needs a cudapmr resource, not {type(resource).__name__}")
        if not resource.is_device_accessible:
            raise ValueError(f"cudapmr.numba.memory_manager needs device-accessible memory; {resource.description} is not")
    chosen = resource

    class CudapmrMemoryManager(_HostOnlyCUDAMemoryManager):
        """Numba's device memory from a cudapmr resource (see ``cudapmr.numba``)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._resource = chosen

        @property
        def resource(self):
            """The cudapmr resource behind this context's device memory."""
            if self._resource is None:
                self._resource = _cudapmr.default_device_stack(self.context.device.id)
            return self._resource

        def initialize(self):
            resource = self.resource  # binds the default stack of the context's device once
            device = self.context.device.id
            # Device memory serves its own device's kernels only (managed and pinned memory serve every device).
            if resource.kind == "device" and resource.device_id != device:
                raise ValueError(f"cudapmr.numba.memory_manager: {resource.description} holds memory of device "
                                 f"{resource.device_id}, and Numba's context is on device {device}")

        def memalloc(self, size):
            resource = self.resource
            nbytes = max(size, 1)  # a real address even for an empty array
            address = resource.allocate_raw(nbytes, stream=None)
            return _MemoryPointer(self.context, _ctypes.c_void_p(address), size,
                                  finalizer=_release(resource, address, nbytes))

        def get_memory_info(self):
            free, total = _cudapmr.device_memory_info(self.context.device.id)
            return _MemoryInfo(free=free, total=total)

        def get_ipc_handle(self, memory):
            raise NotImplementedError(
                "cudapmr.numba does not export memory through Numba's IPC handles (a block of a cudapmr stack is "
                "part of a larger mapping); share it with cudapmr's own IPC (cudapmr::multiprocess) instead")

        def reset(self):
            super().reset()
            if self._resource is not None:
                self._resource.trim(stream=None)

        @property
        def interface_version(self):
            return 1

    return CudapmrMemoryManager


# NUMBA_CUDA_MEMORY_MANAGER=cudapmr.numba: the default stack of each context's device.
_numba_memory_manager = memory_manager()
