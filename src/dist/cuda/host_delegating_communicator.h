// The base of the device transports (nccl_communicator.h, staged_device_communicator.h): rank,
// world and the host collectives are those of the host communicator it wraps (owned); a subclass
// adds the device collectives.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "dist/communicator.h"

namespace uniprefill::dist {

class HostDelegatingCommunicator : public Communicator {
 public:
  explicit HostDelegatingCommunicator(std::unique_ptr<Communicator> host)
      : host_(std::move(host)) {}
  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return host_->AllReduce(data, count, op);
  }
  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    return host_->AllGather(send, recv, bytes);
  }
  Status Broadcast(void* data, int64_t bytes, int root) override {
    return host_->Broadcast(data, bytes, root);
  }
  Status Barrier() override { return host_->Barrier(); }
  bool device_collectives() const override { return true; }

 protected:
  Communicator& host() const { return *host_; }

 private:
  std::unique_ptr<Communicator> host_;
};

}  // namespace uniprefill::dist
