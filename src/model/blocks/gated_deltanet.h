// The Gated DeltaNet mixer of Qwen3-Next (transformers' Qwen3NextGatedDeltaNet), on a packed batch.
//
// x f32 [T, H] -> in_proj_qkvz, in_proj_ba -> per-key-head regrouping -> causal conv + SiLU over
// [q, k, v] -> l2norm(q) / sqrt(d_k), l2norm(k) -> gated delta rule (beta = sigmoid(b),
// g = -exp(A_log) softplus(a + dt_bias)) -> RMSNorm(o) * norm * silu(z) per value head -> out_proj.
// GEMMs run over all rows; the conv and the recurrence run per sequence and carry that sequence's
// LinearAttentionState across calls (a prefill, then 1-row decodes).
// Not for: the input/post-attention norms or the residual (the layer loop's business).
#pragma once

#include <span>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "kv/linear_state.h"
#include "model/blocks/sequence_rows.h"
#include "ops/ops.h"

namespace uniprefill {

struct GatedDeltaNetWeights {
  // [2 n_k d_k + 2 n_v d_v, H]; rows grouped per key head as [q (d_k), k (d_k), v (r d_v),
  // z (r d_v)], r = n_v / n_k (the Hugging Face layout, un-permuted).
  ops::LinearWeight in_proj_qkvz;
  ops::LinearWeight in_proj_ba;    // [2 n_v, H]; grouped per key head as [b (r), a (r)]
  ops::LinearWeight out_proj;      // [H, n_v d_v]
  std::vector<float> conv_weight;  // [conv_dim, K], conv_dim = 2 n_k d_k + n_v d_v ([q, k, v])
  std::vector<float> dt_bias;      // [n_v]
  std::vector<float> a_log;        // [n_v]
  std::vector<float> norm;         // [d_v], a plain weight (NOT 1 + w)
  int n_k_heads = 0, n_v_heads = 0, d_k = 0, d_v = 0, conv_kernel = 4;
  float eps = 1e-6f;  // of the gated RMSNorm (the q/k l2norm uses 1e-6 as in transformers)

  int key_dim() const { return n_k_heads * d_k; }
  int value_dim() const { return n_v_heads * d_v; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// out f32 [T, H] = the mixer applied to x f32 [T, H]; seqs[i]'s rows use and update *states[i]
// (initialised with w.conv_dim(), w.conv_kernel, n_v_heads, d_k, d_v). out must not alias x.
void GatedDeltaNetForward(DeviceContext& ctx, const GatedDeltaNetWeights& w, TensorView x,
                          std::span<const SequenceRows> seqs,
                          std::span<LinearAttentionState*> states, TensorView out);

}  // namespace uniprefill
