// SPDX-License-Identifier: Apache-2.0
#pragma once
// PyTorch's own out-of-memory error, thrown from the current allocator's hook,
// so that Python sees torch.OutOfMemoryError (PyTorch maps that C++ type, and
// only that one, to it) and CUDAPluggableAllocator never records a null block.

#include <string>

namespace cudapmr::python {

/// Throws c10::OutOfMemoryError carrying `message`, built through the c10
/// libraries PyTorch has loaded: the module is compiled without PyTorch's
/// headers, so the error's constructor, type and virtual table are looked up
/// there once (the Itanium C++ ABI and the C++11 std::string, as PyTorch's
/// wheels use). Returns, throwing nothing, where PyTorch is not loaded or one
/// of them is missing; throws std::bad_alloc where no memory is left for the
/// error itself.
void throw_torch_out_of_memory(const std::string& message);

/// Whether throw_torch_out_of_memory can throw in this process (PyTorch's
/// c10 libraries are loaded and offer what it needs).
[[nodiscard]] bool can_throw_torch_out_of_memory() noexcept;

}  // namespace cudapmr::python
