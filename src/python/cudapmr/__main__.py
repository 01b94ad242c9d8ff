# SPDX-License-Identifier: Apache-2.0
"""``python -m cudapmr``: the version, the devices cudapmr sees, the host
NUMA node nearest each, and where the default pinned pool's pages are."""

import cudapmr

print(f"cudapmr {cudapmr.__version__}")
count = cudapmr.device_count()
print(f"CUDA devices: {count}")
for device in range(count):
    major, minor = cudapmr.compute_capability(device)
    nearest = cudapmr.nearest_numa_node(device)
    node = "unknown" if nearest is None else nearest
    print(f"  {device}: {cudapmr.device_name(device)} (compute capability {major}.{minor}, nearest NUMA node {node})")
print(f"host NUMA nodes: {', '.join(str(node) for node in cudapmr.host_numa_nodes())}")
if count:
    pinned = cudapmr.PinnedMemoryResource()
    where = "the kernel chooses" if pinned.numa_node is None else f"NUMA node {pinned.numa_node}"
    print(f"default pinned pool: {where}" + (f" ({pinned.placement_note})" if pinned.placement_note else ""))
