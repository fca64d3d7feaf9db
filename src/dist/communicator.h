// Collectives between the ranks of a tensor-parallel job (issue 21): the interface the sharded
// model and the scheduler's step broadcast will use, with one implementation per transport:
//   local  world size 1 (every collective is a copy or nothing): TP=1 runs the same code path;
//   MPI    OpenMPI (Debian's openmpi-bin / libopenmpi-dev) for the CPU backend, one process per
//          rank under `mpirun`; host pointers;
//   NCCL   for the CUDA backend (dist/cuda/nccl_communicator.h): host collectives through a host
//          communicator (MPI, threads or local), device collectives through NCCL;
//   staged device collectives over any host communicator (dist/cuda/staged_device_communicator.h):
//          N ranks as threads sharing one GPU, for tests of the sharded CUDA model.
// Every collective has a deadline (CommOptions::timeout_s): a rank that died or hangs makes the
// others return Unavailable naming the collective and the wait, never block forever. After such an
// error the communicator is unusable (a collective may still be pending): report it and exit.
//
// Not for: point-to-point KV shipping (prefill/decode disaggregation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace uniprefill::dist {

enum class ReduceOp { kSum, kMax };

struct CommOptions {
  double timeout_s = 60.0;  // longest wait of one collective for the other ranks
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string Describe() const = 0;  // e.g. "MPI rank 0 of 2 (Open MPI v4.1.4)"

  // In place over f32 [count] on every rank: the element-wise sum (or max) of all ranks' arrays.
  virtual Status AllReduce(float* data, int64_t count, ReduceOp op) = 0;
  // recv [world_size * bytes] gets every rank's `send` [bytes], in rank order.
  virtual Status AllGather(const void* send, void* recv, int64_t bytes) = 0;
  // data [bytes] on every rank becomes root's.
  virtual Status Broadcast(void* data, int64_t bytes, int root) = 0;
  virtual Status Barrier() = 0;

  // Device memory (CUDA builds): in place over `count` bf16 or f32 elements at `data` on every
  // rank, the element-wise sum, enqueued on `stream` (a cudaStream_t; the call may return before
  // the data is ready, later work on the stream sees the sum). Unimplemented where the transport
  // has no device collectives (device_collectives() false).
  virtual Status AllReduceDevice(void* data, int64_t count, DType dtype, void* stream) {
    (void)data, (void)count, (void)dtype, (void)stream;
    return Unimplemented(Describe() + " has no device collectives (the GPU needs NCCL)");
  }
  virtual bool device_collectives() const { return false; }
  // Device memory (CUDA builds): recv [world_size * bytes] on every rank gets every rank's
  // `send` [bytes], in rank order, enqueued on `stream` as AllReduceDevice. Unimplemented where
  // device_collectives() is false.
  virtual Status AllGatherDevice(const void* send, void* recv, int64_t bytes, void* stream) {
    (void)send, (void)recv, (void)bytes, (void)stream;
    return Unimplemented(Describe() + " has no device collectives (the GPU needs NCCL)");
  }

  // Device work (CUDA builds): waits until `event` (a recorded cudaEvent_t) has completed, for
  // at most CommOptions::timeout_s. A device collective waits for its peers inside a kernel, so
  // a rank that died or hangs would stall the others' stream syncs forever; past the timeout the
  // transport aborts its device collectives (their data is then undefined, every later one
  // fails) and returns Unavailable. Unimplemented where the transport does not bound it (the
  // caller then syncs plainly: the staged transport's collectives wait on the host, bounded).
  virtual Status WaitForDevice(void* event) {
    (void)event;
    return Unimplemented(Describe() + " does not bound device waits");
  }
};

// World size 1: AllReduce and Broadcast leave data as it is, AllGather copies send to recv.
std::unique_ptr<Communicator> MakeLocalCommunicator();

// The MPI world of this process (MPI_Init on the first call; MPI_Finalize when the communicator is
// destroyed). Unimplemented when the engine was built without MPI. Under `mpirun`, every rank
// calls it; run alone, it is a world of one. With more than one rank it handles SIGTERM (what
// mpirun sends the others when a rank fails) as one `error:` line and exit status 1.
Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(const CommOptions& options);

// Whether this build has the MPI transport.
bool HaveMpi();

}  // namespace uniprefill::dist
