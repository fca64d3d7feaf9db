// The scenario of the last layer's query-row tests (QueryRows::kLastOfEach, CPU and CUDA): three
// requests over six forwards, so one run holds every kind of row the last layer can see.
//   forward 0: A's history (fresh prompt) + B's first chunk (fresh, no logits)
//   forward 1: C's fresh prompt + A's first decode + B's second chunk (over its cached prefix)
//   forward 2: B's last chunk (logits) + A's second decode
//   forwards 3-5: a decode of each of A, B and C
// Decode tokens are fixed (not the argmax), so two runs whose logits differ by rounding still feed
// the same tokens.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "model/model.h"

namespace uniprefill::testing {

struct LastLayerScenario {
  int history = 60;   // A
  int chunked = 200;  // B, in chunks of `chunk` (more than two chunks)
  int chunk = 64;
  int fresh = 300;  // C
  // Rows every forward holds (what goes past the last layer over every row).
  std::vector<int> EveryRow() const {
    return {history + chunk, fresh + 1 + chunk, chunked - 2 * chunk + 1, 3, 3, 3};
  }
  // One row per request with rows.
  std::vector<int> LastRows() const { return {2, 3, 2, 3, 3, 3}; }
};

struct LastLayerTrace {
  std::vector<std::vector<float>> logits;  // every wanted logits vector, in order
  std::vector<int> last_layer_rows;        // ForwardStats::last_layer_rows per forward
  // The first logits vector of the decode-only forwards (3-5): from there on both runs read the
  // same caches through the same one-row steps, so their logits are equal bit for bit.
  static constexpr size_t kFirstDecodeOnly = 5;
};

inline std::vector<int32_t> ScenarioTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

inline LastLayerTrace RunLastLayerScenario(Model& m, DeviceContext& ctx, const UniPrefillConfig& up,
                                           const LastLayerScenario& z = {}) {
  const int V = m.config().vocab_size;
  const std::vector<int> drops = up.active_drop_layers();
  const int capacity = std::max({z.history, z.chunked, z.fresh}) + 16;
  auto ca = m.NewCache(capacity, drops), cb = m.NewCache(capacity, drops),
       cc = m.NewCache(capacity, drops);
  const std::vector<int32_t> a = ScenarioTokens(z.history, V, 11),
                             b = ScenarioTokens(z.chunked, V, 12),
                             c = ScenarioTokens(z.fresh, V, 13),
                             decodes = ScenarioTokens(16, V, 14);
  LastLayerTrace t;
  std::vector<float> la(V), lb(V), lc(V);
  const auto forward = [&](std::vector<SequenceStep> steps) {
    ForwardStats stats;
    const Status st = m.ForwardBatch(ctx, steps, up, nullptr, &stats);
    EXPECT_TRUE(st.ok()) << st.message();
    t.last_layer_rows.push_back(stats.last_layer_rows);
    for (const SequenceStep& s : steps) {
      if (s.logits != nullptr) t.logits.push_back(std::vector<float>(s.logits, s.logits + V));
    }
  };
  const auto part = [&](int from, int n) {
    return std::span<const int32_t>(b).subspan(from, std::min<int>(n, z.chunked - from));
  };
  const auto one = [&](int i) { return std::span<const int32_t>(decodes).subspan(i, 1); };
  forward({{ca.get(), a, la.data()}, {cb.get(), part(0, z.chunk), nullptr}});
  forward({{cc.get(), c, lc.data()},
           {ca.get(), one(0), la.data()},
           {cb.get(), part(z.chunk, z.chunk), nullptr}});
  forward({{cb.get(), part(2 * z.chunk, z.chunked), lb.data()}, {ca.get(), one(1), la.data()}});
  for (int step = 0; step < 3; ++step) {
    forward({{ca.get(), one(2 + 3 * step), la.data()},
             {cb.get(), one(3 + 3 * step), lb.data()},
             {cc.get(), one(4 + 3 * step), lc.data()}});
  }
  return t;
}

}  // namespace uniprefill::testing
