# SPDX-License-Identifier: Apache-2.0
"""Property-based tests (Hypothesis) of Buffers on host resource stacks,
with NumPy as the DLPack consumer: see buffer_model.py."""

import pytest
from conftest import needs

needs("hypothesis")
numpy = needs("numpy")

from buffer_model import NumpyConsumer, check_programs, programs  # noqa: E402 (needs hypothesis)
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudapmr  # noqa: E402

STACKS = {
    "host": lambda host: host,
    "caching": lambda host: cudapmr.CachingResource(host),
    "coalescing": lambda host: cudapmr.CoalescingResource(host),
}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_random_programs_keep_contents_and_statistics(stack):
    @given(thread_programs=programs(st.integers(1, 4)))
    def check(thread_programs):
        host = cudapmr.HostMemoryResource()
        counted = cudapmr.StatisticsAdaptor(STACKS[stack](host))
        check_programs(counted, NumpyConsumer(numpy), thread_programs, bottom=host)

    check()
