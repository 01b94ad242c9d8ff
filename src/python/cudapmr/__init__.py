# SPDX-License-Identifier: Apache-2.0
"""cudapmr from Python: CUDA memory kinds as memory resources, adaptors,
stream-ordered buffers with DLPack, and plug-ins for cuda.core
(``cudapmr.cuda_core``), CuPy (``cudapmr.cupy``), PyTorch (``cudapmr.torch``)
and Numba (``cudapmr.numba``).

    import cudapmr
    cache = cudapmr.CachingResource(cudapmr.DeviceMemoryResource(0))
    with cache.allocate(1 << 20, stream=stream) as buffer:
        array = cupy.from_dlpack(buffer)  # owns a share: valid after the block, freed when dropped
"""

from ._cudapmr import (
    ANY_NUMA_NODE,
    Buffer,
    CacheStatistics,
    CachingResource,
    CoalescingResource,
    CoalescingStatistics,
    CudaError,
    DeviceMallocResource,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    DeviceStack,
    FailureCallbackAdaptor,
    HistoryAdaptor,
    HostMemoryResource,
    LimitingAdaptor,
    LoggingAdaptor,
    ManagedMemoryResource,
    ManagedMemoryResourceOptions,
    MemoryResource,
    MisuseError,
    OutOfMemoryError,
    PinnedMemoryResource,
    PinnedMemoryResourceOptions,
    PoolResource,
    PoolStatistics,
    ResourceAdaptor,
    ResourceStatistics,
    StatisticsAdaptor,
    Stream,
    StreamStatistics,
    TrackingAdaptor,
    UsageCounter,
    VirtualMemoryResource,
    __version__,
    compute_capability,
    current_device,
    default_device_resource,
    default_device_stack,
    default_managed_resource,
    default_pinned_resource,
    device_attribute,
    device_memory_info,
    device_count,
    device_name,
    host_numa_nodes,
    nearest_numa_node,
    numa_node_of,
    stream_handle,
    synchronize_device,
)
from ._current import get_current_device_resource, set_current_device_resource
from ._frameworks import install_allocators
from ._snapshots import dump_snapshot, snapshot

OutOfMemoryError.report = None  # the text of the stack's state, where a HistoryAdaptor explained the refusal

__all__ = [name for name in dir() if not name.startswith("_")] + ["__version__"]
