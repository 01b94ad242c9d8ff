// SPDX-License-Identifier: Apache-2.0
// The pool-backed implementation shared by the device, pinned and managed kinds.
#include "cudapmr/device_memory_resource.hpp"
#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/over_aligned_map.hpp"
#include "cudapmr/detail/per_device.hpp"
#include "cudapmr/managed_memory_resource.hpp"
#include "cudapmr/pinned_memory_resource.hpp"

#include "cudapmr/detail/host_topology.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/host_topology.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace cudapmr {
namespace {

/// Why a managed pool with no preferred location never gives pages back: seen
/// on an H100 with driver 580.159, in the driver's own calls alone.
constexpr const char* managed_pages_kept_reason =
    "memory such a pool handed out again after releasing its pages read as zeros on the host, and a prefetch lost "
    "what the device wrote (driver 580.159); set preferred_device for a pool that gives pages back";

/// What `cudaMallocFromPoolAsync` guarantees (and CUDA documents) for every pointer.
constexpr std::size_t pool_alignment = 256;

int current_device_ordinal() { return device::current().ordinal(); }

cudaMemLocation device_location(int device) {
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = device;
  return location;
}

cudaMemLocation host_location(std::optional<int> numa_node) {
  cudaMemLocation location{};
  location.type = numa_node ? cudaMemLocationTypeHostNuma : cudaMemLocationTypeHost;
  location.id = numa_node.value_or(0);
  return location;
}

cudaMemLocation managed_location(const std::optional<int>& preferred_device) {
  if (preferred_device) return device_location(*preferred_device);
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeNone;
  return location;
}

detail::pool_handle default_pool(cudaMemLocation location, cudaMemAllocationType type) {
  cudaMemPool_t pool = nullptr;
  CUDAPMR_CHECK(cudaMemGetDefaultMemPool(&pool, &location, type));
  return {pool, false};
}

detail::pool_handle create_pool(cudaMemLocation location, cudaMemAllocationType type, std::size_t max_size,
                                cudaMemAllocationHandleType handle_types) {
  cudaMemPoolProps properties{};
  properties.allocType = type;
  properties.location = location;
  properties.maxSize = max_size;
  properties.handleTypes = handle_types;
  cudaMemPool_t pool = nullptr;
  CUDAPMR_CHECK(cudaMemPoolCreate(&pool, &properties));
  return {pool, true};
}

/// Host pools are reachable only from the host until access is granted; the
/// pinned kind promises kernels on every device can read and write its memory.
void grant_access_to_all_devices(cudaMemPool_t pool) {
  const int devices = device::count();
  std::vector<cudaMemAccessDesc> access(static_cast<std::size_t>(devices));
  for (int ordinal = 0; ordinal < devices; ++ordinal) {
    access[static_cast<std::size_t>(ordinal)].location = device_location(ordinal);
    access[static_cast<std::size_t>(ordinal)].flags = cudaMemAccessFlagsProtReadWrite;
  }
  CUDAPMR_CHECK(cudaMemPoolSetAccess(pool, access.data(), access.size()));
}

detail::pool_handle with_device_access(detail::pool_handle pool) {
  grant_access_to_all_devices(pool.get());
  return pool;
}

/// The NUMA node a pinned pool is asked for: `asked` (checked), or where
/// empty the node nearest `device`; empty for any node, with a note that says
/// why when the caller did not ask for that.
std::optional<int> pinned_node(const std::optional<int>& asked, int device, std::string& note) {
  if (asked) return *asked == any_numa_node ? std::nullopt : asked;
  std::optional<int> nearest = nearest_numa_node(device);
  if (!nearest)
    note = fmt::format("no NUMA node this process may use is known to be nearest device {}: the kernel places the pages",
                       device);
  return nearest;
}

/// A pinned pool on `node` (the driver's default pool there, or a new one with
/// `options`), every device granted access; where CUDA refuses a pool on that
/// node or access to it, CUDA's plain host pool and a note.
detail::placed_host_pool place_pinned_pool(std::optional<int> node, std::string note, int device,
                                           const pinned_pool_options* options) {
  const auto make = [options](std::optional<int> where) {
    return with_device_access(options == nullptr ? default_pool(host_location(where), cudaMemAllocationTypePinned)
                                                 : create_pool(host_location(where), cudaMemAllocationTypePinned,
                                                               options->max_size, cudaMemHandleTypeNone));
  };
  if (node) {
    int supported = 0;
    CUDAPMR_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrHostNumaMemoryPoolsSupported, device));
    if (supported == 0) {
      note = fmt::format("device {} has no host NUMA memory pools (cudaDevAttrHostNumaMemoryPoolsSupported is 0): "
                         "NUMA node {} was not used, the kernel places the pages",
                         device, *node);
    } else {
      try {
        return {make(node), node, std::move(note), device};
      } catch (const cuda_error& refused) {  // the pool on the node, or a device's access to it
        note = fmt::format("CUDA refused a pinned pool on NUMA node {} ({}): the kernel places the pages", *node,
                           refused.what());
      }
    }
  }
  return {make(std::nullopt), std::nullopt, std::move(note), device};
}

detail::placed_host_pool pinned_pool(const pinned_pool_options* options) {
  const std::optional<int> asked = options != nullptr ? options->numa_node : std::nullopt;
  // An explicit node is checked before any CUDA call.
  if (asked) detail::validate_numa_node(*asked, "pinned_pool_options::numa_node");
  const int device = current_device_ordinal();
  std::string note;
  const std::optional<int> node = pinned_node(asked, device, note);
  return place_pinned_pool(node, std::move(note), device, options);
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute) {
  std::uint64_t value = 0;
  CUDAPMR_CHECK(cudaMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

void set_pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, std::uint64_t value) {
  CUDAPMR_CHECK(cudaMemPoolSetAttribute(pool, attribute, &value));
}

int validated(int device) {
  detail::validate_device_ordinal(device);
  return device;
}

/// The preferred device of valid options. \throws std::invalid_argument for a
/// release threshold a pool with no preferred location cannot honour (before
/// any CUDA call), or a device out of range.
const std::optional<int>& validated_preference(const managed_pool_options& options) {
  if (!options.preferred_device && options.release_threshold != keep_all_memory)
    throw std::invalid_argument(fmt::format(
        "managed_pool_options: a release_threshold of {} bytes needs a preferred_device: a pool with no preferred "
        "location keeps its pages ({})",
        options.release_threshold, managed_pages_kept_reason));
  if (options.preferred_device) detail::validate_device_ordinal(*options.preferred_device);
  else detail::validate_device_ordinal(0);
  return options.preferred_device;
}

}  // namespace

namespace detail {

namespace {
/// The map of `pool`, shared by every resource over it (they compare equal, so
/// one may free what another allocated). Never destroyed: resources destroyed
/// at exit still use it.
std::shared_ptr<over_aligned_map> over_aligned_map_of(cudaMemPool_t pool) {
  static std::mutex mutex;
  static auto* maps = new std::map<cudaMemPool_t, std::weak_ptr<over_aligned_map>>();
  const std::lock_guard lock(mutex);
  std::weak_ptr<over_aligned_map>& slot = (*maps)[pool];
  std::shared_ptr<over_aligned_map> map = slot.lock();
  if (!map) {
    map = std::make_shared<over_aligned_map>();
    slot = map;
  }
  return map;
}
}  // namespace

pool_handle::~pool_handle() {
  if (owned_ && pool_ != nullptr) CUDAPMR_ASSERT_CUDA_SUCCESS(cudaMemPoolDestroy(pool_));
}

pool_handle::pool_handle(pool_handle&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), owned_(std::exchange(other.owned_, false)) {}

}  // namespace detail

// ---- pool_resource ---------------------------------------------------------

pool_resource::pool_resource(memory_kind kind, int device_id, detail::pool_handle pool, const char* name,
                             int stream_device)
    : stream_ordered_resource(kind, device_id),
      pool_(std::move(pool)),
      name_(name),
      bound_stream_(stream_device),
      over_aligned_(detail::over_aligned_map_of(pool_.get())) {}

pool_resource::pool_resource(memory_kind kind, detail::placed_host_pool pool, const char* name)
    : pool_resource(kind, -1, std::move(pool.pool), name, pool.stream_device) {
  host_numa_node_ = pool.numa_node;
  placement_note_ = std::move(pool.note);
}

pool_resource::~pool_resource() {
  // Stream-ordered frees queued on the bound stream must land before an owned
  // pool is destroyed; errors are ignored, as a destructor must not throw.
  static_cast<void>(detail::recover_from(cudaStreamSynchronize(bound_stream_.get())));
}

void pool_resource::configure(std::size_t initial_size, std::size_t release_threshold) {
  set_release_threshold(release_threshold);
  if (initial_size == 0) return;
  void* reservation = allocate_async(initial_size, own_bound_stream());
  deallocate_async(reservation, initial_size, own_bound_stream());
  bound_stream_.synchronize();
}

pool_stats pool_resource::stats() const {
  return {pool_attribute(pool(), cudaMemPoolAttrReservedMemCurrent),
          pool_attribute(pool(), cudaMemPoolAttrReservedMemHigh),
          pool_attribute(pool(), cudaMemPoolAttrUsedMemCurrent),
          pool_attribute(pool(), cudaMemPoolAttrUsedMemHigh)};
}

void pool_resource::reset_peaks() {
  // CUDA accepts only zero for the high-water marks, which resets them to the current values.
  set_pool_attribute(pool(), cudaMemPoolAttrReservedMemHigh, 0);
  set_pool_attribute(pool(), cudaMemPoolAttrUsedMemHigh, 0);
}

void pool_resource::trim_to(std::size_t bytes_to_keep) {
  bound_stream_.synchronize();  // the pmr path's frees must land before the trim
  if (!gives_memory_back()) return;
  CUDAPMR_CHECK(cudaMemPoolTrimTo(pool(), bytes_to_keep));
}

void pool_resource::do_report(resource_state& state) const {
  const pool_stats counters = stats();
  state.used_bytes = counters.used_current;
  state.peak_used_bytes = counters.used_high;
  state.reserved_bytes = counters.reserved_current;
  state.peak_reserved_bytes = counters.reserved_high;
  state.releasable_bytes =
      gives_memory_back() ? counters.reserved_current - std::min(counters.reserved_current, counters.used_current) : 0;
  state.numa_node = host_numa_node_;
  state.note = placement_note_;
}

void pool_resource::do_trim(stream_ref stream) {
  CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));  // the caller's frees must land before the trim
  trim_to(0);
}

std::size_t pool_resource::release_threshold() const {
  return pool_attribute(pool(), cudaMemPoolAttrReleaseThreshold);
}

void pool_resource::set_release_threshold(std::size_t bytes) {
  if (!gives_memory_back() && bytes != keep_all_memory)
    throw std::invalid_argument(fmt::format("{}: a release threshold of {} bytes would give pages back, and this pool "
                                            "keeps them: {}",
                                            description(), bytes, managed_pages_kept_reason));
  set_pool_attribute(pool(), cudaMemPoolAttrReleaseThreshold, bytes);
}

std::string pool_resource::description() const {
  const char* pool_kind = owns_pool() ? "owned pool" : "default pool";
  if (host_numa_node_) return fmt::format("{} (NUMA node {}, {})", name_, *host_numa_node_, pool_kind);
  if (device_id() < 0) return fmt::format("{} ({})", name_, pool_kind);
  return fmt::format("{} (device {}, {})", name_, device_id(), pool_kind);
}

void* pool_resource::allocate_from_pool(std::size_t bytes, std::size_t alignment, stream_ref stream,
                                        std::size_t padding) {
  void* p = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes + padding, pool(), stream.get());
  // A refusal names the bytes asked, not the padded request the pool saw.
  detail::check_cuda_allocation(status, bytes, alignment, [&] { return description(); }, [&] {
    return fmt::format("cudaMallocFromPoolAsync of {} bytes (alignment {}{}) on stream {} from {}", bytes + padding,
                       alignment, padding == 0 ? "" : fmt::format(": {} asked plus {} of padding", bytes, padding),
                       fmt::ptr(stream.get()), description());
  });
  return p;
}

void* pool_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (bytes == 0) return nullptr;  // whatever the alignment: zero bytes are never backed
  if (alignment <= pool_alignment) return allocate_from_pool(bytes, alignment, stream);

  // Over-allocate and align up; rare, so a locked map is cheap enough.
  const std::size_t padding = alignment - pool_alignment;
  if (bytes > std::numeric_limits<std::size_t>::max() - padding)
    throw out_of_memory(bytes, alignment, description(), "the request plus alignment padding overflows size_t");
  void* base = allocate_from_pool(bytes, alignment, stream, padding);
  void* aligned = detail::align_up(base, alignment);
  try {
    over_aligned_->insert(aligned, base);
  } catch (...) {
    static_cast<void>(detail::recover_from(cudaFreeAsync(base, stream.get())));
    throw;
  }
  return aligned;
}

void pool_resource::do_deallocate_async(void* p, std::size_t /*bytes: the pool knows*/, std::size_t alignment,
                                        stream_ref stream) noexcept {
  void* base = alignment > pool_alignment ? over_aligned_->take(p) : p;
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFreeAsync(base, stream.get()));
}

bool pool_resource::do_is_equal(const std::pmr::memory_resource& other) const noexcept {
  const auto* other_pool = dynamic_cast<const pool_resource*>(&other);
  return other_pool != nullptr && other_pool->pool() == pool();
}

// ---- the three kinds ---------------------------------------------------------

device_memory_resource::device_memory_resource(int device)
    : pool_resource(memory_kind::device, device,
                    default_pool(device_location(validated(device)), cudaMemAllocationTypePinned),
                    "device_memory_resource",
                    device) {
  configure(0, keep_all_memory);
}

device_memory_resource::device_memory_resource(int device, const device_pool_options& options)
    : pool_resource(memory_kind::device, device,
                    create_pool(device_location(validated(device)), cudaMemAllocationTypePinned, options.max_size,
                                options.ipc_enabled ? cudaMemHandleTypePosixFileDescriptor : cudaMemHandleTypeNone),
                    "device_memory_resource", device) {
  configure(options.initial_size, options.release_threshold);
}

device_memory_resource& default_device_resource(int device) {
  return detail::per_device_instance<device_memory_resource>(device);
}

pinned_memory_resource::pinned_memory_resource()
    : pool_resource(memory_kind::pinned, pinned_pool(nullptr), "pinned_memory_resource") {
  configure(0, keep_all_memory);
}

pinned_memory_resource::pinned_memory_resource(const pinned_pool_options& options)
    : pool_resource(memory_kind::pinned, pinned_pool(&options), "pinned_memory_resource") {
  configure(options.initial_size, options.release_threshold);
}

managed_memory_resource::managed_memory_resource()
    : pool_resource(memory_kind::managed, -1, default_pool(managed_location(std::nullopt), cudaMemAllocationTypeManaged),
                    "managed_memory_resource", current_device_ordinal()) {
  configure(0, keep_all_memory);
}

// Braces: the options are checked, before any CUDA call, ahead of the other arguments.
managed_memory_resource::managed_memory_resource(const managed_pool_options& options)
    : pool_resource{memory_kind::managed, validated_preference(options).value_or(-1),
                    create_pool(managed_location(options.preferred_device), cudaMemAllocationTypeManaged, 0,
                                cudaMemHandleTypeNone),
                    "managed_memory_resource",
                    options.preferred_device ? *options.preferred_device : current_device_ordinal()} {
  configure(options.initial_size, options.release_threshold);
}

}  // namespace cudapmr
