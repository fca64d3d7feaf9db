// One model run for the tensor-parallel tests (tests/dist/tensor_parallel_test.cc with ranks as
// threads, tests/mpi/ under mpirun): load with a communicator (or none: TP 1), a prompt with
// UniPrefill drops keeping half the blocks at every full-attention layer, then greedy decode
// steps; and the logit differences they compare by. No gtest here: the MPI binary has its own
// main.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/model.h"

namespace uniprefill::testing {

struct RunResult {
  std::vector<float> prompt_logits;       // f32 [vocab] after the prompt
  std::vector<KeptTokens> kept;           // the prompt's drops
  std::vector<int32_t> greedy;            // tokens chosen after the prompt
  std::vector<std::vector<float>> decode_logits;
  size_t resident_bytes = 0;              // Model::resident_weight_bytes
  size_t host_weight_bytes = 0;           // Model::host_weight_bytes
  std::string error;
};

// n tokens drawn from [3, vocab_limit), the same for every rank (fixed seed).
inline std::vector<int32_t> RandomPrompt(int n, int vocab_limit) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(3, vocab_limit - 1);
  std::vector<int32_t> prompt(n);
  for (int32_t& t : prompt) t = tok(rng);
  return prompt;
}

inline int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The run on `ctx` (any device) with `lo` (its communicator: the rank's shard, or none).
inline RunResult RunModelOn(DeviceContext& ctx, const std::string& path, const LoadOptions& lo,
                            const std::vector<int32_t>& prompt, int steps) {
  RunResult r;
  auto loaded = LoadModel(path, ctx, lo);
  if (!loaded.ok()) {
    r.error = loaded.status().message();
    return r;
  }
  Model& m = **loaded;
  r.resident_bytes = m.resident_weight_bytes();
  r.host_weight_bytes = m.host_weight_bytes();
  // Drops at every full-attention layer, keeping half the blocks by score: random tokens spread
  // attention too evenly for top-p to drop anything, and the ratio still ranks the all-reduced
  // block scores.
  UniPrefillConfig up;
  for (int i = 0; i < m.config().n_layers; ++i) {
    if (m.config().layer_kinds[i] == LayerKind::kFullAttention) up.drop_layers.push_back(i);
  }
  up.selection.mode = SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  auto cache = m.NewCache(static_cast<int>(prompt.size()) + steps + 1, up.drop_layers);
  r.prompt_logits.resize(m.config().vocab_size);
  SequenceStep s{cache.get(), prompt, r.prompt_logits.data(), &r.kept};
  if (Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), up); !st.ok()) {
    r.error = st.message();
    return r;
  }
  std::vector<float> logits = r.prompt_logits;
  for (int i = 0; i < steps; ++i) {
    const int32_t next[1] = {Argmax(logits)};
    r.greedy.push_back(next[0]);
    SequenceStep d{cache.get(), next, logits.data(), nullptr};
    if (Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&d, 1), up); !st.ok()) {
      r.error = st.message();
      return r;
    }
    r.decode_logits.push_back(logits);
  }
  return r;
}

// On the CPU with `threads` threads, f32 decode weights.
inline RunResult RunModel(const std::string& path, dist::Communicator* comm, int threads,
                          const std::vector<int32_t>& prompt, int steps) {
  auto ctx = DeviceContext::Cpu(threads);
  LoadOptions lo;
  lo.f32_decode = true;
  lo.communicator = comm;
  return RunModelOn(*ctx, path, lo, prompt, steps);
}

inline double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// Whether `tp`'s greedy tokens are `one`'s up to bf16 noise: equal until the first step where they
// differ, and there `one`'s logits of the two tokens closer than `tie` x rms(one's logits) (a
// near-tie: both continuations are then valid and the runs part). Empty when so; else what
// differs. *parted_at gets the step where they parted (or the number of steps).
inline std::string GreedyWithinNearTies(const RunResult& one, const RunResult& tp, double tie,
                                        size_t* parted_at = nullptr) {
  if (parted_at) *parted_at = one.greedy.size();
  if (tp.greedy.size() != one.greedy.size()) return "a different number of greedy tokens";
  for (size_t i = 0; i < one.greedy.size(); ++i) {
    if (tp.greedy[i] == one.greedy[i]) continue;
    const std::vector<float>& logits = i == 0 ? one.prompt_logits : one.decode_logits[i - 1];
    double sq = 0;
    for (float x : logits) sq += double(x) * x;
    const double rms = std::sqrt(sq / std::max<size_t>(1, logits.size()));
    const double gap = double(logits[one.greedy[i]]) - logits[tp.greedy[i]];
    if (parted_at) *parted_at = i;
    if (gap < tie * rms) return "";
    return "greedy step " + std::to_string(i) + ": token " + std::to_string(tp.greedy[i]) +
           " instead of " + std::to_string(one.greedy[i]) + ", a logit gap of " +
           std::to_string(gap) + " (tie tolerance " + std::to_string(tie * rms) + ")";
  }
  return "";
}

// How far `tp`'s logits are from `one`'s: the prompt's max |difference| over max(1, max |one|),
// and the worst such ratio over the decode steps.
struct LogitDiff {
  double prompt = 0, prompt_scale = 1, decode = 0;
};
inline LogitDiff CompareLogits(const RunResult& one, const RunResult& tp) {
  LogitDiff d;
  d.prompt_scale = std::max(1.0, MaxAbs(one.prompt_logits));
  d.prompt = MaxAbsDiff(tp.prompt_logits, one.prompt_logits) / d.prompt_scale;
  for (size_t i = 0; i < one.decode_logits.size() && i < tp.decode_logits.size(); ++i) {
    d.decode = std::max(d.decode, MaxAbsDiff(tp.decode_logits[i], one.decode_logits[i]) /
                                      std::max(1.0, MaxAbs(one.decode_logits[i])));
  }
  return d;
}

}  // namespace uniprefill::testing
