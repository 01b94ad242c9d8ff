# SPDX-License-Identifier: Apache-2.0
"""``python -m cudapmr``: the version and the devices cudapmr sees."""

import cudapmr

print(f"cudapmr {cudapmr.__version__}")
count = cudapmr.device_count()
print(f"CUDA devices: {count}")
for device in range(count):
    major, minor = cudapmr.compute_capability(device)
    print(f"  {device}: {cudapmr.device_name(device)} (compute capability {major}.{minor})")
