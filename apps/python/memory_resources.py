#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""NVIDIA's memoryResources sample on cudapmr: the scale_and_bias kernel
(data[i] = data[i] * scale + bias) over

1. a device buffer with pinned staging in and out (scale 3, bias -0.5),
2. managed memory written and read by the host with no explicit copy (scale 0.5, bias 10),
3. an explicit, owned device pool (scale 1, bias 100),

printing the sample's output; every element is checked. Needs NumPy and CuPy
(the kernel is a CuPy ElementwiseKernel over DLPack views of cudapmr buffers).
Exit status: 0 all checks passed, 1 a check failed, 2 it cannot run here.
"""

import argparse
import sys

import cudapmr

SCALE_AND_BIAS = None


def kernel():
    global SCALE_AND_BIAS
    if SCALE_AND_BIAS is None:
        import cupy

        SCALE_AND_BIAS = cupy.ElementwiseKernel("float32 scale, float32 bias", "float32 data",
                                                "data = data * scale + bias", "scale_and_bias")
    return SCALE_AND_BIAS


def input_values(np, elements):
    """Values whose results are exactly representable, so results compare for equality."""
    return ((np.arange(elements, dtype=np.int64) % 4096) - 2048).astype(np.float32) * np.float32(0.25)


def host_view(np, buffer):
    """A NumPy float32 view of a host-accessible buffer (DLPack, no copy)."""
    return np.from_dlpack(buffer).view(np.float32)


def device_view(cupy, buffer):
    """A CuPy float32 view of a device-accessible buffer: DLPack where CuPy
    takes the device type, else the same address wrapped without a copy."""
    try:
        return cupy.from_dlpack(buffer).view(cupy.float32)
    except (BufferError, TypeError, ValueError, RuntimeError):
        memory = cupy.cuda.UnownedMemory(buffer.handle, buffer.size, buffer, max(buffer.device_id, 0))
        return cupy.ndarray((buffer.size // 4,), cupy.float32, cupy.cuda.MemoryPointer(memory, 0))


def scale_and_bias(cupy, buffer, scale, bias, stream):
    with cupy.cuda.ExternalStream(stream.handle):
        values = device_view(cupy, buffer)
        kernel()(cupy.float32(scale), cupy.float32(bias), values)
        del values


def verify(np, section, results, elements, scale, bias):
    expected = input_values(np, elements) * np.float32(scale) + np.float32(bias)
    wrong = np.nonzero(results != expected)[0]
    if wrong.size:
        index = int(wrong[0])
        raise AssertionError(f"section {section}: index {index}: expected {expected[index]}, got {results[index]}")


def device_with_pinned_staging(np, cupy, device, elements):
    print("[1] DeviceMemoryResource + PinnedMemoryResource (staging)")
    stream = cudapmr.Stream(device)
    nbytes = elements * 4
    on_device = cudapmr.get_current_device_resource(device).allocate(nbytes, stream=stream)
    pinned = cudapmr.PinnedMemoryResource()
    staging_in = pinned.allocate(nbytes, stream=stream)
    staging_out = pinned.allocate(nbytes, stream=stream)
    stream.synchronize()
    host_view(np, staging_in)[:] = input_values(np, elements)
    on_device.copy_from(staging_in, stream=stream)
    scale_and_bias(cupy, on_device, 3.0, -0.5, stream)
    on_device.copy_to(staging_out, stream=stream)
    stream.synchronize()
    verify(np, 1, host_view(np, staging_out), elements, 3.0, -0.5)
    for buffer in (on_device, staging_in, staging_out):
        buffer.close(stream)
    stream.synchronize()
    print("  Pinned staging, device kernel, and copy_to verified\n")


def managed_memory(np, cupy, device, elements):
    print("[2] ManagedMemoryResource (unified memory)")
    stream = cudapmr.Stream(device)
    managed = cudapmr.ManagedMemoryResource(cudapmr.ManagedMemoryResourceOptions(preferred_device=device))
    with managed.allocate(elements * 4, stream=stream) as unified:
        stream.synchronize()
        host_view(np, unified)[:] = input_values(np, elements)
        concurrent_managed_access = 89  # cudaDevAttrConcurrentManagedAccess
        prefetch = cudapmr.device_attribute(device, concurrent_managed_access) != 0
        if prefetch:
            unified.prefetch_to_device(device, stream=stream)
        scale_and_bias(cupy, unified, 0.5, 10.0, stream)
        if prefetch:
            unified.prefetch_to_host(stream=stream)
        stream.synchronize()
        verify(np, 2, host_view(np, unified), elements, 0.5, 10.0)
        unified.close(stream)
    stream.synchronize()
    print("  GPU writes observed directly through the host-visible mapping\n")


def explicit_device_pool(np, cupy, device, elements):
    print("[3] Explicit DeviceMemoryResource")
    stream = cudapmr.Stream(device)
    nbytes = elements * 4
    owned = cudapmr.DeviceMemoryResource(device, cudapmr.DeviceMemoryResourceOptions(initial_size=nbytes))
    host = input_values(np, elements)
    with owned.allocate(nbytes, stream=stream) as on_device:
        on_device.copy_from(host, stream=stream)
        scale_and_bias(cupy, on_device, 1.0, 100.0, stream)
        on_device.copy_to(host, stream=stream)
        stream.synchronize()
        verify(np, 3, host, elements, 1.0, 100.0)
        on_device.close(stream)
    stream.synchronize()
    print("  Explicit DeviceMemoryResource allocation verified\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=65536, help="floats per buffer (default 65536)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    arguments = parser.parse_args()
    if arguments.elements <= 0:
        print(f"--elements {arguments.elements}: need at least one element", file=sys.stderr)
        return 2
    try:
        import cupy
        import numpy as np
    except ImportError as missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    if cudapmr.device_count() == 0:
        print("cannot run: no CUDA device was found", file=sys.stderr)
        return 2
    if not 0 <= arguments.device < cudapmr.device_count():
        print(f"--device {arguments.device}: there are {cudapmr.device_count()} devices", file=sys.stderr)
        return 2
    device = arguments.device
    cupy.cuda.Device(device).use()
    major, minor = cudapmr.compute_capability(device)
    print(f"Device: {cudapmr.device_name(device)}")
    print(f"Compute Capability: {major}.{minor}\n")
    try:
        device_with_pinned_staging(np, cupy, device, arguments.elements)
        managed_memory(np, cupy, device, arguments.elements)
        explicit_device_pool(np, cupy, device, arguments.elements)
    except AssertionError as failure:
        print(f"check failed: {failure}", file=sys.stderr)
        return 1
    except cudapmr.OutOfMemoryError as failure:
        print(f"cannot run: {failure}", file=sys.stderr)
        return 2
    print("All memory resource demos passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
