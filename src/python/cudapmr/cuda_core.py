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
    from cuda.core import Stream as _CoreStream
except ImportError:  # pragma: no cover - depends on the installed cuda.core
    from cuda.core.experimental import Buffer as _CoreBuffer
    from cuda.core.experimental import MemoryResource as _CoreMemoryResource
    from cuda.core.experimental import Stream as _CoreStream

from . import _cudapmr
from ._cudapmr import MemoryResource as _CudapmrResource
from ._cudapmr import stream_handle

__all__ = ["MemoryResource"]


def _handle_of(stream):
    """cuda.core passes its Stream (``__cuda_stream__``) or None; a caller may pass any stream cudapmr takes."""
    return None if stream is None else stream_handle(stream)


class MemoryResource(_CoreMemoryResource):
    """A cuda.core ``MemoryResource`` whose memory comes from ``resource``
    (any cudapmr resource; by default the process's ``default_device_stack``
    of the current device). A Buffer allocated on a cuda.core ``Stream`` is
    freed on that stream unless ``close`` names another (cuda.core 1.2 and
    later); a deallocation with no stream frees on the legacy default stream."""

    def __init__(self, resource=None):
        if resource is None:
            resource = _cudapmr.default_device_stack(_cudapmr.current_device())
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
        handle = _handle_of(stream)
        pointer = self._allocate(size, handle)
        try:
            return self._buffer(pointer, size, stream)
        except BaseException:
            self._deallocate(pointer, size, handle)
            raise

    def _buffer(self, pointer, size, stream):
        """A cuda.core Buffer owning `pointer`, freed on `stream` where cuda.core records one."""
        if isinstance(stream, _CoreStream):
            try:
                return _CoreBuffer.from_handle(pointer, size, mr=self, stream=stream)
            except TypeError as refused:  # cuda.core before 1.2 records no deallocation stream
                if "stream" not in str(refused):
                    raise
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
    def is_managed(self):
        return self._resource.kind == "managed"

    @property
    def device_id(self):
        return self._resource.device_id

    def __repr__(self):
        return f"<cudapmr.cuda_core.MemoryResource over {self._resource.description}>"
