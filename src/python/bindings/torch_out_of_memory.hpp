// SPDX-License-Identifier: Apache-2.0
#pragma once
// PyTorch's own out-of-memory error, thrown from the current allocator's hook,
// so that Python sees torch.OutOfMemoryError (PyTorch maps that C++ type, and
// only that one, to it) and CUDAPluggableAllocator never records a null block.

#include <source_location>
#include <string>

namespace cudapmr::python {

/// Throws c10::OutOfMemoryError carrying `message`, built through the c10
/// libraries PyTorch has loaded: the module is compiled without PyTorch's
/// headers, so the error's constructor, type and virtual table are looked up
/// there (once, at the first call: PyTorch has loaded them by then). It relies on the
/// Itanium C++ ABI and libstdc++'s C++11 std::string, as PyTorch's wheels do;
/// where one of them is missing, it throws std::runtime_error with the same
/// message, which PyTorch shows as RuntimeError. Either way it throws.
[[noreturn]] void throw_torch_out_of_memory(const std::string& message,
                                            std::source_location where = std::source_location::current());

}  // namespace cudapmr::python
