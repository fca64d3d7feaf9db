#include "sparsity/token_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "sparsity/keep_rules.h"

namespace uniprefill::sparsity {

Status ValidateSelectionParams(const SelectionParams& p) {
  if (p.block_size < 1) {
    return InvalidArgument("UniPrefill block size must be >= 1 (got " +
                           std::to_string(p.block_size) + ")");
  }
  if (p.sink < 0) {
    return InvalidArgument("UniPrefill sink must be >= 0 (got " + std::to_string(p.sink) + ")");
  }
  if (p.last_n < 1) {
    return InvalidArgument("UniPrefill last-n must be >= 1 (got " + std::to_string(p.last_n) + ")");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return InvalidArgument("UniPrefill p must be in (0, 1] (got " + std::to_string(p.top_p) + ")");
  }
  if (!(p.keep_ratio > 0.0f && p.keep_ratio <= 1.0f)) {
    return InvalidArgument("UniPrefill keep ratio must be in (0, 1] (got " +
                           std::to_string(p.keep_ratio) + ")");
  }
  return OkStatus();
}

std::vector<float> TokenImportanceReference(const float* q, const float* k, const int32_t* pos,
                                            int64_t n_tokens, int n_heads, int n_kv_heads,
                                            int head_dim, int last_n, float scale) {
  std::vector<float> importance(n_tokens, 0.0f);
  const int group = n_heads / n_kv_heads;
  const int64_t first_query = std::max<int64_t>(0, n_tokens - last_n);
  std::vector<float> logits(n_tokens);
  for (int64_t j = first_query; j < n_tokens; ++j) {
    for (int h = 0; h < n_heads; ++h) {
      const float* qv = q + (j * n_heads + h) * head_dim;
      const int kvh = h / group;
      float max_logit = -INFINITY;
      int64_t visible = 0;
      for (int64_t i = 0; i < n_tokens && pos[i] <= pos[j]; ++i, ++visible) {
        const float* kv = k + (i * n_kv_heads + kvh) * head_dim;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += qv[d] * kv[d];
        logits[i] = dot * scale;
        max_logit = std::max(max_logit, logits[i]);
      }
      float total = 0.0f;
      for (int64_t i = 0; i < visible; ++i) {
        logits[i] = std::exp(logits[i] - max_logit);
        total += logits[i];
      }
      for (int64_t i = 0; i < visible; ++i) importance[i] += logits[i] / total;
    }
  }
  return importance;
}

std::vector<double> BlockScores(const std::vector<float>& importance, int block_size) {
  const int64_t n = static_cast<int64_t>(importance.size());
  std::vector<double> blocks((n + block_size - 1) / block_size, 0.0);
  for (int64_t i = 0; i < n; ++i) blocks[i / block_size] += importance[i];
  return blocks;
}

std::vector<int64_t> SelectBlocks(const std::vector<double>& scores, const SelectionParams& p) {
  const int64_t n_blocks = static_cast<int64_t>(scores.size());
  std::vector<int64_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0);
  // Descending score; ties keep the earlier block first, so the result is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  if (n_blocks == 0) return {};
  int64_t keep = 0;
  if (p.mode == SelectionMode::kFixedRatio) {
    keep = FixedKeepBlocks(n_blocks, p.keep_ratio);
  } else {
    const double total = std::accumulate(scores.begin(), scores.end(), 0.0);
    double before = 0.0;  // normalised mass of the blocks already kept
    for (int64_t r = 0; r < n_blocks; ++r) {
      if (r > 0 && !(before <= p.top_p)) break;  // the block that crosses p is kept
      ++keep;
      before += total > 0 ? scores[order[r]] / total : 0.0;
    }
  }
  order.resize(keep);
  return order;
}

std::vector<int32_t> SelectTokens(const std::vector<float>& importance, const SelectionParams& p) {
  const int64_t n = static_cast<int64_t>(importance.size());
  std::vector<int32_t> kept;
  const bool keep_all = KeepsAll(n, p.sink, p.last_n, p.mode == SelectionMode::kFixedRatio,
                                 p.top_p, p.keep_ratio);
  if (keep_all) {
    kept.resize(n);
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  std::vector<char> keep(n, 0);
  for (int64_t g : SelectBlocks(BlockScores(importance, p.block_size), p)) {
    const int64_t end = std::min<int64_t>(n, (g + 1) * p.block_size);
    for (int64_t i = g * p.block_size; i < end; ++i) keep[i] = 1;
  }
  for (int64_t i = 0; i < p.sink; ++i) keep[i] = 1;
  for (int64_t i = n - p.last_n; i < n; ++i) keep[i] = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (keep[i]) kept.push_back(static_cast<int32_t>(i));
  }
  return kept;
}

}  // namespace uniprefill::sparsity
