// SPDX-License-Identifier: Apache-2.0
#pragma once
// The collective's kernels (kernels.cu): the values each rank contributes and
// the check of the sums. Plain CUDA, so that no fmt reaches nvcc.

#include <cuda_runtime_api.h>

#include <cstddef>

namespace collective {

/// Element `i` of rank `rank`'s contribution: (rank + 1) * (1 + i % 251), an
/// integer, so that every partial sum is exact in float for up to 365 ranks.
void fill_rank_values(float* values, std::size_t count, int rank, cudaStream_t stream);

/// Adds to `*wrong` (device memory) the number of the first `count` elements
/// that differ from the sum of all `ranks` contributions. Stream-ordered.
void count_wrong_sums(const float* values, std::size_t count, int ranks, unsigned long long* wrong,
                      cudaStream_t stream);

}  // namespace collective
