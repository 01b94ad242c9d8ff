# SPDX-License-Identifier: Apache-2.0
"""Stream arguments of the plug-ins: what cudapmr takes, and the current
stream of CuPy or PyTorch where a library gives none."""

from ._cudapmr import stream_handle

__all__ = ["stream_handle", "cupy_current_stream"]


def cupy_current_stream():
    """The handle of CuPy's current stream (an int)."""
    import cupy

    return cupy.cuda.get_current_stream().ptr
