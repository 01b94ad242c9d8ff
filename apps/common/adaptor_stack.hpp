// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every adaptor stacked over one resource: the stack the adaptor tests, the
// fuzzer and the stress run put their allocations through.

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>

#include <cstddef>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cudapmr::apps {

struct adaptor_stack_options {
  /// The layers, bottom first: 'c' caching_resource, 'f' failure_callback_adaptor,
  /// 'g' logging_adaptor, 'h' history_adaptor, 'l' limiting_adaptor,
  /// 's' statistics_adaptor, 't' tracking_adaptor. By default the tracker is
  /// outermost, so that it sees each free before anything counts it, the
  /// history just under it explains a refusal of any layer below, and the
  /// callback sits over the cache, whose exhaustion it is shown.
  std::string order = "cfglsht";
  /// The limiting_adaptor's cap.
  std::size_t cap = std::size_t{1} << 30;
  /// Where the logging_adaptor writes; needed where the order has 'g'.
  std::ostream* log = nullptr;
  /// The failure_callback_adaptor's callback; by default it asks for no retry.
  failure_callback on_failure = [](const allocation_failure&) { return false; };
  tracking_options tracking;
  /// The history_adaptor's options: the latest 4096 events, and a report for
  /// the first refusals only, as each one reads the whole ring.
  history_options history{.capacity = 4096, .explained_refusals = 16};
};

class adaptor_stack {
 public:
  /// \throws std::invalid_argument for an unknown layer, or 'g' without a log.
  adaptor_stack(stream_ordered_resource& bottom, adaptor_stack_options options)
      : order_(std::move(options.order)), top_(&bottom) {
    for (const char layer : order_) {
      switch (layer) {
        case 'c': top_ = &caching_.emplace(*top_); break;
        case 'f': top_ = &callback_.emplace(*top_, options.on_failure); break;
        case 'h': top_ = &history_.emplace(*top_, options.history); break;
        case 'g':
          if (options.log == nullptr) throw std::invalid_argument("adaptor_stack: a logging layer needs a log");
          top_ = &logging_.emplace(*top_, *options.log);
          break;
        case 'l': top_ = &limiting_.emplace(*top_, options.cap); break;
        case 's': top_ = &statistics_.emplace(*top_); break;
        case 't': top_ = &tracking_.emplace(*top_, options.tracking); break;
        default: throw std::invalid_argument(std::string("adaptor_stack: unknown layer '") + layer + "'");
      }
      layers_.insert(layers_.begin(), top_);
    }
  }
  /// Top layer first: each layer's upstream outlives it.
  ~adaptor_stack() {
    for (auto layer = order_.rbegin(); layer != order_.rend(); ++layer) {
      switch (*layer) {
        case 'c': caching_.reset(); break;
        case 'f': callback_.reset(); break;
        case 'g': logging_.reset(); break;
        case 'h': history_.reset(); break;
        case 'l': limiting_.reset(); break;
        case 's': statistics_.reset(); break;
        case 't': tracking_.reset(); break;
        default: break;
      }
    }
  }
  adaptor_stack(const adaptor_stack&) = delete;
  adaptor_stack& operator=(const adaptor_stack&) = delete;

  /// Where allocations go in.
  [[nodiscard]] stream_ordered_resource& top() const noexcept { return *top_; }
  /// The layers, outermost first.
  [[nodiscard]] const std::vector<stream_ordered_resource*>& layers() const noexcept { return layers_; }

  /// Each layer. \throws std::bad_optional_access where the order has none.
  [[nodiscard]] caching_resource& caching() { return caching_.value(); }
  [[nodiscard]] failure_callback_adaptor& callback() { return callback_.value(); }
  [[nodiscard]] logging_adaptor& logging() { return logging_.value(); }
  [[nodiscard]] history_adaptor& history() { return history_.value(); }
  [[nodiscard]] limiting_adaptor& limiting() { return limiting_.value(); }
  [[nodiscard]] statistics_adaptor& statistics() { return statistics_.value(); }
  [[nodiscard]] tracking_adaptor& tracking() { return tracking_.value(); }

 private:
  std::string order_;
  std::optional<caching_resource> caching_;
  std::optional<failure_callback_adaptor> callback_;
  std::optional<logging_adaptor> logging_;
  std::optional<history_adaptor> history_;
  std::optional<limiting_adaptor> limiting_;
  std::optional<statistics_adaptor> statistics_;
  std::optional<tracking_adaptor> tracking_;
  stream_ordered_resource* top_;
  std::vector<stream_ordered_resource*> layers_;
};

}  // namespace cudapmr::apps
