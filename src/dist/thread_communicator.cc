#include "dist/thread_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

namespace uniprefill::dist {
namespace {

// What one rank brought to the current collective.
struct Arrival {
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  int root = 0;
};

struct World {
  explicit World(int n) : size(n), arrivals(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;  // collectives completed
  int64_t failed = -1;     // a collective whose ranks disagreed on its size or root
  std::vector<Arrival> arrivals;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<World> world, int rank, const CommOptions& options)
      : world_(std::move(world)), rank_(rank), options_(options) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_->size; }
  std::string Describe() const override {
    return "thread rank " + std::to_string(rank_) + " of " + std::to_string(world_->size);
  }

  Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    if (count < 0) return InvalidArgument("AllReduce: negative count");
    return Meet("AllReduce", {data, data, count, 0}, [op](std::vector<Arrival>& a) {
      const int64_t n = a[0].count;
      std::vector<float> acc(static_cast<const float*>(a[0].send),
                             static_cast<const float*>(a[0].send) + n);
      for (size_t r = 1; r < a.size(); ++r) {
        const float* x = static_cast<const float*>(a[r].send);
        for (int64_t i = 0; i < n; ++i) acc[i] = op == ReduceOp::kSum ? acc[i] + x[i]
                                                                      : std::max(acc[i], x[i]);
      }
      for (Arrival& r : a) std::memcpy(r.recv, acc.data(), sizeof(float) * n);
    });
  }

  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    if (bytes < 0) return InvalidArgument("AllGather: negative size");
    return Meet("AllGather", {send, recv, bytes, 0}, [](std::vector<Arrival>& a) {
      const int64_t n = a[0].count;
      // Every rank's send first into a copy: a rank's recv may alias its send.
      std::vector<char> all(static_cast<size_t>(n) * a.size());
      for (size_t r = 0; r < a.size(); ++r) std::memcpy(all.data() + r * n, a[r].send, n);
      for (Arrival& r : a) std::memcpy(r.recv, all.data(), all.size());
    });
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    if (bytes < 0 || root < 0 || root >= world_->size) {
      return InvalidArgument("Broadcast: root " + std::to_string(root) + " in a world of " +
                             std::to_string(world_->size));
    }
    return Meet("Broadcast", {data, data, bytes, root}, [](std::vector<Arrival>& a) {
      const Arrival& src = a[a[0].root];
      for (Arrival& r : a) {
        if (r.recv != src.send) std::memcpy(r.recv, src.send, static_cast<size_t>(r.count));
      }
    });
  }

  Status Barrier() override {
    return Meet("Barrier", {}, [](std::vector<Arrival>&) {});
  }

 private:
  // Waits for every rank (up to the timeout); the last to arrive runs `work` on all arrivals.
  template <typename Work>
  Status Meet(const char* what, Arrival mine, Work work) {
    World& w = *world_;
    std::unique_lock<std::mutex> lock(w.mu);
    if (broken_) return Unavailable(std::string(what) + ": an earlier collective failed");
    const int64_t gen = w.generation;
    w.arrivals[rank_] = mine;
    if (++w.arrived == w.size) {
      for (const Arrival& a : w.arrivals) {
        if (a.count != mine.count || a.root != mine.root) {
          // Ranks disagree on the collective's size: a bug in the caller; fail every rank.
          w.failed = gen;
          w.arrived = 0;
          ++w.generation;
          w.cv.notify_all();
          return Internal(std::string(what) + ": ranks passed different sizes or roots");
        }
      }
      work(w.arrivals);
      w.arrived = 0;
      ++w.generation;
      w.cv.notify_all();
      return OkStatus();
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
    if (!w.cv.wait_until(lock, deadline, [&] { return w.generation != gen; })) {
      broken_ = true;
      return Unavailable(std::string(what) + " on thread rank " + std::to_string(rank_) +
                         ": the other ranks did not join within " +
                         std::to_string(options_.timeout_s) + " s");
    }
    if (w.failed == gen) {
      return Internal(std::string(what) + ": ranks passed different sizes or roots");
    }
    return OkStatus();
  }

  std::shared_ptr<World> world_;
  int rank_;
  CommOptions options_;
  bool broken_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeThreadCommunicators(int world,
                                                                   const CommOptions& options) {
  auto shared = std::make_shared<World>(world);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world; ++r) {
    out.push_back(std::make_unique<ThreadCommunicator>(shared, r, options));
  }
  return out;
}

}  // namespace uniprefill::dist
