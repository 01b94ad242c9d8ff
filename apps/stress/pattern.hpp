// SPDX-License-Identifier: Apache-2.0
#pragma once
// The pattern each live allocation of the stress run holds, computed the same
// way on the host and on the GPU.

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define CUDAPMR_STRESS_HOST_DEVICE __host__ __device__
#else
#define CUDAPMR_STRESS_HOST_DEVICE
#endif

namespace stress {

/// What the bytes of an allocation must hold: a sequence drawn from `seed`
/// (after a stamp) or `constant` (after a fill), plus `added` (after kernels),
/// modulo 256. Two allocations stamped with different seeds differ in almost
/// every byte, so an overlap or a premature reuse shows.
struct pattern {
  std::uint32_t seed = 0;
  bool is_constant = false;
  std::uint8_t constant = 0;
  std::uint8_t added = 0;
};

/// Byte `i` of the sequence of `seed`.
CUDAPMR_STRESS_HOST_DEVICE inline std::uint8_t sequence_byte(std::uint32_t seed, std::size_t i) {
  std::uint32_t mixed = static_cast<std::uint32_t>(i) * 0x9e3779b1u + seed * 0x85ebca77u;
  mixed ^= mixed >> 15;
  mixed *= 0x2c1b3c6du;
  mixed ^= mixed >> 12;
  return static_cast<std::uint8_t>(mixed);
}

/// What byte `i` of an allocation holding `expected` must be.
CUDAPMR_STRESS_HOST_DEVICE inline std::uint8_t expected_byte(const pattern& expected, std::size_t i) {
  const std::uint8_t base = expected.is_constant ? expected.constant : sequence_byte(expected.seed, i);
  return static_cast<std::uint8_t>(base + expected.added);
}

}  // namespace stress
