// UniPrefill token selection (docs/design.md section 1, steps 2-7) as pure functions on the CPU:
// attention-mass importance of each alive token from the last n queries, block scores, and the
// kept-token list under the top-p or fixed-ratio rule. These are the reference semantics the
// batched model forward (and later the CUDA kernels) build on; they take no model, no batch.
//
// Invariants of SelectTokens: the result is ascending, unique, inside [0, N); it always holds the
// first S tokens (attention sink), the last n tokens (observation window, so each request's last
// token and its logits survive), and the highest-scoring block; with p >= 1 (or keep ratio >= 1)
// or N <= S + n it is every token.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "uniprefill/uniprefill_modes.h"

namespace uniprefill::sparsity {

using SelectionMode = ::uniprefill::SelectionMode;  // the public enum (uniprefill_modes.h)

struct SelectionParams {
  int block_size = 64;   // G
  int sink = 128;        // S: the first S alive tokens are always kept
  int last_n = 128;      // n: observation window; the last n alive tokens are always kept
  SelectionMode mode = SelectionMode::kTopP;
  float top_p = 0.99f;       // kTopP: keep blocks while the mass before them is <= p
  float keep_ratio = 0.5f;   // kFixedRatio: keep this fraction of blocks (at least one)
  bool operator==(const SelectionParams&) const = default;
};

// Checks ranges (G >= 1, S >= 0, n >= 1, 0 < p <= 1, 0 < ratio <= 1) with a message naming the
// offending value.
Status ValidateSelectionParams(const SelectionParams& params);

// importance[i] = sum over query heads h and the last min(n, N) queries j of
// softmax_i(scale * q[j, h] . k[i, kv(h)]) over the keys visible to j (k_pos[i] <= q_pos[j]), f32.
// q f32 [N, Hq, D], k f32 [N, Hkv, D] (contiguous), positions ascending, Hq % Hkv == 0.
// Scalar reference: O(n * N * Hq * D).
std::vector<float> TokenImportanceReference(const float* q, const float* k, const int32_t* pos,
                                            int64_t n_tokens, int n_heads, int n_kv_heads,
                                            int head_dim, int last_n, float scale);

// b_g = sum of importance over block g of G consecutive tokens (the last block may be short).
std::vector<double> BlockScores(const std::vector<float>& importance, int block_size);

// Indices of the kept blocks (unsorted order of selection) under the mode's rule.
std::vector<int64_t> SelectBlocks(const std::vector<double>& block_scores,
                                  const SelectionParams& params);

// The kept token indices, ascending (steps 4-7), from per-token importance.
std::vector<int32_t> SelectTokens(const std::vector<float>& importance,
                                  const SelectionParams& params);

}  // namespace uniprefill::sparsity
