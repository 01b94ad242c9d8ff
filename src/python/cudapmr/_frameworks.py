# SPDX-License-Identifier: Apache-2.0
"""One stack for every framework in the process: ``install_allocators``."""

import importlib.util

from . import _cudapmr

FRAMEWORKS = ("cupy", "torch", "numba", "cuda.core")
# The module whose presence says a framework is installed (numba-cuda's, not numba's own).
_MODULES = {"cupy": "cupy", "torch": "torch", "numba": "numba_cuda", "cuda.core": "cuda.core"}


def _present(module_name):
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a broken one
        return False


def _install_cupy(resource, _device_id):
    import cupy

    from . import cupy as plugin

    cupy.cuda.set_allocator(plugin.allocator(resource))


def _install_torch(resource, device_id):
    import torch

    from . import torch as plugin

    # PyTorch takes its allocator once, before its first CUDA allocation; it raises after that, and the
    # device's registration (which a MemPool over an earlier allocator() draws from) is put back.
    previous = _cudapmr._torch_resource(device_id)
    pluggable = plugin.allocator(resource, device_id)
    try:
        torch.cuda.memory.change_current_allocator(pluggable)
    except BaseException:
        _cudapmr._torch_set_resource(device_id, previous)
        raise


def _install_numba(resource, _device_id):
    from numba import cuda

    from . import numba as plugin

    # Numba takes its memory manager for the contexts it makes from now on.
    cuda.set_memory_manager(plugin.memory_manager(resource))


def _install_cuda_core(resource, device_id):
    try:
        from cuda.core import Device
    except ImportError:  # older cuda.core
        from cuda.core.experimental import Device

    from .cuda_core import MemoryResource

    Device(device_id).memory_resource = MemoryResource(resource)


_INSTALLERS = {"cupy": _install_cupy, "torch": _install_torch, "numba": _install_numba, "cuda.core": _install_cuda_core}


def install_allocators(resource=None, device_id=None, frameworks=FRAMEWORKS):
    """Makes one cudapmr resource the device allocator of every framework
    present in the process: CuPy (``cupy.cuda.set_allocator``), PyTorch (its
    current allocator, with the hooks of ``cudapmr.torch``), Numba (its
    memory manager, ``cudapmr.numba``) and cuda.core (the device's
    ``memory_resource``), so that memory one frees serves the others and one
    report shows them all.

    ``resource`` defaults to the process's ``default_device_stack`` of
    ``device_id`` (default: the current device). Call it before the
    frameworks allocate on the GPU: PyTorch takes its allocator once, and
    Numba's manager serves only contexts made after it.

    Returns ``{framework: outcome}``, the outcome ``"installed"``, ``"absent"``
    (not importable here) or why it was refused (e.g. PyTorch had already
    allocated). Raises ValueError for a framework name it does not know, or a
    resource whose memory is not device-accessible."""
    if isinstance(frameworks, str):  # one name, not its letters
        frameworks = (frameworks,)
    frameworks = tuple(frameworks)
    unknown = [name for name in frameworks if name not in FRAMEWORKS]
    if unknown:
        raise ValueError(f"install_allocators: unknown framework(s) {unknown}; known: {list(FRAMEWORKS)}")
    if resource is not None and not isinstance(resource, _cudapmr.MemoryResource):
        raise TypeError(f"install_allocators needs a cudapmr resource, not {type(resource).__name__}")
    if resource is not None and not resource.is_device_accessible:  # said before any device is asked for
        raise ValueError(f"install_allocators needs device-accessible memory; {resource.description} is not")
    if device_id is None:
        device_id = resource.device_id if resource is not None and resource.device_id >= 0 else _cudapmr.current_device()
    if resource is None:
        resource = _cudapmr.default_device_stack(device_id)
    outcome = {}
    for name in frameworks:
        if not _present(_MODULES[name]):
            outcome[name] = "absent"
            continue
        try:
            _INSTALLERS[name](resource, device_id)  # each imports its framework only now
            outcome[name] = "installed"
        except Exception as refused:  # the framework said no: reported, the others still go on
            outcome[name] = f"refused: {type(refused).__name__}: {refused}"
    return outcome

