// Tensor parallelism on the CUDA backend (issue 21): the rank's shard runs the one layer walk like
// the whole model; the walk's ReduceOut sums the row-parallel blocks' partial outputs (o_proj,
// FFN down) over the ranks on the device, and the drops sum their block scores
// (cuda_backend_drops.cc) so that every rank keeps the same rows. MoE layers hold whole experts
// and route over the replicated router (ops/cuda/cuda_moe.h's shards). The embedding and head are
// split by vocabulary rows when the vocabulary divides by the ranks (dist::ShardDefinition): Embed
// all-reduces the embedded rows (zeros for other ranks' tokens) and Finish all-gathers the logits
// on the device, so every rank (a serving follower too) takes part in both. A communicator of one
// rank runs this same path.
#include "core/cuda/cuda_context.h"
#include "backend/cuda/cuda_backend_impl.h"

namespace uniprefill::cuda_backend {

Status CudaBackend::SetTensorParallel(dist::Communicator* comm) {
  if (comm != nullptr && !comm->device_collectives()) {
    return Unimplemented("the CUDA backend needs a communicator with device collectives (NCCL); " +
                         comm->Describe() + " has none");
  }
  if (def_.vocab_sharded() &&
      (comm == nullptr || (def_.vocab_end - def_.vocab_begin) * comm->world_size() !=
                              cfg_.vocab_size)) {
    return InvalidArgument("a vocabulary shard of " +
                           std::to_string(def_.vocab_end - def_.vocab_begin) + " rows of " +
                           std::to_string(cfg_.vocab_size) +
                           " needs the communicator it was cut for");
  }
  comm_ = comm;
  return OkStatus();
}

Status CudaBackend::WaitEvent(cudaEvent_t event) {
  if (comm_ != nullptr) {
    Status st = comm_->WaitForDevice(event);
    if (st.code() != ErrorCode::kUnimplemented) return st;
  }
  UP_CUDA_CHECK(cudaEventSynchronize(event));
  return OkStatus();
}

Status CudaBackend::WaitStream(cudaStream_t stream) {
  if (comm_ == nullptr) {
    UP_CUDA_CHECK(cudaStreamSynchronize(stream));
    return OkStatus();
  }
  if (wait_event_ == nullptr) {
    UP_CUDA_CHECK(cudaEventCreateWithFlags(&wait_event_, cudaEventDisableTiming));
  }
  UP_CUDA_CHECK(cudaEventRecord(wait_event_, stream));
  return WaitEvent(wait_event_);
}

Status CudaBackend::ReduceOut(dist::Communicator& comm) {
  if (!has_out_ || rows_ == 0) return OkStatus();
  // bf16 [rows, hidden]: this rank's partial sums, summed in place (NCCL sums bf16 in bf16).
  return comm.AllReduceDevice(out_.data(), rows_ * cfg_.hidden, DType::kBF16,
                              ctx_.cuda().stream());
}

}  // namespace uniprefill::cuda_backend
