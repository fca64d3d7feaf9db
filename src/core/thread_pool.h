// ThreadPool: a fixed set of worker threads for data-parallel loops over every core.
//
// Goals: ParallelFor with static, contiguous partitioning (deterministic results: each index is
// always handled by one call, and reductions are the caller's per-chunk business); low overhead
// for the many small loops of a decode step (workers spin briefly before sleeping).
// Non-goals: task graphs, futures, nested parallelism (a nested ParallelFor runs inline).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace uniprefill {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware thread. The calling thread is worker 0.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n). Chunks are at least
  // `grain` long. Blocks until all are done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t, int)>& fn);

  // Calls fn(begin, end, thread_index) on the chunks [k * chunk, (k + 1) * chunk) of [0, n),
  // handed out in order to whichever thread is free: a thread may run many chunks, and which
  // thread runs a chunk varies from call to call. For loops whose every index is computed alone
  // (a matvec's output rows) on machines where a core can be slowed by others (a shared VM):
  // static halves make the fast thread wait for the slow one; here it takes more chunks.
  // Blocks until all are done.
  void ParallelForDynamic(int64_t n, int64_t chunk,
                          const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);
  void RunChunk(int index);
  void Dispatch(int64_t n, int chunks, int64_t dynamic_chunk,
                const std::function<void(int64_t, int64_t, int)>& fn);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  bool in_parallel_ = false;
  // Current job (valid while pending_ > 0).
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  int64_t job_dynamic_chunk_ = 0;       // > 0: ParallelForDynamic's chunk length
  std::atomic<int64_t> job_next_{0};    // ParallelForDynamic: the next unclaimed index
};

}  // namespace uniprefill
