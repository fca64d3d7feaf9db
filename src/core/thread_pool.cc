#include "core/thread_pool.h"

#include <algorithm>

namespace uniprefill {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunk(int index) {
  if (job_dynamic_chunk_ > 0) {
    for (;;) {
      const int64_t begin = job_next_.fetch_add(job_dynamic_chunk_, std::memory_order_relaxed);
      if (begin >= job_n_) return;
      (*job_)(begin, std::min(job_n_, begin + job_dynamic_chunk_), index);
    }
  }
  if (index < job_chunks_) {
    const int64_t per = (job_n_ + job_chunks_ - 1) / job_chunks_;
    const int64_t begin = index * per;
    const int64_t end = std::min(job_n_, begin + per);
    if (begin < end) (*job_)(begin, end, index);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little first: decode steps issue many short loops back to back.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    RunChunk(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
  Dispatch(n, chunks, /*dynamic_chunk=*/0, fn);
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t chunk,
                                    const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, (n + chunk - 1) / chunk));
  Dispatch(n, chunks, chunk, fn);
}

void ThreadPool::Dispatch(int64_t n, int chunks, int64_t dynamic_chunk,
                          const std::function<void(int64_t, int64_t, int)>& fn) {
  if (chunks <= 1 || in_parallel_) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_parallel_ = true;
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    job_dynamic_chunk_ = dynamic_chunk;
    job_next_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  RunChunk(0);
  while (pending_.load(std::memory_order_acquire) != 0) {
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_parallel_ = false;
  job_ = nullptr;
}

}  // namespace uniprefill
