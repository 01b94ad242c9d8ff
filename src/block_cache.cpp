#include "cudapmr/detail/block_cache.hpp"

#include "cudapmr/detail/thread_ordinal.hpp"

namespace cudapmr::detail {

namespace {

/// The calling thread's shard among `count`.
std::size_t this_thread_shard(std::size_t count) noexcept {
  return static_cast<std::size_t>(thread_ordinal() % count);
}

}  // namespace

// ---- free_lists -------------------------------------------------------------

void* free_lists::pop(std::size_t size_class) noexcept {
  std::vector<void*>& list = lists_[size_class];
  if (list.empty()) return nullptr;
  void* pointer = list.back();
  list.pop_back();
  bytes_ -= size_class_bytes(size_class);
  --blocks_;
  return pointer;
}

bool free_lists::push(std::size_t size_class, void* pointer) noexcept {
  try {
    lists_[size_class].push_back(pointer);
  } catch (...) {
    return false;
  }
  bytes_ += size_class_bytes(size_class);
  ++blocks_;
  return true;
}

void free_lists::drain_into(std::vector<cached_block>& out) {
  for (std::size_t size_class = 0; size_class < lists_.size(); ++size_class) {
    for (void* pointer : lists_[size_class]) out.push_back({pointer, size_class});
    lists_[size_class].clear();
    lists_[size_class].shrink_to_fit();
  }
  bytes_ = 0;
  blocks_ = 0;
}

// ---- ready_block_cache --------------------------------------------------------

void* ready_block_cache::take_from(shard& from, std::size_t size_class) noexcept {
  if (from.blocks.load(std::memory_order_relaxed) == 0) return nullptr;
  const std::lock_guard lock(from.mutex);
  void* pointer = from.lists.pop(size_class);
  from.blocks.store(from.lists.blocks(), std::memory_order_relaxed);
  return pointer;
}

void* ready_block_cache::take(std::size_t size_class) noexcept {
  const std::size_t own = this_thread_shard(shard_count);
  for (std::size_t offset = 0; offset < shard_count; ++offset)
    if (void* pointer = take_from(shards_[(own + offset) % shard_count], size_class)) return pointer;
  return nullptr;
}

bool ready_block_cache::give(std::size_t size_class, void* pointer) noexcept {
  shard& own = shards_[this_thread_shard(shard_count)];
  const std::lock_guard lock(own.mutex);
  const bool kept = own.lists.push(size_class, pointer);
  own.blocks.store(own.lists.blocks(), std::memory_order_relaxed);
  return kept;
}

void ready_block_cache::drain_into(std::vector<cached_block>& out) {
  for (shard& each : shards_) {
    const std::lock_guard lock(each.mutex);
    each.lists.drain_into(out);
    each.blocks.store(0, std::memory_order_relaxed);
  }
}

std::size_t ready_block_cache::bytes() const {
  std::size_t total = 0;
  for (const shard& each : shards_) {
    const std::lock_guard lock(each.mutex);
    total += each.lists.bytes();
  }
  return total;
}

std::size_t ready_block_cache::blocks() const {
  std::size_t total = 0;
  for (const shard& each : shards_) total += each.blocks.load(std::memory_order_relaxed);
  return total;
}

// ---- stream_block_cache ---------------------------------------------------------

namespace {

std::uint64_t next_cache_identity() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

/// The entry this thread used last, and whose it was.
struct entry_memo {
  std::uint64_t cache = 0;
  stream_block_cache::stream_key key{};
  stream_block_cache::entry* found = nullptr;
};
thread_local entry_memo last_entry;

}  // namespace

stream_block_cache::stream_block_cache() : identity_(next_cache_identity()) {}

stream_block_cache::stream_key stream_block_cache::key_of(stream_ref stream) noexcept {
  const cudaStream_t handle = stream.get();
  return {handle, handle == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id{}};
}

stream_block_cache::entry* stream_block_cache::entry_of(stream_ref stream) noexcept {
  const stream_key key = key_of(stream);
  if (last_entry.cache == identity_ && last_entry.key == key) return last_entry.found;

  // Stream handles are pointers to aligned objects: drop the low bits, mix the rest.
  auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key.stream) >> 4);
  bits ^= static_cast<std::uint64_t>(std::hash<std::thread::id>{}(key.thread));
  bits *= 0x9e3779b97f4a7c15ull;
  shard& home = shards_[static_cast<std::size_t>(bits >> 58)];  // the top 6 bits: 64 shards
  entry* found = nullptr;
  {
    const std::lock_guard lock(home.mutex);
    for (const auto& each : home.entries)
      if (each->key == key) found = each.get();
    if (found == nullptr) {
      try {
        found = home.entries.emplace_back(std::make_unique<entry>(key)).get();
      } catch (...) {
        return nullptr;
      }
    }
  }
  last_entry = {identity_, key, found};
  return found;
}

void* stream_block_cache::take(stream_ref stream, std::size_t size_class) noexcept {
  entry* home = entry_of(stream);
  if (home == nullptr) return nullptr;
  const std::lock_guard lock(home->mutex);
  return home->lists.pop(size_class);
}

bool stream_block_cache::give(stream_ref stream, std::size_t size_class, void* pointer) noexcept {
  entry* home = entry_of(stream);
  if (home == nullptr) return false;
  const std::lock_guard lock(home->mutex);
  return home->lists.push(size_class, pointer);
}

void stream_block_cache::drain_into(std::vector<cached_block>& out) {
  for (shard& each : shards_) {
    const std::lock_guard lock(each.mutex);
    for (const auto& stream_entry : each.entries) {
      const std::lock_guard entry_lock(stream_entry->mutex);
      stream_entry->lists.drain_into(out);
    }
  }
}

std::size_t stream_block_cache::bytes() const {
  std::size_t total = 0;
  for (const shard& each : shards_) {
    const std::lock_guard lock(each.mutex);
    for (const auto& stream_entry : each.entries) {
      const std::lock_guard entry_lock(stream_entry->mutex);
      total += stream_entry->lists.bytes();
    }
  }
  return total;
}

std::size_t stream_block_cache::blocks() const {
  std::size_t total = 0;
  for (const shard& each : shards_) {
    const std::lock_guard lock(each.mutex);
    for (const auto& stream_entry : each.entries) {
      const std::lock_guard entry_lock(stream_entry->mutex);
      total += stream_entry->lists.blocks();
    }
  }
  return total;
}

// ---- cache_counters -------------------------------------------------------------

cache_counters::counters& cache_counters::local() noexcept { return shards_[this_thread_shard(shards_.size())]; }

std::uint64_t cache_counters::hits() const noexcept {
  std::uint64_t total = 0;
  for (const counters& each : shards_) total += each.hits.load(std::memory_order_relaxed);
  return total;
}

std::uint64_t cache_counters::misses() const noexcept {
  std::uint64_t total = 0;
  for (const counters& each : shards_) total += each.misses.load(std::memory_order_relaxed);
  return total;
}

}  // namespace cudapmr::detail
