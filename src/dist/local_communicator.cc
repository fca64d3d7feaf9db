// MakeLocalCommunicator (communicator.h): the world of one rank.
#include <cstring>

#include "dist/communicator.h"

namespace uniprefill::dist {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string Describe() const override { return "local rank 0 of 1"; }
  Status AllReduce(float*, int64_t count, ReduceOp) override {
    return count < 0 ? InvalidArgument("AllReduce: negative count") : OkStatus();
  }
  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    if (bytes < 0) return InvalidArgument("AllGather: negative size");
    if (bytes > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(bytes));
    return OkStatus();
  }
  Status Broadcast(void*, int64_t bytes, int root) override {
    if (bytes < 0 || root != 0) {
      return InvalidArgument("Broadcast: root " + std::to_string(root) + " in a world of 1");
    }
    return OkStatus();
  }
  Status Barrier() override { return OkStatus(); }
  // The sum over one rank is the data itself: nothing to enqueue.
  Status AllReduceDevice(void*, int64_t count, DType, void*) override {
    return count < 0 ? InvalidArgument("AllReduceDevice: negative count") : OkStatus();
  }
  bool device_collectives() const override { return true; }
};

}  // namespace

std::unique_ptr<Communicator> MakeLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace uniprefill::dist
