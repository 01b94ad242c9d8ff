# SPDX-License-Identifier: Apache-2.0
"""cuda.core plug-in: a ``cuda.core`` memory resource backed by any cudapmr
resource, so that ``Buffer`` objects made by cuda.core code draw from cudapmr.

    from cudapmr.cuda_core import MemoryResource
    mr = MemoryResource(cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0)))
    buffer = mr.allocate(1 << 20, stream=device.default_stream)   # a cuda.core Buffer
"""

try:  # cuda.core 0.4 and later export it at the top; older ones under experimental
    from cuda.core import Buffer as _CoreBuffer
    from cuda.core import MemoryResource as _CoreMemoryResource
except ImportError:  # pragma: no cover - depends on the installed cuda.core
    from cuda.core.experimental import Buffer as _CoreBuffer
    from cuda.core.experimental import MemoryResource as _CoreMemoryResource

from ._cudapmr import MemoryResource as _CudapmrResource
from ._cudapmr import stream_handle

__all__ = ["MemoryResource"]


def _handle_of(stream):
    """cuda.core passes its Stream (``__cuda_stream__``) or None; pointers may be ints or CUdeviceptr."""
    return None if stream is None else stream_handle(stream)


class MemoryResource(_CoreMemoryResource):
    """A cuda.core ``MemoryResource`` whose memory comes from ``resource``
    (any cudapmr resource). A deallocation with no stream frees on the
    legacy default stream, which orders it after work queued there."""

    def __init__(self, resource):
        if not isinstance(resource, _CudapmrResource):
            raise TypeError(f"cudapmr.cuda_core.MemoryResource needs a cudapmr resource, not {type(resource).__name__}")
        super().__init__()
        self._resource = resource
        self._allocate = resource.allocate_raw
        self._deallocate = resource.deallocate_raw

    @property
    def resource(self):
        """The cudapmr resource behind this one."""
        return self._resource

    def allocate(self, size, stream=None):
        pointer = self._allocate(size, _handle_of(stream))
        return _CoreBuffer.from_handle(pointer, size, mr=self)

    def deallocate(self, ptr, size, stream=None):
        self._deallocate(int(ptr), size, _handle_of(stream))

    @property
    def is_device_accessible(self):
        return self._resource.is_device_accessible

    @property
    def is_host_accessible(self):
        return self._resource.is_host_accessible

    @property
    def device_id(self):
        return self._resource.device_id

    def __repr__(self):
        return f"<cudapmr.cuda_core.MemoryResource over {self._resource.description}>"
