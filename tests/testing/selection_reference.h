// An independent reference for UniPrefill token selection, written from the design text alone
// (not from src/sparsity): token importance from the last n queries' attention, block scores,
// and the kept tokens under the top-p or fixed-ratio rule. Tests check the engine's
// sparsity::TokenImportanceReference / SelectTokens against it, and the naive model selects with
// it, so the engine's selection is never checked against itself.
//
// It is deliberately plain and slow: double-precision sums, an explicit (score desc, index asc)
// sort, an explicit keep mask. It is not a second engine implementation (no batching, no
// validation of the parameters, no device code) and not meant to be fast.
//
// Design text: at a drop layer, for a prefill whose alive token count N > S + n, for each head h
// and each of the last n alive queries j, softmax over all causally visible alive keys i of
// q_j . k_i * scale. Token importance a_i = sum over heads and queries of those probabilities.
// Block score b_g = sum of a_i over block g of G consecutive tokens (the last block may be
// short). Normalise b to sum 1, sort descending, keep blocks while the cumulative mass *before*
// the block is <= p (the block that crosses p is kept); the top block is always kept. Fixed-ratio
// mode keeps the top floor(ratio * n_blocks) blocks (at least one) instead. Also keep every token
// with index < S or >= N - n. Kept tokens keep their order.
//
// Where the design leaves freedom this follows the engine's documented conventions:
// - equal block scores rank the lower block index first;
// - every token is kept when N <= S + n, in top-p mode with p >= 1, or in fixed-ratio mode with
//   ratio >= 1;
// - a zero total mass normalises every block to 0, so every block is kept in top-p mode.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sparsity/token_selection.h"  // SelectionParams / SelectionMode only: no functions

namespace uniprefill::testing {

// a_i for q f32 [N, Hq, D], k f32 [N, Hkv, D] (contiguous), positions pos[N]. Query head h reads
// kv head h / (Hq / Hkv); query j sees key i iff pos[i] <= pos[j]. Computed in double, so it is
// more exact than the engine's f32 (compare with a tolerance).
inline std::vector<double> ReferenceTokenImportance(const float* q, const float* k,
                                                    const int32_t* pos, int64_t n_tokens,
                                                    int n_heads, int n_kv_heads, int head_dim,
                                                    int last_n, float scale) {
  std::vector<double> importance(n_tokens, 0.0);
  const int heads_per_kv = n_heads / n_kv_heads;
  std::vector<double> prob(n_tokens);
  std::vector<char> visible(n_tokens);
  for (int64_t j = std::max<int64_t>(0, n_tokens - last_n); j < n_tokens; ++j) {
    for (int h = 0; h < n_heads; ++h) {
      const int kv_head = h / heads_per_kv;
      double max_logit = -INFINITY;
      for (int64_t i = 0; i < n_tokens; ++i) {
        visible[i] = pos[i] <= pos[j];
        if (!visible[i]) continue;
        double dot = 0.0;
        for (int d = 0; d < head_dim; ++d) {
          dot += static_cast<double>(q[(j * n_heads + h) * head_dim + d]) *
                 k[(i * n_kv_heads + kv_head) * head_dim + d];
        }
        prob[i] = dot * scale;
        max_logit = std::max(max_logit, prob[i]);
      }
      double denom = 0.0;
      for (int64_t i = 0; i < n_tokens; ++i) {
        if (!visible[i]) continue;
        prob[i] = std::exp(prob[i] - max_logit);
        denom += prob[i];
      }
      for (int64_t i = 0; i < n_tokens; ++i) {
        if (visible[i]) importance[i] += prob[i] / denom;
      }
    }
  }
  return importance;
}

// b_g = sum of a_i over tokens [g * G, min(N, (g + 1) * G)).
inline std::vector<double> ReferenceBlockScores(const std::vector<double>& importance, int G) {
  const int64_t n = static_cast<int64_t>(importance.size());
  std::vector<double> scores;
  for (int64_t start = 0; start < n; start += G) {
    double b = 0.0;
    for (int64_t i = start; i < std::min<int64_t>(n, start + G); ++i) b += importance[i];
    scores.push_back(b);
  }
  return scores;
}

// Indices of the kept blocks, ascending.
inline std::vector<int64_t> ReferenceKeptBlocks(const std::vector<double>& scores,
                                                const sparsity::SelectionParams& p) {
  const int64_t n_blocks = static_cast<int64_t>(scores.size());
  struct Ranked {
    double score;
    int64_t block;
  };
  std::vector<Ranked> ranked;
  for (int64_t g = 0; g < n_blocks; ++g) ranked.push_back({scores[g], g});
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.block < b.block;  // tie: the lower block index ranks first
  });
  int64_t n_kept = 0;
  if (p.mode == sparsity::SelectionMode::kFixedRatio) {
    // keep_ratio is a float, and the count is taken at float precision: the exact product of the
    // float ratio and n_blocks (exact in double) rounded to float, then floored. So 0.7f * 10 is
    // 7 (in double it is 6.9999998...), as the engine's float product (plus its 1e-9) gives.
    const float count = static_cast<float>(static_cast<double>(p.keep_ratio) * n_blocks);
    n_kept = std::clamp<int64_t>(static_cast<int64_t>(std::floor(count)), 1, n_blocks);
  } else {
    double total = 0.0;
    for (double s : scores) total += s;
    double mass_before = 0.0;  // normalised mass of the blocks ranked above this one
    for (const Ranked& r : ranked) {
      if (n_kept > 0 && mass_before > static_cast<double>(p.top_p)) break;
      ++n_kept;
      mass_before += total > 0.0 ? r.score / total : 0.0;
    }
  }
  std::vector<int64_t> kept;
  for (int64_t r = 0; r < n_kept; ++r) kept.push_back(ranked[r].block);
  std::sort(kept.begin(), kept.end());
  return kept;
}

// The kept token indices, ascending.
inline std::vector<int32_t> ReferenceKeptTokens(const std::vector<double>& importance,
                                                const sparsity::SelectionParams& p) {
  const int64_t n = static_cast<int64_t>(importance.size());
  const bool keep_all =
      n <= static_cast<int64_t>(p.sink) + p.last_n ||
      (p.mode == sparsity::SelectionMode::kTopP && p.top_p >= 1.0f) ||
      (p.mode == sparsity::SelectionMode::kFixedRatio && p.keep_ratio >= 1.0f);
  std::vector<bool> keep(n, keep_all);
  if (!keep_all) {
    for (int64_t g : ReferenceKeptBlocks(ReferenceBlockScores(importance, p.block_size), p)) {
      for (int64_t i = g * p.block_size; i < n && i < (g + 1) * p.block_size; ++i) keep[i] = true;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (i < p.sink || i >= n - p.last_n) keep[i] = true;  // attention sink, observation window
    }
  }
  std::vector<int32_t> kept;
  for (int64_t i = 0; i < n; ++i) {
    if (keep[i]) kept.push_back(static_cast<int32_t>(i));
  }
  return kept;
}

// Convenience for f32 importances (the engine's type); the conversion to double is exact.
inline std::vector<int32_t> ReferenceKeptTokens(const std::vector<float>& importance,
                                                const sparsity::SelectionParams& p) {
  return ReferenceKeptTokens(std::vector<double>(importance.begin(), importance.end()), p);
}

}  // namespace uniprefill::testing
