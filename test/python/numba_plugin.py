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

    # numba-cuda 0.30 cannot compile any kernel under NumPy 2.5 (its typing imports np.row_stack, removed there,
    # and its maintainers keep it so): the memory manager is then checked with CuPy's kernel on Numba's arrays, and
    # the child says so. Compute capability 7.5: the oldest every libNVVM from CUDA 10 to 13 accepts.
    numba_compiles = True
    try:
        cuda.compile_ptx(scale_and_bias, "void(float32[:], float32, float32)", cc=(7, 5))
    except AttributeError as broken:
        if "row_stack" not in str(broken):
            raise
        try:
            import cupy
        except ImportError:
            print(f"numba-cuda cannot compile a kernel here ({broken}) and CuPy is missing")
            sys.exit(UNAVAILABLE)
        numba_compiles = False

    host = numpy.arange(1 << 20, dtype=numpy.float32)
    values = cuda.to_device(host)
    assert counted.statistics().bytes.current >= host.nbytes, counted.statistics()
    if numba_compiles:
        cuda.jit(scale_and_bias)[(host.size + 255) // 256, 256](values, 2.0, 1.0)
    else:
        view = cupy.asarray(values)  # Numba's array through the CUDA array interface: no copy
        assert view.data.ptr == values.device_ctypes_pointer.value
        view *= 2
        view += 1
        cupy.cuda.runtime.deviceSynchronize()
        del view
    assert numpy.array_equal(values.copy_to_host(), host * 2 + 1)
    empty = cuda.device_array(0, dtype=numpy.float32)  # an empty array still gets a real block
    assert cuda.current_context().memory_manager.interface_version == 1
    free, total = cuda.current_context().get_memory_info()
    assert 0 < free <= total
    del values, empty
    gc.collect()
    cuda.synchronize()
    assert counted.statistics().bytes.current == 0, counted.statistics()
    return "ok" if numba_compiles else "ok (numba-cuda cannot compile under this NumPy: CuPy's kernel ran instead)"


SCENARIOS = {scenario.__name__: scenario for scenario in (kernels_on_a_counted_stack,)}

if __name__ == "__main__":
    print(SCENARIOS[sys.argv[1]]())
