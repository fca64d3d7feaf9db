// The MPI communicator (dist/communicator.h) under `mpirun -np N` (CTest mpi_collectives,
// mpi_timeout, mpi_fault; tests/mpi/run_mpi_test.py drives them). Its own main: every rank runs
// the same checks and prints one line; a failed check prints "FAIL ..." and exits 1.
//   (no flag)  AllReduce sum / max of rank-dependent arrays (odd sizes, 0, 3M floats), AllGather,
//              Broadcast from every root, Barrier; exact results (integers in f32).
//   --timeout  rank 1 joins a Barrier 6 s late: rank 0 (timeout 1 s) gets Unavailable after
//              1.0-4.0 s (slack for a loaded CI machine), then both finish cleanly (the late
//              join completes the pending barrier).
//   --fault    rank 1 exits (code 3) before an AllReduce; rank 0 (timeout 5 s) must print one
//              "error:" line and exit non-zero, not hang (the driver checks the time and output).
//   --tp-model DIR  a tiny checkpoint sharded over the world equals one process (mpi_tp_model.h).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "mpi/mpi_tp_model.h"

namespace {

using uniprefill::Status;
using uniprefill::dist::CommOptions;
using uniprefill::dist::Communicator;
using uniprefill::dist::ReduceOp;

int failures = 0;

void Check(bool ok, int rank, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL rank %d: %s\n", rank, what.c_str());
    ++failures;
  }
}

void CheckOk(const Status& s, int rank, const std::string& what) {
  Check(s.ok(), rank, what + ": " + s.message());
}

int RunCollectives(Communicator& c) {
  const int r = c.rank(), n = c.world_size();
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{3} << 20}) {
    std::vector<float> a(static_cast<size_t>(count)), m(a.size());
    for (int64_t i = 0; i < count; ++i) {
      a[i] = static_cast<float>((i % 97) * (r + 1));
      m[i] = static_cast<float>((i + r * 13) % 101);
    }
    CheckOk(c.AllReduce(a.data(), count, ReduceOp::kSum), r, "AllReduce sum");
    CheckOk(c.AllReduce(m.data(), count, ReduceOp::kMax), r, "AllReduce max");
    bool sum_ok = true, max_ok = true;
    for (int64_t i = 0; i < count; ++i) {
      sum_ok &= a[i] == static_cast<float>((i % 97) * n * (n + 1) / 2);
      float want = 0;
      for (int q = 0; q < n; ++q) want = std::fmax(want, static_cast<float>((i + q * 13) % 101));
      max_ok &= m[i] == want;
    }
    Check(sum_ok, r, "AllReduce sum values, count " + std::to_string(count));
    Check(max_ok, r, "AllReduce max values, count " + std::to_string(count));
  }
  for (int64_t bytes : {int64_t{0}, int64_t{5}, int64_t{1} << 20}) {
    std::vector<unsigned char> send(static_cast<size_t>(bytes)), recv(send.size() * n);
    for (int64_t i = 0; i < bytes; ++i) send[i] = static_cast<unsigned char>(i * 7 + r);
    CheckOk(c.AllGather(send.data(), recv.data(), bytes), r, "AllGather");
    bool ok = true;
    for (int q = 0; q < n; ++q) {
      for (int64_t i = 0; i < bytes; ++i) ok &= recv[q * bytes + i] == (unsigned char)(i * 7 + q);
    }
    Check(ok, r, "AllGather values, bytes " + std::to_string(bytes));
  }
  for (int root = 0; root < n; ++root) {
    std::vector<int32_t> v(1001, r == root ? 1000 + root : -1);
    CheckOk(c.Broadcast(v.data(), static_cast<int64_t>(v.size() * 4), root), r, "Broadcast");
    bool ok = true;
    for (int32_t x : v) ok &= x == 1000 + root;
    Check(ok, r, "Broadcast values from root " + std::to_string(root));
  }
  Check(!c.Broadcast(nullptr, 4, n).ok(), r, "Broadcast from a root outside the world is refused");
  CheckOk(c.Barrier(), r, "Barrier");
  std::printf("rank %d of %d: %s\n", r, n, failures == 0 ? "collectives OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

int RunTimeout(Communicator& c) {
  const int r = c.rank();
  if (c.world_size() < 2) {
    std::fprintf(stderr, "FAIL: --timeout needs 2 ranks\n");
    return 1;
  }
  if (r == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(6));
    CheckOk(c.Barrier(), r, "late Barrier");
  } else if (r == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = c.Barrier();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Check(!s.ok() && s.message().find("did not join within 1.0 s") != std::string::npos, r,
          "Barrier with a late rank: want the timeout error, got '" + s.message() + "'");
    Check(waited >= 1.0 && waited < 4.0, r, "timed out after " + std::to_string(waited) + " s");
    Check(!c.Barrier().ok(), r, "the communicator stays unusable after a timeout");
    std::printf("rank 0: %s (after %.2f s)\n", s.message().c_str(), waited);
  } else {
    CheckOk(c.Barrier(), r, "Barrier");
  }
  std::printf("rank %d: %s\n", r, failures == 0 ? "timeout OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

int RunFault(Communicator& c) {
  const int r = c.rank();
  std::vector<float> x(1024, 1.0f);
  CheckOk(c.AllReduce(x.data(), 1024, ReduceOp::kSum), r, "AllReduce before the fault");
  if (r == 1) {
    std::fprintf(stderr, "rank 1: exiting mid-step (fault injection)\n");
    std::fflush(stderr);
    std::_Exit(3);
  }
  const Status s = c.AllReduce(x.data(), 1024, ReduceOp::kSum);
  if (!s.ok()) {
    std::fprintf(stderr, "error: rank %d: %s\n", r, s.message().c_str());
    std::_Exit(1);
  }
  std::fprintf(stderr, "FAIL rank %d: the AllReduce with a dead rank succeeded\n", r);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  CommOptions options;
  options.timeout_s = mode == "--timeout" ? 1.0 : (mode == "--fault" ? 5.0 : 60.0);
  auto comm = uniprefill::dist::MakeMpiCommunicator(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "error: %s\n", comm.status().message().c_str());
    return 1;
  }
  Communicator& c = **comm;
  if (c.rank() == 0) std::printf("%s\n", c.Describe().c_str());
  if (mode == "--timeout") return RunTimeout(c);
  if (mode == "--fault") return RunFault(c);
  if (mode == "--tp-model" && argc > 2) return uniprefill::testing::RunTpModel(c, argv[2]);
  return RunCollectives(c);
}
