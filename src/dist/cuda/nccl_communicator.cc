// MakeNcclCommunicator (nccl_communicator.h): NCCL's entry points are read from libnccl.so.2 at
// run time; the communicator is made non-blocking so that its setup can be abandoned after the
// timeout instead of hanging on a rank that never arrives. A collective enqueued on a stream
// whose peer died never completes: WaitForDevice (what the CUDA backend's syncs call under
// tensor parallelism) polls the work's event and NCCL's async error, and past the timeout aborts
// the communicator, which ends its pending kernels, and reports Unavailable.
#include "dist/cuda/nccl_communicator.h"

#include "dist/cuda/host_delegating_communicator.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace uniprefill::dist {
namespace {

// The NCCL functions this transport calls, from the library loaded at run time.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
};

Result<NcclApi> LoadNccl() {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return Unimplemented(std::string("NCCL: cannot load libnccl.so.2 (") + dlerror() +
                         "); install NCCL 2 (Debian/Ubuntu libnccl2, or PyPI nvidia-nccl-cu13) to "
                         "run the CUDA model on more than one GPU");
  }
  NcclApi api;
  bool ok = true;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    ok = ok && fn != nullptr;
  };
  get(api.get_unique_id, "ncclGetUniqueId");
  get(api.init_rank_config, "ncclCommInitRankConfig");
  get(api.get_async_error, "ncclCommGetAsyncError");
  get(api.all_reduce, "ncclAllReduce");
  get(api.all_gather, "ncclAllGather");
  get(api.abort, "ncclCommAbort");
  get(api.destroy, "ncclCommDestroy");
  get(api.error_string, "ncclGetErrorString");
  get(api.get_version, "ncclGetVersion");
  if (!ok) return Unimplemented("NCCL: libnccl.so.2 lacks an entry point (NCCL >= 2.14 needed)");
  return api;
}

class NcclCommunicator final : public HostDelegatingCommunicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, NcclApi api, ncclComm_t comm, int version,
                   double timeout_s)
      : HostDelegatingCommunicator(std::move(host)),
        api_(api),
        comm_(comm),
        version_(version),
        timeout_s_(timeout_s) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) api_.destroy(comm_);
  }
  std::string Describe() const override {
    return "NCCL " + std::to_string(version_) + " rank " + std::to_string(rank()) + " of " +
           std::to_string(world_size()) + " (host: " + host().Describe() + ")";
  }

  Status AllReduceDevice(void* data, int64_t count, DType dtype, void* stream) override {
    if (comm_ == nullptr) return Unavailable(failure_);
    if (count < 0) return InvalidArgument("AllReduceDevice: negative count");
    if (dtype != DType::kBF16 && dtype != DType::kF32) {
      return InvalidArgument("AllReduceDevice: bf16 or f32 only");
    }
    const ncclDataType_t type = dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat32;
    ncclResult_t r = api_.all_reduce(data, data, static_cast<size_t>(count), type, ncclSum,
                                     comm_, static_cast<cudaStream_t>(stream));
    // A non-blocking communicator may answer ncclInProgress while it enqueues the call: wait for
    // that (not for the data) before the next NCCL call, as NCCL asks.
    while (r == ncclInProgress) {
      std::this_thread::yield();
      api_.get_async_error(comm_, &r);
    }
    if (r != ncclSuccess) return Internal(std::string("NCCL all-reduce: ") + api_.error_string(r));
    return OkStatus();
  }

  Status AllGatherDevice(const void* send, void* recv, int64_t bytes, void* stream) override {
    if (comm_ == nullptr) return Unavailable(failure_);
    if (bytes < 0) return InvalidArgument("AllGatherDevice: negative size");
    ncclResult_t r = api_.all_gather(send, recv, static_cast<size_t>(bytes), ncclUint8, comm_,
                                     static_cast<cudaStream_t>(stream));
    while (r == ncclInProgress) {  // as in AllReduceDevice
      std::this_thread::yield();
      api_.get_async_error(comm_, &r);
    }
    if (r != ncclSuccess) return Internal(std::string("NCCL all-gather: ") + api_.error_string(r));
    return OkStatus();
  }

  Status WaitForDevice(void* event) override {
    if (comm_ == nullptr) return Unavailable(failure_);
    const auto ev = static_cast<cudaEvent_t>(event);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    // Yield first (a decode step's sync is due within microseconds), then sleep in short naps:
    // the poll adds at most ~0.1 ms to a sync.
    for (int polls = 0;; ++polls) {
      const cudaError_t q = cudaEventQuery(ev);
      if (q == cudaSuccess) return OkStatus();
      if (q != cudaErrorNotReady) {
        return Internal(std::string("CUDA, waiting for the GPU: ") + cudaGetErrorString(q));
      }
      ncclResult_t async = ncclSuccess;
      api_.get_async_error(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Abort(std::string("NCCL reported ") + api_.error_string(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Abort("the GPU's work did not finish within " + Seconds(timeout_s_) +
                     ": a device collective is waiting for a rank that died or hangs");
      }
      if (polls < 256) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

 private:
  static std::string Seconds(double s) {
    std::string t = std::to_string(s);
    t.erase(t.find_last_not_of('0') + 1);
    if (!t.empty() && t.back() == '.') t.pop_back();
    return t + " s";
  }

  // Ends this rank's part in every pending device collective (their kernels return, the data is
  // undefined); every later device call fails with the same message.
  Status Abort(const std::string& why) {
    failure_ = Describe() + ": " + why;
    api_.abort(comm_);
    comm_ = nullptr;
    return Unavailable(failure_);
  }

  NcclApi api_;
  ncclComm_t comm_;
  int version_;
  double timeout_s_;
  std::string failure_;  // set by Abort
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(std::unique_ptr<Communicator> host,
                                                           int device,
                                                           const CommOptions& options) {
  UP_ASSIGN_OR_RETURN(NcclApi api, LoadNccl());
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off (see the header)
  if (cudaSetDevice(device) != cudaSuccess) {
    return InvalidArgument("NCCL: no CUDA device " + std::to_string(device));
  }
  ncclUniqueId id{};
  if (host->rank() == 0) {
    const ncclResult_t r = api.get_unique_id(&id);
    if (r != ncclSuccess) return Internal(std::string("NCCL unique id: ") + api.error_string(r));
  }
  UP_RETURN_IF_ERROR(host->Broadcast(&id, sizeof(id), 0));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = api.init_rank_config(&comm, host->world_size(), id, host->rank(), &config);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(options.timeout_s);
  while (r == ncclInProgress || (r == ncclSuccess && comm != nullptr)) {
    ncclResult_t state = ncclSuccess;
    api.get_async_error(comm, &state);
    if (state != ncclInProgress) {
      r = state;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      api.abort(comm);
      return Unavailable("NCCL: the ranks did not all join within " +
                         std::to_string(options.timeout_s) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) api.abort(comm);
    return Internal(std::string("NCCL communicator: ") + api.error_string(r));
  }
  int version = 0;
  api.get_version(&version);
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(std::move(host), api, comm, version, options.timeout_s));
}

}  // namespace uniprefill::dist
