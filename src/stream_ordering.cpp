// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/stream_ordering.hpp"
#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/relaxed_capture_scope.hpp"

#include "cudapmr/detail/driver_entry_point.hpp"
#include "cudapmr/detail/synchronize.hpp"
#include "cudapmr/device.hpp"

#include <cuda.h>

#include <cstddef>
#include <iterator>
#include <mutex>
#include <new>
#include <vector>

namespace cudapmr::detail {
namespace {

/// The driver's capture query, which costs a fraction of the runtime's on the
/// hot path of a cache; null where the driver does not give it out.
using stream_is_capturing_function = CUresult (*)(CUstream, CUstreamCaptureStatus*);

/// An event of the cache's pool and the device it belongs to: CUDA records an
/// event only on a stream of its own device.
struct pooled_event {
  cudaEvent_t event;
  int device;
};

class cuda_ordering final : public stream_ordering {
 public:
  ordering_event record(stream_ref stream) noexcept override {
    int device = 0;
    if (!recover_from(cudaStreamGetDevice(stream.get(), &device))) return nullptr;
    pooled_event* event = take_event(device);
    if (event == nullptr) return nullptr;
    if (!recover_from(cudaEventRecord(event->event, stream.get()))) {
      recycle(event);
      return nullptr;
    }
    return event;
  }

  bool has_completed(ordering_event event) noexcept override {
    // Relaxed capture mode: another thread's global-mode capture must not be
    // invalidated by this query, which has nothing to do with it.
    const relaxed_capture_scope relaxed;
    return recover_from(cudaEventQuery(static_cast<pooled_event*>(event)->event));
  }

  bool wait(ordering_event event) noexcept override {
    const relaxed_capture_scope relaxed;  // as has_completed
    return recover_from(cudaEventSynchronize(static_cast<pooled_event*>(event)->event));
  }

  bool make_wait(stream_ref stream, ordering_event event) noexcept override {
    return recover_from(cudaStreamWaitEvent(stream.get(), static_cast<pooled_event*>(event)->event, 0));
  }

  void recycle(ordering_event event) noexcept override {
    auto* pooled = static_cast<pooled_event*>(event);
    try {
      const std::lock_guard lock(mutex_);
      spare_.push_back(pooled);
    } catch (...) {
      CUDAPMR_ASSERT_CUDA_SUCCESS(cudaEventDestroy(pooled->event));
      delete pooled;
    }
  }

  bool is_capturing(stream_ref stream) noexcept override {
    if (is_capturing_ != nullptr) {
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      if (is_capturing_(reinterpret_cast<CUstream>(stream.get()), &status) == CUDA_SUCCESS)
        return status != CU_STREAM_CAPTURE_STATUS_NONE;
    }
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (!recover_from(cudaStreamIsCapturing(stream.get(), &status))) return true;  // unknown: keep cached blocks out of it
    return status != cudaStreamCaptureStatusNone;
  }

  int current_device() noexcept override {
    int device = 0;
    static_cast<void>(recover_from(cudaGetDevice(&device)));  // none current: device 0
    return device;
  }

  void synchronize_all_devices() override { synchronize_devices(memory_kind::device, -1); }

 private:
  pooled_event* take_event(int device) noexcept {
    try {
      const std::lock_guard lock(mutex_);
      for (auto spare = spare_.rbegin(); spare != spare_.rend(); ++spare) {
        if ((*spare)->device != device) continue;
        pooled_event* event = *spare;
        spare_.erase(std::next(spare).base());
        return event;
      }
    } catch (...) {
      return nullptr;
    }
    cudaEvent_t event = nullptr;
    try {
      const scoped_device guard(device);
      if (!recover_from(cudaEventCreateWithFlags(&event, cudaEventDisableTiming))) return nullptr;
      return new pooled_event{event, device};
    } catch (...) {
      if (event != nullptr) CUDAPMR_ASSERT_CUDA_SUCCESS(cudaEventDestroy(event));
      return nullptr;
    }
  }

  stream_is_capturing_function is_capturing_ = driver_function<stream_is_capturing_function>("cuStreamIsCapturing");
  std::mutex mutex_;
  std::vector<pooled_event*> spare_;  // events of every device, reused; never destroyed
};

class host_ordering final : public stream_ordering {
 public:
  ordering_event record(stream_ref) noexcept override { return this; }
  bool has_completed(ordering_event) noexcept override { return true; }
  bool wait(ordering_event) noexcept override { return true; }
  bool make_wait(stream_ref, ordering_event) noexcept override { return true; }
  void recycle(ordering_event) noexcept override {}
  bool is_capturing(stream_ref) noexcept override { return false; }
  int current_device() noexcept override { return 0; }
  void synchronize_all_devices() override {}
};

/// One `Ordering` for the process, never destroyed (caches destroyed at exit
/// still use it) and made in static storage: a first use when the heap is
/// exhausted still finds it, as these functions promise never to throw.
template <typename Ordering>
stream_ordering& process_ordering() noexcept {
  alignas(Ordering) static std::byte storage[sizeof(Ordering)];
  static Ordering* const ordering = ::new (static_cast<void*>(storage)) Ordering();
  return *ordering;
}

}  // namespace

stream_ordering& cuda_stream_ordering() noexcept { return process_ordering<cuda_ordering>(); }

stream_ordering& host_stream_ordering() noexcept { return process_ordering<host_ordering>(); }

stream_ordering& stream_ordering_for(memory_kind kind) noexcept {
  return kind == memory_kind::pageable ? host_stream_ordering() : cuda_stream_ordering();
}

}  // namespace cudapmr::detail
