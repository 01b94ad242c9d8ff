// SPDX-License-Identifier: Apache-2.0
#pragma once
// A persistent pool of host threads, and host copies split over it
// (src/host_thread_pool.cpp). The staged copies between pageable and device
// memory use it: one thread copies host memory at a quarter of what the
// host's memory system gives several.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cudapmr::detail {

/// The smallest piece of a host copy given to one thread (about 50 us of one
/// thread's copying): smaller pieces cost more to hand out than they save.
inline constexpr std::size_t min_host_copy_part = std::size_t{128} << 10;
/// Pieces of a host copy per thread: threads that finish early take more, so
/// the last piece, not a whole share, is what the others may wait for.
inline constexpr std::size_t host_copy_parts_per_thread = 8;
/// Piece boundaries fall on multiples of this (one page).
inline constexpr std::size_t host_copy_granule = std::size_t{4} << 10;
/// The most threads a host copy uses: host memory bandwidth saturates near it.
inline constexpr std::size_t max_host_copy_threads = 16;

/// A piece of a larger range.
struct byte_range {
  std::size_t offset = 0;
  std::size_t bytes = 0;
  friend bool operator==(const byte_range&, const byte_range&) = default;
};

/// The `index`-th of `parts` consecutive pieces that cover `bytes`: piece
/// boundaries on multiples of `granule`, sizes differing by at most one
/// granule, the last piece ending at `bytes`. Pieces are empty only where
/// `bytes` has fewer granules than `parts`. \pre index < parts, granule > 0.
[[nodiscard]] byte_range partition(std::size_t bytes, std::size_t parts, std::size_t index,
                                   std::size_t granule) noexcept;

/// Into how many pieces to split a host copy of `bytes` over `threads` threads:
/// pieces of at least `min_host_copy_part`, at most `host_copy_parts_per_thread`
/// per thread, one where there is one thread.
[[nodiscard]] std::size_t host_copy_parts(std::size_t bytes, std::size_t threads) noexcept;

/// The threads the library's host copies use on a machine with
/// `hardware_threads` (0 where unknown): all, at most `max_host_copy_threads`.
[[nodiscard]] std::size_t host_copy_threads(unsigned hardware_threads) noexcept;

/// A fixed set of threads that run the parts of a job together with the
/// thread that submits it; jobs from several threads may run at once. Workers
/// spin briefly before sleeping, since a pipelined caller submits its next job
/// within microseconds. Destruction stops and joins the workers.
///
/// A pool on a NUMA node has workers that keep to the node's processors; a
/// submitter helps only where it runs on that node too, and otherwise waits.
///
/// Fork-safe: a child forked while pools exist gets them with no workers (the
/// workers were the parent's threads), so its jobs run on the calling thread,
/// and its exit joins nothing that is not there. A job's parts must not fork.
class host_thread_pool final {
 public:
  /// \param threads the threads a job may use, the caller included: `threads - 1` workers.
  explicit host_thread_pool(std::size_t threads);
  /// As above, the workers bound to the processors of `numa_node` (any
  /// processor for `any_numa_node`). \throws std::invalid_argument for a node the machine lacks.
  host_thread_pool(std::size_t threads, int numa_node);
  ~host_thread_pool();
  host_thread_pool(const host_thread_pool&) = delete;
  host_thread_pool& operator=(const host_thread_pool&) = delete;

  /// The threads a job may use: the workers and the caller (who, on a pool
  /// on a node, helps only where it runs on that node).
  [[nodiscard]] std::size_t concurrency() const noexcept { return workers_.size() + 1; }
  /// The node whose processors the workers run on, or `any_numa_node`.
  [[nodiscard]] int numa_node() const noexcept { return numa_node_; }
  /// Workers the system let keep to the node (all of them, where it did).
  [[nodiscard]] std::size_t bound_workers() const noexcept { return bound_workers_.load(std::memory_order_relaxed); }

  /// Calls `body(i)` once for each i in [0, parts), on the workers and (where
  /// it helps, above) the calling thread, and returns when all calls have returned.
  /// \throws the first exception a call threw, once all calls have returned.
  void run(std::size_t parts, const std::function<void(std::size_t)>& body);

 private:
  struct job {
    const std::function<void(std::size_t)>* body = nullptr;
    std::size_t parts = 0;
    std::size_t next = 0;                  // the next unclaimed part; guarded by mutex_
    std::atomic<std::size_t> finished{0};  // written under mutex_, read by the spinning submitter
    std::exception_ptr error;              // guarded by mutex_
  };

  /// Whether the calling thread runs parts of its job: not where the pool is
  /// on a node and the caller may run elsewhere (a caller spinning on the
  /// node's processors would take them from the workers, one elsewhere would
  /// copy through the far socket).
  [[nodiscard]] bool caller_helps() const noexcept;
  void start_workers(std::size_t workers);
  void work();
  /// Forgets the parent's workers and jobs in a forked child; `mutex_` was
  /// locked by the forking thread (before_fork) and is released.
  void forget_parent_threads() noexcept;
  static void before_fork() noexcept;
  static void after_fork_in_parent() noexcept;
  static void after_fork_in_child() noexcept;
  /// Stops and joins the workers.
  void stop() noexcept;
  /// Claims the next part of `task`, dequeuing it once all parts are claimed. Needs `mutex_` held.
  std::size_t claim(job& task);
  /// Runs one part with `lock` released, then re-locks and counts it finished.
  void execute(job& task, std::size_t part, std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::deque<job*> jobs_;              // jobs with unclaimed parts
  std::atomic<bool> has_work_{false};  // !jobs_.empty(), read without the lock by spinning workers
  bool stopping_ = false;
  int numa_node_ = -1;  // any_numa_node (host_topology.hpp)
  std::atomic<std::size_t> bound_workers_{0};
  std::atomic<std::size_t> started_workers_{0};  // a pool on a node is ready once all are bound
  std::vector<std::thread> workers_;
};

/// The library's pool for host copies: created at first use with
/// `host_copy_threads(std::thread::hardware_concurrency())` threads, never
/// destroyed (usable during exit); its idle workers end with the process.
host_thread_pool& host_copy_pool();
/// As above, with `host_copy_threads` of the node's processors as workers, on
/// `numa_node` (`any_numa_node`: the pool above). One per node.
/// \throws std::invalid_argument for a node the machine does not have.
host_thread_pool& host_copy_pool(int numa_node);

/// `std::memcpy` of `bytes`, split into `host_copy_parts` pieces over `pool`.
void parallel_memcpy(void* destination, const void* source, std::size_t bytes, host_thread_pool& pool);

}  // namespace cudapmr::detail
