# SPDX-License-Identifier: Apache-2.0
"""Shared markers: GPU tests are skipped, visibly, where no CUDA device exists."""

import pytest

import cudapmr

HAS_GPU = cudapmr.device_count() > 0

gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device (none found)")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the behaviour where no CUDA device exists")


def needs(module_name):
    """The module, or a skip naming it where it is not installed."""
    return pytest.importorskip(module_name, reason=f"needs {module_name}")
