// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/host_thread_pool.hpp"

#include "cudapmr/detail/host_topology.hpp"
#include "cudapmr/host_topology.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <new>

namespace cudapmr::detail {
namespace {

/// How long an idle thread polls before it sleeps: longer than the gap between
/// the jobs of a staged copy (a DMA launch and an event), far shorter than a
/// copy, so that a pipeline never pays for waking its threads.
constexpr auto spin_time = std::chrono::microseconds(50);

/// Tells the core that this is a spin loop, so that it yields to a sibling hardware thread.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Polls `done` for up to `spin_time`; true once it holds.
template <class Predicate>
bool spin_until(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + spin_time;
  for (unsigned round = 1;; ++round) {
    if (done()) return true;
    cpu_relax();
    if (round % 64 == 0 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

/// Calls `body(part)`; returns what it threw.
std::exception_ptr call(const std::function<void(std::size_t)>& body, std::size_t part) noexcept {
  try {
    body(part);
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

/// Every live pool, for the fork handlers.
struct pool_registry {
  std::mutex mutex;
  std::vector<host_thread_pool*> pools;
};

pool_registry& registry() {
  static auto* pools = new pool_registry();  // never destroyed: a fork may come during exit
  return *pools;
}

}  // namespace

byte_range partition(std::size_t bytes, std::size_t parts, std::size_t index, std::size_t granule) noexcept {
  const std::size_t granules = bytes / granule + (bytes % granule != 0 ? 1 : 0);
  const std::size_t each = granules / parts;
  const std::size_t larger = granules % parts;  // the first `larger` pieces get one granule more
  const std::size_t first = index * each + std::min(index, larger);
  const std::size_t count = each + (index < larger ? 1 : 0);
  // Granule `n` starts at n * granule, below `bytes` for every n < granules (no overflow); the last ends at `bytes`.
  const auto start_of = [&](std::size_t n) { return n >= granules ? bytes : n * granule; };
  const std::size_t begin = start_of(first);
  return {begin, start_of(first + count) - begin};
}

std::size_t host_copy_parts(std::size_t bytes, std::size_t threads) noexcept {
  if (threads <= 1) return 1;
  const std::size_t pieces = std::max<std::size_t>(1, bytes / min_host_copy_part);
  return std::min(pieces, threads * host_copy_parts_per_thread);
}

std::size_t host_copy_threads(unsigned hardware_threads) noexcept {
  return std::clamp<std::size_t>(hardware_threads, 1, max_host_copy_threads);
}

host_thread_pool::host_thread_pool(std::size_t threads) { start_workers(threads > 1 ? threads - 1 : 0); }

host_thread_pool::host_thread_pool(std::size_t threads, int numa_node) : numa_node_(numa_node) {
  detail::validate_numa_node(numa_node, "host_thread_pool");
  start_workers(threads > 1 ? threads - 1 : 0);
}

bool host_thread_pool::caller_helps() const noexcept {
  return numa_node_ == any_numa_node || this_thread_is_on_numa_node(numa_node_);
}

void host_thread_pool::start_workers(std::size_t workers) {
  static std::once_flag handlers;
  std::call_once(handlers, [] { ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  {
    const std::lock_guard lock(registry().mutex);
    registry().pools.push_back(this);
  }
  try {
    workers_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i) workers_.emplace_back([this] {
      if (numa_node_ != any_numa_node && bind_this_thread_to_numa_node(numa_node_))
        bound_workers_.fetch_add(1, std::memory_order_relaxed);
      started_workers_.fetch_add(1, std::memory_order_release);
      started_workers_.notify_all();
      work();
    });
  } catch (...) {
    stop();  // join the threads already started
    const std::lock_guard lock(registry().mutex);
    std::erase(registry().pools, this);  // a later fork must not lock this object's mutex
    throw;
  }
  // Workers of a pool on a node bind themselves first, so that its first job runs where it should.
  for (std::size_t started = 0; (started = started_workers_.load(std::memory_order_acquire)) < workers;)
    started_workers_.wait(started, std::memory_order_acquire);
}

host_thread_pool::~host_thread_pool() {
  stop();
  const std::lock_guard lock(registry().mutex);
  std::erase(registry().pools, this);
}

// A fork copies the pools' memory but only the forking thread: the handlers
// hold every pool's lock across the fork, so the child finds them consistent.
void host_thread_pool::before_fork() noexcept {
  registry().mutex.lock();
  for (host_thread_pool* pool : registry().pools) pool->mutex_.lock();
}

void host_thread_pool::after_fork_in_parent() noexcept {
  for (host_thread_pool* pool : registry().pools) pool->mutex_.unlock();
  registry().mutex.unlock();
}

void host_thread_pool::after_fork_in_child() noexcept {
  for (host_thread_pool* pool : registry().pools) pool->forget_parent_threads();
  registry().mutex.unlock();
}

void host_thread_pool::forget_parent_threads() noexcept {
  // The thread objects name the parent's threads: never joined nor destroyed
  // here. They are kept where a leak checker sees them as still reachable.
  static auto* forgotten = new std::vector<std::vector<std::thread>>();  // NOLINT: never destroyed
  try {
    forgotten->push_back(std::move(workers_));
  } catch (...) {
    // With no memory for that, abandon them in place instead.
    new (&workers_) std::vector<std::thread>();
  }
  workers_.clear();
  jobs_.clear();  // their submitters were other threads of the parent
  has_work_.store(false, std::memory_order_relaxed);
  stopping_ = false;
  // Parent threads may have been waiting on these: start them afresh.
  new (&wake_) std::condition_variable();
  new (&done_) std::condition_variable();
  mutex_.unlock();
}

void host_thread_pool::stop() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_)
    if (worker.joinable()) worker.join();
  workers_.clear();
}

std::size_t host_thread_pool::claim(job& task) {
  const std::size_t part = task.next++;
  if (task.next == task.parts) {
    jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &task));
    has_work_.store(!jobs_.empty(), std::memory_order_relaxed);
  }
  return part;
}

void host_thread_pool::execute(job& task, std::size_t part, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  const std::exception_ptr error = call(*task.body, part);
  lock.lock();
  if (error && !task.error) task.error = error;
  // The submitter may return the moment `finished` reaches `parts`: read
  // nothing of `task` after the increment.
  const std::size_t parts = task.parts;
  if (task.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == parts) done_.notify_all();
}

void host_thread_pool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (jobs_.empty() && !stopping_) {
      lock.unlock();
      spin_until([this] { return has_work_.load(std::memory_order_relaxed); });
      lock.lock();
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    }
    if (jobs_.empty()) return;  // stopping, with nothing left to run
    job& task = *jobs_.front();
    execute(task, claim(task), lock);
  }
}

void host_thread_pool::run(std::size_t parts, const std::function<void(std::size_t)>& body) {
  if (parts == 0) return;
  const bool helping = workers_.empty() || caller_helps();
  if (workers_.empty() || (parts == 1 && helping)) {
    std::exception_ptr error;
    for (std::size_t part = 0; part < parts; ++part)
      if (std::exception_ptr thrown = call(body, part); thrown && !error) error = thrown;
    if (error) std::rethrow_exception(error);
    return;
  }
  job task;
  task.body = &body;
  task.parts = parts;
  std::unique_lock lock(mutex_);
  jobs_.push_back(&task);
  has_work_.store(true, std::memory_order_relaxed);
  lock.unlock();
  // Wake only as many sleepers as there are parts for (spinning ones need none).
  const std::size_t for_workers = helping ? parts - 1 : parts;
  for (std::size_t i = 0, wanted = std::min(for_workers, workers_.size()); i < wanted; ++i) wake_.notify_one();
  if (helping) {
    lock.lock();
    while (task.next < task.parts) execute(task, claim(task), lock);
    lock.unlock();
  }
  if (!spin_until([&task] { return task.finished.load(std::memory_order_acquire) == task.parts; })) {
    lock.lock();
    done_.wait(lock, [&task] { return task.finished.load(std::memory_order_acquire) == task.parts; });
    lock.unlock();
  }
  // All parts have finished, so no thread writes `error` any more.
  if (task.error) std::rethrow_exception(task.error);
}

host_thread_pool& host_copy_pool() {
  // Never destroyed: copies may run during exit (an exit handler's, the
  // never-destroyed staging cache's), after any destructor registered at its
  // first use. Its workers are neither joined nor detached: they sleep on the
  // pool's condition variable, which stays valid, until the process ends, and
  // a leak checker finds the pool reachable through this pointer.
  static auto* pool = new host_thread_pool(host_copy_threads(std::thread::hardware_concurrency()));
  return *pool;
}

host_thread_pool& host_copy_pool(int numa_node) {
  if (numa_node == any_numa_node) return host_copy_pool();
  detail::validate_numa_node(numa_node, "host_copy_pool");
  // Never destroyed, as above; one pool per node, made at its first copy.
  static std::mutex mutex;
  static auto* pools = new std::map<int, host_thread_pool*>();
  const std::lock_guard lock(mutex);
  host_thread_pool*& pool = (*pools)[numa_node];
  if (pool == nullptr) {
    const auto processors = static_cast<unsigned>(std::min<std::size_t>(numa_node_processors(numa_node), 1U << 16));
    pool = new host_thread_pool(host_copy_threads(processors), numa_node);
  }
  return *pool;
}

void parallel_memcpy(void* destination, const void* source, std::size_t bytes, host_thread_pool& pool) {
  auto* to = static_cast<unsigned char*>(destination);
  const auto* from = static_cast<const unsigned char*>(source);
  const std::size_t parts = host_copy_parts(bytes, pool.concurrency());
  pool.run(parts, [=](std::size_t part) {
    const byte_range piece = partition(bytes, parts, part, host_copy_granule);
    std::memcpy(to + piece.offset, from + piece.offset, piece.bytes);
  });
}

}  // namespace cudapmr::detail
