#include "mpi/mpi_tp_model.h"

#include <cstdio>
#include <vector>

#include "testing/tp_run.h"

namespace uniprefill::testing {

int RunTpModel(dist::Communicator& comm, const std::string& dir) {
  constexpr int kPrompt = 700, kSteps = 32;
  const int r = comm.rank();
  const std::vector<int32_t> prompt = RandomPrompt(kPrompt, 500);
  const RunResult one = RunModel(dir, nullptr, 1, prompt, kSteps);
  const RunResult tp = RunModel(dir, &comm, 1, prompt, kSteps);
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) std::fprintf(stderr, "FAIL rank %d: %s\n", r, what.c_str());
    failures += ok ? 0 : 1;
  };
  check(one.error.empty(), "TP 1: " + one.error);
  check(tp.error.empty(), "TP " + std::to_string(comm.world_size()) + ": " + tp.error);
  if (failures > 0) return 1;
  // Every rank equal to TP 1 also means every rank equal to every other.
  check(!one.kept.empty() && one.kept[0].kept < one.kept[0].alive, "the first drop drops rows");
  check(tp.kept.size() == one.kept.size(), "as many drops as TP 1");
  for (size_t i = 0; i < one.kept.size() && i < tp.kept.size(); ++i) {
    check(tp.kept[i].kept == one.kept[i].kept, "kept count of drop " + std::to_string(i));
  }
  check(tp.greedy == one.greedy, "the greedy tokens");
  const LogitDiff d = CompareLogits(one, tp);
  check(d.prompt <= 1e-4 && d.decode <= 1e-4,
        "logits " + std::to_string(d.prompt) + " / " + std::to_string(d.decode) + " of scale");
  std::printf("rank %d: prompt logits %.2e, decode %.2e of scale, kept", r, d.prompt, d.decode);
  for (const KeptTokens& k : tp.kept) std::printf(" %d/%d", k.kept, k.alive);
  std::printf(", %d greedy tokens: %s\n", kSteps, failures == 0 ? "tp-model OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace uniprefill::testing
