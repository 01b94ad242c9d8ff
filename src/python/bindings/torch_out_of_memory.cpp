// SPDX-License-Identifier: Apache-2.0
#include "torch_out_of_memory.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <typeinfo>

namespace cudapmr::python {
namespace {

/// c10::SourceLocation, which c10::Error's constructor takes by value.
struct source_location {
  const char* function;
  const char* file;
  std::uint32_t line;
};

/// c10::Error::Error(SourceLocation, std::string), the complete-object constructor.
using error_constructor = void (*)(void* self, source_location where, std::string message);

/// What throwing a c10::OutOfMemoryError takes, found in the loaded c10 libraries.
struct c10_error_parts {
  error_constructor construct = nullptr;
  std::type_info* type = nullptr;         // c10::OutOfMemoryError's
  void* const* virtual_table = nullptr;  // c10::OutOfMemoryError's, at its address point
  [[nodiscard]] bool complete() const noexcept { return construct != nullptr && type != nullptr && virtual_table != nullptr; }
};

/// A symbol of PyTorch's c10 libraries if they are loaded (never loads them).
void* c10_symbol(const char* name) noexcept {
  for (const char* library : {"libc10_cuda.so", "libc10.so"}) {
    void* handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* symbol = dlsym(handle, name);
    dlclose(handle);  // drops only the reference this dlopen took: the library stays loaded
    if (symbol != nullptr) return symbol;
  }
  return nullptr;
}

c10_error_parts find_c10_error_parts() noexcept {
  c10_error_parts parts;
#if defined(__GLIBCXX__) && _GLIBCXX_USE_CXX11_ABI
  // The constructor's std::string is this module's: only the same layout may be passed.
  parts.construct = reinterpret_cast<error_constructor>(
      c10_symbol("_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"));
#endif
  parts.type = static_cast<std::type_info*>(c10_symbol("_ZTIN3c1016OutOfMemoryErrorE"));
  // The table's address point follows its offset-to-top and type entries.
  if (auto* table = static_cast<void* const*>(c10_symbol("_ZTVN3c1016OutOfMemoryErrorE"))) parts.virtual_table = table + 2;
  return parts;
}

/// The exception's destructor for the C++ runtime: the error's own virtual
/// one, the first entry of its table (the complete-object destructor).
void destroy_error(void* error) {
  using destructor = void (*)(void*);
  (*static_cast<destructor* const*>(error))[0](error);
}

}  // namespace

void throw_torch_out_of_memory(const std::string& message, std::source_location where) {
  // Looked up once: the bridge throws only once PyTorch's init hook ran, so c10 is loaded by then.
  static const c10_error_parts parts = find_c10_error_parts();
  if (!parts.complete()) throw std::runtime_error(message);
  // c10::OutOfMemoryError adds no member to c10::Error: room to spare for its layout (docs/python.md).
  constexpr std::size_t room = 1024;
  void* error = abi::__cxa_allocate_exception(room);
  try {
    parts.construct(error, source_location{where.function_name(), where.file_name(), where.line()}, message);
  } catch (...) {
    abi::__cxa_free_exception(error);
    throw;
  }
  // Constructed as a c10::Error; its table makes it the out-of-memory error
  // (same layout, its own type for dynamic_cast and the virtual calls).
  *static_cast<void* const**>(error) = parts.virtual_table;
  abi::__cxa_throw(error, parts.type, destroy_error);
}

}  // namespace cudapmr::python
