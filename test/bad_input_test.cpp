// SPDX-License-Identifier: Apache-2.0
// Every public entry point with every bad argument, as one table: each row is
// tried on each resource it applies to, and must give the documented error
// (type and a message that names the values) and leave no byte behind. The
// docs/reliability.md lists the same table.
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

std::string hex(const void* p) {
  std::ostringstream text;
  text << p;
  return text.str();
}

// ---- the resources the rows run on -------------------------------------------

/// A resource under test: `top` is what the rows call; the rest keeps the
/// stack alive and measures what is outstanding.
struct target {
  std::vector<std::unique_ptr<stream_ordered_resource>> layers;  // bottom first
  stream_ordered_resource* top = nullptr;
  tracking_adaptor* tracker = nullptr;
  statistics_adaptor* statistics = nullptr;
  std::optional<cudapmr::stream> own_stream;
  std::mutex mutex;
  std::vector<misuse_report> misuses;  // reported on the noexcept path

  [[nodiscard]] stream_ref stream() const { return own_stream ? own_stream->ref() : stream_ref{}; }

  template <class Resource, class... Arguments>
  Resource& push(Arguments&&... arguments) {
    auto layer = std::make_unique<Resource>(std::forward<Arguments>(arguments)...);
    Resource& made = *layer;
    layers.push_back(std::move(layer));
    top = &made;
    return made;
  }
  tracking_adaptor& push_tracker() {
    tracker = &push<tracking_adaptor>(*top, tracking_options{.on_misuse = [this](const misuse_report& report) {
      const std::lock_guard lock(mutex);
      misuses.push_back(report);
    }});
    return *tracker;
  }

  /// Everything each layer counts as outstanding, once caches and streams are
  /// drained: equal before and after a row, or the row leaked.
  [[nodiscard]] std::vector<std::size_t> usage() {
    if (own_stream) own_stream->synchronize();
    std::vector<std::size_t> counts;
    for (const auto& layer : layers) {
      if (auto* caching = dynamic_cast<caching_resource*>(layer.get())) caching->release();
      if (auto* pool = dynamic_cast<pool_resource*>(layer.get())) {
        EXPECT_EQ(cudaStreamSynchronize(pool->bound_stream().get()), cudaSuccess);
      }
    }
    for (const auto& layer : layers) {
      if (auto* host = dynamic_cast<host_memory_resource*>(layer.get())) counts.push_back(host->used_bytes());
      if (auto* pool = dynamic_cast<pool_resource*>(layer.get())) counts.push_back(pool->stats().used_current);
      if (auto* limit = dynamic_cast<limiting_adaptor*>(layer.get())) counts.push_back(limit->used_bytes());
      if (auto* tracked = dynamic_cast<tracking_adaptor*>(layer.get())) counts.push_back(tracked->outstanding_bytes());
      if (auto* counted = dynamic_cast<statistics_adaptor*>(layer.get()))
        counts.push_back(static_cast<std::size_t>(counted->statistics().bytes.current));
    }
    return counts;
  }
};

/// How to make one kind of target.
struct target_kind {
  const char* name;
  bool needs_gpu;
  bool tracked;
  /// False for managed memory, which is never asked for more than the GPU
  /// has, and for an uncapped host resource, which would ask the system.
  bool exhaustible;
  void (*build)(target&);
};

constexpr std::size_t pool_cap = 256 * mebibyte;

/// The adaptors over whatever `t.top` is now, as a user would stack them: a
/// cap, statistics, and outermost the tracker, so that a bad free is caught
/// before any layer counts it.
void stack_adaptors(target& t) {
  t.push<limiting_adaptor>(*t.top, pool_cap);
  t.statistics = &t.push<statistics_adaptor>(*t.top);
  t.push_tracker();
}

const std::vector<target_kind>& target_kinds() {
  static const std::vector<target_kind> kinds{
      {"host", false, false, true, [](target& t) { t.push<host_memory_resource>(pool_cap); }},
      // No capacity: the system allocator sees every request (never more than exists: no exhausting rows).
      {"host_unbounded", false, false, false, [](target& t) { t.push<host_memory_resource>(); }},
      {"host_adaptors", false, true, true,
       [](target& t) {
         t.push<host_memory_resource>();
         t.push<caching_resource>(*t.top);
         stack_adaptors(t);
       }},
      {"device_pool", true, false, true,
       [](target& t) { t.push<device_memory_resource>(0, device_pool_options{.max_size = pool_cap}); }},
      {"pinned_pool", true, false, true,
       [](target& t) { t.push<pinned_memory_resource>(pinned_pool_options{.max_size = pool_cap}); }},
      {"managed_pool", true, false, false,
       [](target& t) { t.push<managed_memory_resource>(managed_pool_options{.preferred_device = 0}); }},
      {"device_adaptors", true, true, true,
       [](target& t) {
         t.push<device_memory_resource>(0, device_pool_options{.max_size = pool_cap});
         t.push<caching_resource>(*t.top);
         stack_adaptors(t);
       }},
  };
  return kinds;
}

// ---- the table -----------------------------------------------------------------

enum class outcome {
  accepted,          ///< no error: the call is valid and does nothing harmful
  invalid_argument,  ///< std::invalid_argument (not a misuse_error)
  out_of_memory,     ///< cudapmr::out_of_memory
  misuse_thrown,     ///< tracking_adaptor's misuse_error
  misuse_reported,   ///< nothing thrown; the tracker's misuse handler was told
  no_device,         ///< cuda_error saying that no CUDA device was found
};

struct expectation {
  outcome result;
  /// Parts the message must contain.
  std::vector<std::string> message;
};

/// Where a row applies.
enum class scope {
  every_resource,  ///< each target kind
  tracked,         ///< target kinds with a tracking adaptor
  standalone,      ///< once, on no resource
};

struct bad_input {
  const char* name;
  scope applies_to;
  /// Runs the row: sets up, makes the bad call through `attempt`, cleans up.
  std::function<std::exception_ptr(target&)> run;
  std::function<expectation(const target&)> expect;
  int gpus_needed = 0;
  /// Asks for more memory than exists: not run on managed memory.
  bool exhausts = false;
};

template <class Call>
std::exception_ptr attempt(Call&& call) {
  try {
    call();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

/// What a device ordinal out of range gives: invalid_argument naming the
/// ordinal and the count, or, with no GPU at all, the no-device error.
expectation bad_ordinal(int ordinal) {
  if (!gpu_available()) return {outcome::no_device, {"no CUDA device was found"}};
  return {outcome::invalid_argument,
          {"device ordinal " + std::to_string(ordinal), "out of range",
           std::to_string(device::count()) + " CUDA device(s)"}};
}

expectation bad_alignment(std::size_t alignment) {
  if (alignment > max_alignment)
    return {outcome::invalid_argument,
            {"alignment " + std::to_string(alignment), "exceeds", std::to_string(max_alignment)}};
  return {outcome::invalid_argument, {"alignment " + std::to_string(alignment), "not a power of two"}};
}

/// Rows that pass `alignment` to the stream-ordered and to the pmr allocate.
void add_alignment_rows(std::vector<bad_input>& rows, const char* async_name, const char* pmr_name,
                        std::size_t alignment) {
  rows.push_back({async_name, scope::every_resource,
                  [alignment](target& t) {
                    return attempt([&] { static_cast<void>(t.top->allocate_async(64, alignment, t.stream())); });
                  },
                  [alignment](const target&) { return bad_alignment(alignment); }});
  rows.push_back({pmr_name, scope::every_resource,
                  [alignment](target& t) { return attempt([&] { static_cast<void>(t.top->allocate(64, alignment)); }); },
                  [alignment](const target&) { return bad_alignment(alignment); }});
}

/// Rows that free `p` wrongly through the tracker, on the checking path
/// (thrown) and on the noexcept path (reported); `setup` returns the bad free.
struct bad_free {
  void* pointer;
  std::size_t bytes;
  std::size_t alignment;
};
void add_bad_free_rows(std::vector<bad_input>& rows, const char* checked_name, const char* noexcept_name,
                       bad_free (*setup)(target&), void (*cleanup)(target&, const bad_free&),
                       const std::vector<std::string>& message) {
  rows.push_back({checked_name, scope::tracked,
                  [setup, cleanup](target& t) {
                    const bad_free free = setup(t);
                    auto error = attempt(
                        [&] { t.tracker->deallocate_checked(free.pointer, free.bytes, free.alignment, t.stream()); });
                    cleanup(t, free);
                    return error;
                  },
                  [message](const target&) { return expectation{outcome::misuse_thrown, message}; }});
  rows.push_back({noexcept_name, scope::tracked,
                  [setup, cleanup](target& t) {
                    const bad_free free = setup(t);
                    t.top->deallocate_async(free.pointer, free.bytes, free.alignment, t.stream());
                    cleanup(t, free);
                    return std::exception_ptr{};
                  },
                  [message](const target&) { return expectation{outcome::misuse_reported, message}; }});
}

/// Memory that no resource handed out: a local array.
alignas(256) unsigned char foreign_memory[1024];

const std::vector<bad_input>& table() {
  static const std::vector<bad_input> rows = [] {
    std::vector<bad_input> r;
    add_alignment_rows(r, "AllocateAsyncAlignmentZero", "PmrAllocateAlignmentZero", 0);
    add_alignment_rows(r, "AllocateAsyncAlignmentThree", "PmrAllocateAlignmentThree", 3);
    add_alignment_rows(r, "AllocateAsyncAlignmentTwoToThe40", "PmrAllocateAlignmentTwoToThe40", std::size_t{1} << 40);

    r.push_back({"BufferByteCountOverflows", scope::every_resource,
                 [](target& t) {
                   return attempt([&] { buffer<double> values(*t.top, size_max / 4, t.stream()); });
                 },
                 [](const target&) {
                   return expectation{outcome::invalid_argument,
                                      {std::to_string(size_max / 4) + " elements of 8 bytes", "overflows"}};
                 }});
    r.push_back({"AllocateMoreThanExists", scope::every_resource,
                 [](target& t) {
                   return attempt([&] { static_cast<void>(t.top->allocate_async(impossible_request, t.stream())); });
                 },
                 [](const target&) {
                   return expectation{outcome::out_of_memory, {std::to_string(impossible_request) + " bytes", "out of memory"}};
                 },
                 0, true});
    r.push_back({"AllocateSizeMaxWithPaddingToAlign", scope::every_resource,
                 [](target& t) {
                   return attempt([&] { static_cast<void>(t.top->allocate_async(size_max, 4096, t.stream())); });
                 },
                 [](const target&) {
                   return expectation{outcome::out_of_memory, {std::to_string(size_max) + " bytes", "alignment 4096"}};
                 }});
    // Within one alignment of size_max: a request that rounding up to its alignment would wrap to a few bytes.
    r.push_back({"AllocateWithinAnAlignmentOfSizeMax", scope::every_resource,
                 [](target& t) {
                   return attempt([&] { static_cast<void>(t.top->allocate_async(size_max - 4094, 4096, t.stream())); });
                 },
                 [](const target&) {
                   return expectation{outcome::out_of_memory, {std::to_string(size_max - 4094) + " bytes", "alignment 4096"}};
                 }});
    r.push_back({"PmrAllocateWithinAnAlignmentOfSizeMax", scope::every_resource,
                 [](target& t) { return attempt([&] { static_cast<void>(t.top->allocate(size_max - 30, 32)); }); },
                 [](const target&) {
                   return expectation{outcome::out_of_memory, {std::to_string(size_max - 30) + " bytes", "alignment 32"}};
                 }});
    r.push_back({"CopyBetweenBuffersOfDifferentSizes", scope::every_resource,
                 [](target& t) {
                   buffer<float> ten(*t.top, 10, t.stream());
                   buffer<float> twelve(*t.top, 12, t.stream());
                   return attempt([&] { ten.copy_from(twelve, t.stream()); });
                 },
                 [](const target&) {
                   return expectation{outcome::invalid_argument, {"10 elements (40 bytes)", "12 (48 bytes)"}};
                 }});
    r.push_back({"CopyFromHostSpanOfAnotherSize", scope::every_resource,
                 [](target& t) {
                   buffer<float> ten(*t.top, 10, t.stream());
                   const std::vector<float> eleven(11);
                   return attempt([&] { ten.copy_from(std::span<const float>(eleven), t.stream()); });
                 },
                 [](const target&) { return expectation{outcome::invalid_argument, {"10 elements", "11"}}; }});
    r.push_back({"CopyToHostSpanOfAnotherSize", scope::every_resource,
                 [](target& t) {
                   const buffer<float> ten(*t.top, 10, t.stream());
                   std::vector<float> nine(9);
                   return attempt([&] { ten.copy_to(std::span<float>(nine), t.stream()); });
                 },
                 [](const target&) { return expectation{outcome::invalid_argument, {"9 elements", "10"}}; }});
    r.push_back({"FillClosedBuffer", scope::every_resource,
                 [](target& t) {
                   buffer<int> closed(*t.top, 16, t.stream());
                   closed.close();
                   return attempt([&] { closed.fill(7, t.stream()); });
                 },
                 [](const target&) { return expectation{outcome::invalid_argument, {"fill", "closed or moved-from"}}; }});
    r.push_back({"CopyFromMovedFromBuffer", scope::every_resource,
                 [](target& t) {
                   buffer<int> original(*t.top, 16, t.stream());
                   const buffer<int> moved(std::move(original));
                   buffer<int> destination(*t.top, 16, t.stream());
                   // NOLINTNEXTLINE(bugprone-use-after-move): using the moved-from buffer is the point
                   return attempt([&] { destination.copy_from(original, t.stream()); });
                 },
                 [](const target&) {
                   return expectation{outcome::invalid_argument, {"copy_from (source)", "closed or moved-from"}};
                 }});
    r.push_back({"CloseTwice", scope::every_resource,
                 [](target& t) {
                   buffer<int> values(*t.top, 16, t.stream());
                   values.close(t.stream());
                   return attempt([&] {
                     values.close(t.stream());
                     values.close();
                   });
                 },
                 [](const target&) { return expectation{outcome::accepted, {}}; }});
    r.push_back({"DeallocateAsyncNull", scope::every_resource,
                 [](target& t) { return attempt([&] { t.top->deallocate_async(nullptr, 64, t.stream()); }); },
                 [](const target&) { return expectation{outcome::accepted, {}}; }});
    r.push_back({"PrefetchToDeviceOutOfRange", scope::every_resource,
                 [](target& t) {
                   const buffer<int> values(*t.top, 16, t.stream());
                   return attempt([&] { values.prefetch_to_device(device::count(), t.stream()); });
                 },
                 [](const target& t) {
                   if (t.top->kind() != memory_kind::managed)
                     return expectation{outcome::invalid_argument,
                                        {"prefetch_to_device", std::string(to_string(t.top->kind()))}};
                   return bad_ordinal(device::count());
                 }});

    // Bad frees: only a tracking adaptor can tell them (see the README).
    add_bad_free_rows(
        r, "DeallocateCheckedForeignPointer", "DeallocateAsyncForeignPointer",
        [](target&) { return bad_free{foreign_memory, sizeof foreign_memory, default_alignment}; },
        [](target&, const bad_free&) {}, {"unknown pointer", hex(foreign_memory), "1024 bytes"});
    add_bad_free_rows(
        r, "DeallocateCheckedTwice", "DeallocateAsyncTwice",
        [](target& t) {
          void* p = t.top->allocate_async(512, t.stream());
          t.top->deallocate_async(p, 512, t.stream());
          return bad_free{p, 512, default_alignment};
        },
        [](target&, const bad_free&) {}, {"double free", "512 bytes"});
    add_bad_free_rows(
        r, "DeallocateCheckedWrongSize", "DeallocateAsyncWrongSize",
        [](target& t) { return bad_free{t.top->allocate_async(512, t.stream()), 500, default_alignment}; },
        [](target& t, const bad_free& free) { t.top->deallocate_async(free.pointer, 512, t.stream()); },
        {"wrong size", "500 bytes given", "of 512 bytes"});
    add_bad_free_rows(
        r, "DeallocateCheckedWrongAlignment", "DeallocateAsyncWrongAlignment",
        [](target& t) { return bad_free{t.top->allocate_async(512, t.stream()), 512, 64}; },
        [](target& t, const bad_free& free) { t.top->deallocate_async(free.pointer, 512, t.stream()); },
        {"wrong alignment", "alignment 64 given", "(alignment 256)"});
    r.push_back({"DeallocateCheckedNull", scope::tracked,
                 [](target& t) { return attempt([&] { t.tracker->deallocate_checked(nullptr, 64, t.stream()); }); },
                 [](const target&) { return expectation{outcome::accepted, {}}; }});

    // Over a cap.
    r.push_back({"AllocatePastTheCap", scope::tracked,
                 [](target& t) {
                   return attempt([&] { static_cast<void>(t.top->allocate_async(pool_cap + 1, t.stream())); });
                 },
                 [](const target&) {
                   return expectation{outcome::out_of_memory,
                                      {std::to_string(pool_cap + 1) + " bytes", "the cap is " + std::to_string(pool_cap)}};
                 }});

    // Device ordinals out of range: -1 and the device count.
    r.push_back({"DeviceMinusOne", scope::standalone, [](target&) { return attempt([] { device gpu(-1); }); },
                 [](const target&) { return bad_ordinal(-1); }});
    r.push_back({"DevicePastTheCount", scope::standalone,
                 [](target&) { return attempt([] { device gpu(device::count()); }); },
                 [](const target&) { return bad_ordinal(device::count()); }});
    r.push_back({"StreamPastTheCount", scope::standalone,
                 [](target&) { return attempt([] { cudapmr::stream created(device::count()); }); },
                 [](const target&) { return bad_ordinal(device::count()); }});
    r.push_back({"DeviceResourcePastTheCount", scope::standalone,
                 [](target&) { return attempt([] { device_memory_resource resource(device::count()); }); },
                 [](const target&) { return bad_ordinal(device::count()); }});
    r.push_back({"OwnedDevicePoolMinusOne", scope::standalone,
                 [](target&) { return attempt([] { device_memory_resource resource(-1, device_pool_options{}); }); },
                 [](const target&) { return bad_ordinal(-1); }});
    r.push_back({"DefaultDeviceResourceMinusOne", scope::standalone,
                 [](target&) { return attempt([] { static_cast<void>(default_device_resource(-1)); }); },
                 [](const target&) { return bad_ordinal(-1); }});
    r.push_back({"ManagedPreferredDevicePastTheCount", scope::standalone,
                 [](target&) {
                   return attempt([] {
                     managed_memory_resource resource(managed_pool_options{.preferred_device = device::count()});
                   });
                 },
                 [](const target&) { return bad_ordinal(device::count()); }});
    r.push_back({"ManagedReleaseThresholdWithNoPreferredDevice", scope::standalone,
                 [](target&) {
                   return attempt([] { managed_memory_resource resource(managed_pool_options{.release_threshold = 0}); });
                 },
                 [](const target&) {
                   return expectation{outcome::invalid_argument,
                                      {"release_threshold of 0 bytes", "needs a preferred_device"}};
                 }});
    r.push_back({"CurrentDeviceResourcePastTheCount", scope::standalone,
                 [](target&) { return attempt([] { static_cast<void>(current_device_resource(device::count())); }); },
                 [](const target&) { return bad_ordinal(device::count()); }});
    r.push_back({"SetCurrentDeviceResourceMinusOne", scope::standalone,
                 [](target&) {
                   return attempt([] {
                     host_memory_resource host;
                     static_cast<void>(set_current_device_resource(-1, host));
                   });
                 },
                 [](const target&) { return bad_ordinal(-1); }});

    // Adaptors refusing what they cannot use.
    r.push_back({"FailureCallbackAdaptorWithoutCallback", scope::standalone,
                 [](target&) {
                   return attempt([] {
                     host_memory_resource host;
                     failure_callback_adaptor adaptor(host, failure_callback{});
                   });
                 },
                 [](const target&) { return expectation{outcome::invalid_argument, {"the callback is empty"}}; }});
    r.push_back({"LoggingAdaptorToAnUnwritablePath", scope::standalone,
                 [](target&) {
                   return attempt([] {
                     host_memory_resource host;
                     logging_adaptor adaptor(host, std::filesystem::path("/nonexistent-directory/cudapmr.csv"));
                   });
                 },
                 [](const target&) {
                   return expectation{outcome::invalid_argument, {"/nonexistent-directory/cudapmr.csv"}};
                 }});

    // Buffers on two devices: sizes are checked across devices too.
    r.push_back({"CopyBetweenDevicesOfDifferentSizes", scope::standalone,
                 [](target&) {
                   const cudapmr::stream on_first(0);
                   buffer<float> ten(default_device_resource(0), 10, on_first);
                   buffer<float> twelve(default_device_resource(1), 12, on_first);
                   auto error = attempt([&] { ten.copy_from(twelve, on_first); });
                   on_first.synchronize();
                   return error;
                 },
                 [](const target&) { return expectation{outcome::invalid_argument, {"10 elements", "12"}}; }, 2});
    return r;
  }();
  return rows;
}

// ---- the test: each row on each target it applies to -----------------------

struct table_case {
  const bad_input* row;
  const target_kind* kind;  // null for standalone rows
};

std::vector<table_case> table_cases() {
  std::vector<table_case> cases;
  for (const bad_input& row : table()) {
    if (row.applies_to == scope::standalone) {
      cases.push_back({&row, nullptr});
      continue;
    }
    for (const target_kind& kind : target_kinds())
      if ((row.applies_to == scope::every_resource || kind.tracked) && (!row.exhausts || kind.exhaustible))
        cases.push_back({&row, &kind});
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<table_case>& info) {
  std::string name = info.param.row->name;
  if (info.param.kind != nullptr) name += std::string("_on_") + info.param.kind->name;
  return name;
}

/// Checks the error a row gave (thrown, or reported to the tracker) against `expected`.
void expect_outcome(const std::exception_ptr& error, const expectation& expected, target& t) {
  std::string message;
  std::optional<outcome> got;
  try {
    if (error) std::rethrow_exception(error);
    got = outcome::accepted;
  } catch (const misuse_error& thrown) {
    got = outcome::misuse_thrown;
    message = thrown.what();
  } catch (const std::invalid_argument& thrown) {
    got = outcome::invalid_argument;
    message = thrown.what();
  } catch (const out_of_memory& thrown) {
    got = outcome::out_of_memory;
    message = thrown.what();
  } catch (const cuda_error& thrown) {
    if (is_no_device_error(thrown.error())) got = outcome::no_device;
    message = thrown.what();
  } catch (const std::exception& thrown) {
    message = thrown.what();
  }
  {
    const std::lock_guard lock(t.mutex);
    if (got == outcome::accepted && !t.misuses.empty()) {
      got = outcome::misuse_reported;
      message = t.misuses.back().message;
    }
    EXPECT_LE(t.misuses.size(), 1u) << "one bad free, one report";
  }
  ASSERT_TRUE(got.has_value()) << "unexpected error: " << message;
  EXPECT_EQ(static_cast<int>(*got), static_cast<int>(expected.result)) << "message: " << message;
  for (const std::string& part : expected.message)
    EXPECT_NE(message.find(part), std::string::npos) << "the message does not name \"" << part << "\": " << message;
  if (!message.empty()) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

class BadInput : public ::testing::TestWithParam<table_case> {};

TEST_P(BadInput, GivesTheDocumentedErrorAndLeaksNothing) {
  const table_case& param = GetParam();
  const bool needs_gpu = param.kind != nullptr && param.kind->needs_gpu;
  if (needs_gpu) CUDAPMR_REQUIRE_GPU();
  if (param.row->gpus_needed > 0) CUDAPMR_REQUIRE_GPUS(param.row->gpus_needed);
  target t;
  if (param.kind != nullptr) {
    param.kind->build(t);
    if (needs_gpu) t.own_stream.emplace(0);
  }
  const std::vector<std::size_t> before = t.usage();
  const std::exception_ptr error = param.row->run(t);
  expect_outcome(error, param.row->expect(t), t);
  EXPECT_EQ(t.usage(), before) << "outstanding bytes, bottom layer first, changed: a leak";
  if (gpu_available()) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a CUDA error was left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BadInput, ::testing::ValuesIn(table_cases()), case_name);

}  // namespace
}  // namespace cudapmr::test
