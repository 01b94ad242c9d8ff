// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file resource_adaptor.hpp
/// The one base of every adaptor: a stream_ordered_resource over an upstream one.

#include "cudapmr/stream_ordered_resource.hpp"

#include <string>

namespace cudapmr {

/// A resource that adds behaviour around an upstream `stream_ordered_resource`
/// it does not own. It hands out the upstream's kind of memory, on the
/// upstream's device, and its pmr path is ordered on the upstream's bound
/// stream. Adaptors stack in any order; the upstream must outlive the adaptor.
class resource_adaptor : public stream_ordered_resource {
 public:
  /// The resource this adaptor draws from.
  [[nodiscard]] stream_ordered_resource& upstream_resource() const noexcept { return *upstream_; }

 protected:
  explicit resource_adaptor(stream_ordered_resource& upstream) noexcept
      : stream_ordered_resource(upstream.kind(), upstream.device_id()), upstream_(&upstream) {}

  /// "<name> over <upstream's description>", for `description()`.
  [[nodiscard]] std::string describe_as(const char* name) const { return std::string(name) + " over " + upstream_->description(); }

 private:
  /// An adaptor holds nothing of its own: the upstream trims.
  void do_trim(stream_ref stream) override { upstream_->trim(stream); }
  [[nodiscard]] const stream_ordered_resource* do_upstream() const noexcept override { return upstream_; }
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return own_bound_stream(*upstream_); }
  [[nodiscard]] const stream_ordered_resource& do_bound_stream_owner() const noexcept override {
    return bound_stream_owner(*upstream_);
  }

  stream_ordered_resource* upstream_;
};

}  // namespace cudapmr
