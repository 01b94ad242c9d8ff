# SPDX-License-Identifier: Apache-2.0
"""Numba on cudapmr, in a child process (Numba takes its memory manager
before its first context): ``python numba_plugin.py SCENARIO`` prints ``ok``,
fails with an assertion, or exits with UNAVAILABLE where numba-cuda or a GPU
is missing."""

import gc
import sys

UNAVAILABLE = 3  # conftest.UNAVAILABLE


def kernels_on_a_counted_stack():
    """Arrays Numba makes come from the counted stack; a kernel reads and
    writes them; dropping them frees into the stack."""
    try:
        import numpy

        # NumPy 2.5 dropped `row_stack`, its old alias of `vstack`, which
        # numba-cuda 0.30's typing still registers at its first compile (its
        # maintainers keep it so): without the alias no kernel compiles.
        if not hasattr(numpy, "row_stack"):
            numpy.row_stack = numpy.vstack
        from numba import cuda
    except ImportError as missing:
        print(f"needs numba-cuda ({missing})")
        sys.exit(UNAVAILABLE)
    import cudapmr
    import cudapmr.numba

    if cudapmr.device_count() == 0:
        print("needs a CUDA device")
        sys.exit(UNAVAILABLE)
    counted = cudapmr.StatisticsAdaptor(cudapmr.default_device_stack(0))
    cuda.set_memory_manager(cudapmr.numba.memory_manager(counted))

    def scale_and_bias(values, scale, bias):
        i = cuda.grid(1)
        if i < values.size:
            values[i] = values[i] * scale + bias

    host = numpy.arange(1 << 20, dtype=numpy.float32)
    values = cuda.to_device(host)
    assert counted.statistics().bytes.current >= host.nbytes, counted.statistics()
    cuda.jit(scale_and_bias)[(host.size + 255) // 256, 256](values, 2.0, 1.0)
    assert numpy.array_equal(values.copy_to_host(), host * 2 + 1)
    empty = cuda.device_array(0, dtype=numpy.float32)  # an empty array still gets a real block
    assert cuda.current_context().memory_manager.interface_version == 1
    free, total = cuda.current_context().get_memory_info()
    assert 0 < free <= total
    del values, empty
    gc.collect()
    cuda.synchronize()
    assert counted.statistics().bytes.current == 0, counted.statistics()
    return "ok"


SCENARIOS = {scenario.__name__: scenario for scenario in (kernels_on_a_counted_stack,)}

if __name__ == "__main__":
    print(SCENARIOS[sys.argv[1]]())
