// MakeMpiCommunicator (communicator.h) over OpenMPI. Each collective is the non-blocking MPI call
// (MPI_Iallreduce, MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier) polled with MPI_Test until done or the
// deadline: blocking MPI calls have no timeout, and a peer that died would hang them. Errors are
// returned (MPI_ERRORS_RETURN), never MPI's abort. Messages above 2^30 elements go in pieces (MPI
// counts are int).
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "dist/communicator.h"

namespace uniprefill::dist {
namespace {

constexpr int64_t kMaxPiece = int64_t{1} << 30;

// When one rank ends with an error, mpirun stops the others with SIGTERM: each then says so in one
// `error:` line instead of vanishing mid-collective. The line is formatted before the handler can
// run (a handler may only write(2) and _exit(2)), hence static storage: there is one MPI world per
// process.
char peer_loss_line[192];
size_t peer_loss_length = 0;

void OnTerminate(int) {
  (void)!write(STDERR_FILENO, peer_loss_line, peer_loss_length);
  _exit(1);
}

void ReportTerminationAsPeerLoss(int rank, int size) {
  const int n = std::snprintf(peer_loss_line, sizeof(peer_loss_line),
                              "error: rank %d of %d: stopped by mpirun because another rank "
                              "ended (its own message says why)\n",
                              rank, size);
  peer_loss_length = n > 0 ? std::min(static_cast<size_t>(n), sizeof(peer_loss_line) - 1) : 0;
  struct sigaction sa {};
  sa.sa_handler = OnTerminate;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int rank, int size, const CommOptions& options)
      : rank_(rank), size_(size), options_(options) {}
  ~MpiCommunicator() override {
    // A collective left pending by a timeout: give the late ranks up to 10 s (or one timeout) to
    // join it, so MPI can finalize cleanly; a dead rank never does, and MPI is left to the exit.
    if (has_pending_ && !Poll(pending_, std::max(options_.timeout_s, 10.0)).ok()) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string Describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    v = v.substr(0, v.find_first_of(",\n"));
    return "MPI rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (" + v + ")";
  }

  Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    if (count < 0) return InvalidArgument("AllReduce: negative count");
    const MPI_Op mop = op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
    for (int64_t at = 0; at < count; at += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - at));
      MPI_Request req;
      const int rc =
          MPI_Iallreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, mop, MPI_COMM_WORLD, &req);
      UP_RETURN_IF_ERROR(Finish(rc, req, "AllReduce"));
    }
    return OkStatus();
  }

  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    if (bytes < 0) return InvalidArgument("AllGather: negative size");
    if (bytes > kMaxPiece) {
      return InvalidArgument("AllGather: more than 2^30 bytes per rank; gather in pieces");
    }
    MPI_Request req;
    const int rc = MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                                  static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD, &req);
    return Finish(rc, req, "AllGather");
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    if (bytes < 0 || root < 0 || root >= size_) {
      return InvalidArgument("Broadcast: root " + std::to_string(root) + " in a world of " +
                             std::to_string(size_));
    }
    for (int64_t at = 0; at < bytes; at += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, bytes - at));
      MPI_Request req;
      const int rc =
          MPI_Ibcast(static_cast<char*>(data) + at, n, MPI_BYTE, root, MPI_COMM_WORLD, &req);
      UP_RETURN_IF_ERROR(Finish(rc, req, "Broadcast"));
    }
    return OkStatus();
  }

  Status Barrier() override {
    MPI_Request req;
    const int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    return Finish(rc, req, "Barrier");
  }

 private:
  // Polls req until it completes or the deadline passes (sleeping 20 us, then up to 1 ms).
  Status Finish(int rc, MPI_Request& req, const char* what) {
    if (broken_) return Unavailable(std::string(what) + ": an earlier collective failed");
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      return Unavailable(std::string(what) + " on rank " + std::to_string(rank_) + ": " +
                         MpiError(rc));
    }
    Status s = Poll(req, options_.timeout_s);
    if (s.ok()) return s;
    broken_ = true;
    if (s.code() == ErrorCode::kUnavailable && s.message().empty()) {  // the deadline passed
      pending_ = req;
      has_pending_ = true;
      char msg[256];
      std::snprintf(msg, sizeof(msg),
                    "%s on rank %d of %d: the other ranks did not join within %.1f s (one died "
                    "or hangs)",
                    what, rank_, size_, options_.timeout_s);
      return Unavailable(msg);
    }
    return Unavailable(std::string(what) + " on rank " + std::to_string(rank_) + ": " +
                       s.message());
  }

  // Waits for req up to timeout_s: OK, Unavailable with an empty message at the deadline, or
  // Internal with MPI's error text.
  static Status Poll(MPI_Request& req, double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    auto nap = std::chrono::microseconds(20);
    while (true) {
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Internal(MpiError(rc));
      if (done) return OkStatus();
      if (std::chrono::steady_clock::now() > deadline) return Unavailable("");
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }

  int rank_ = 0, size_ = 1;
  CommOptions options_;
  bool broken_ = false;
  bool has_pending_ = false;
  MPI_Request pending_ = MPI_REQUEST_NULL;  // the collective a timeout left behind
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(const CommOptions& options) {
  if (!(options.timeout_s > 0)) return InvalidArgument("communicator timeout must be > 0 s");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // Collectives are called from one thread (the engine's), not necessarily the main one.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return Unavailable("MPI_Init_thread failed");
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) ReportTerminationAsPeerLoss(rank, size);
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(rank, size, options));
}

bool HaveMpi() { return true; }

}  // namespace uniprefill::dist
