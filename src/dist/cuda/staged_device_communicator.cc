// MakeStagedDeviceCommunicator (staged_device_communicator.h).
#include "dist/cuda/staged_device_communicator.h"

#include "dist/cuda/host_delegating_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace uniprefill::dist {
namespace {

Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  return Internal(std::string("staged AllReduceDevice: ") + what + ": " + cudaGetErrorString(e));
}

float Bf16ToF32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t F32ToBf16(float f) {  // round to nearest even (finite sums of finite partials)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

class StagedDeviceCommunicator final : public HostDelegatingCommunicator {
 public:
  using HostDelegatingCommunicator::HostDelegatingCommunicator;
  std::string Describe() const override { return host().Describe() + ", device data staged"; }

  Status AllReduceDevice(void* data, int64_t count, DType dtype, void* stream) override {
    if (count < 0) return InvalidArgument("AllReduceDevice: negative count");
    if (dtype != DType::kBF16 && dtype != DType::kF32) {
      return InvalidArgument("AllReduceDevice: bf16 or f32 only");
    }
    if (count == 0) return host().AllReduce(nullptr, 0, ReduceOp::kSum);  // keep in step
    auto s = static_cast<cudaStream_t>(stream);
    const size_t n = static_cast<size_t>(count);
    sums_.resize(n);
    if (dtype == DType::kF32) {
      UP_RETURN_IF_ERROR(FromCuda(
          cudaMemcpyAsync(sums_.data(), data, n * 4, cudaMemcpyDeviceToHost, s), "copy out"));
      UP_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(s), "sync"));
      UP_RETURN_IF_ERROR(host().AllReduce(sums_.data(), count, ReduceOp::kSum));
      UP_RETURN_IF_ERROR(FromCuda(
          cudaMemcpyAsync(data, sums_.data(), n * 4, cudaMemcpyHostToDevice, s), "copy in"));
    } else {
      bits_.resize(n);
      UP_RETURN_IF_ERROR(FromCuda(
          cudaMemcpyAsync(bits_.data(), data, n * 2, cudaMemcpyDeviceToHost, s), "copy out"));
      UP_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(s), "sync"));
      for (size_t i = 0; i < n; ++i) sums_[i] = Bf16ToF32(bits_[i]);
      UP_RETURN_IF_ERROR(host().AllReduce(sums_.data(), count, ReduceOp::kSum));
      for (size_t i = 0; i < n; ++i) bits_[i] = F32ToBf16(sums_[i]);
      UP_RETURN_IF_ERROR(FromCuda(
          cudaMemcpyAsync(data, bits_.data(), n * 2, cudaMemcpyHostToDevice, s), "copy in"));
    }
    // The host buffers are reused by the next call: the copy in must be done with them.
    return FromCuda(cudaStreamSynchronize(s), "sync");
  }

  Status AllGatherDevice(const void* send, void* recv, int64_t bytes, void* stream) override {
    if (bytes < 0) return InvalidArgument("AllGatherDevice: negative size");
    auto s = static_cast<cudaStream_t>(stream);
    const size_t n = static_cast<size_t>(bytes);
    mine_.resize(n);
    gathered_.resize(n * static_cast<size_t>(world_size()));
    if (n > 0) {
      UP_RETURN_IF_ERROR(
          FromCuda(cudaMemcpyAsync(mine_.data(), send, n, cudaMemcpyDeviceToHost, s), "copy out"));
      UP_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(s), "sync"));
    }
    UP_RETURN_IF_ERROR(host().AllGather(mine_.data(), gathered_.data(), bytes));
    if (n == 0) return OkStatus();
    UP_RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(recv, gathered_.data(), gathered_.size(),
                                                cudaMemcpyHostToDevice, s),
                                "copy in"));
    return FromCuda(cudaStreamSynchronize(s), "sync");
  }

 private:
  std::vector<float> sums_;     // f32 [count]: the host's sums
  std::vector<uint16_t> bits_;  // bf16 [count]: the device's data on the host
  std::vector<uint8_t> mine_, gathered_;  // AllGatherDevice: [bytes], [world * bytes]
};

}  // namespace

std::unique_ptr<Communicator> MakeStagedDeviceCommunicator(std::unique_ptr<Communicator> host) {
  return std::make_unique<StagedDeviceCommunicator>(std::move(host));
}

}  // namespace uniprefill::dist
