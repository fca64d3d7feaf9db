// LinearAttentionState: the fixed-size per-sequence state of one linear-attention (Gated DeltaNet)
// layer, carried from one forward call to the next (a prefill, then 1-row decodes).
//
// What it holds: the depthwise causal conv's history (its last kernel - 1 inputs) and the delta
// rule's recurrent matrix per value head. Its size does not depend on the context length.
// Not for: several sequences (one state per sequence and layer), paging, or snapshots for
// speculative rollback (Copy() gives an explicit deep copy where one is needed).
// Invariants: both buffers are zero after Init()/Reset(); `conv` rows are time-ordered, oldest
// first; the layout is exactly what ops::CausalConv1dSilu and ops::GatedDeltaRule read and write.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "core/tensor.h"

namespace uniprefill {

struct LinearAttentionState {
  LinearAttentionState() = default;
  LinearAttentionState(int channels, int conv_kernel, int v_heads, int k_dim, int v_dim) {
    Init(channels, conv_kernel, v_heads, k_dim, v_dim);
  }
  LinearAttentionState(LinearAttentionState&&) = default;
  LinearAttentionState& operator=(LinearAttentionState&&) = default;

  // (Re)allocates zeroed buffers: conv_dim = channels, kernel = conv_kernel, n_v_heads = v_heads,
  // d_k = k_dim, d_v = v_dim.
  void Init(int channels, int conv_kernel, int v_heads, int k_dim, int v_dim);
  // Zeroes both buffers (a new sequence), keeping the allocation.
  void Reset();
  LinearAttentionState Copy() const;

  float* conv_data() const { return conv.as<float>(); }
  float* recurrent_data() const { return recurrent.as<float>(); }
  // f32 [kernel - 1, conv_dim] and f32 [n_v_heads, d_k, d_v] views.
  TensorView ConvView() const;
  TensorView RecurrentView() const;

  Buffer conv;       // f32 [kernel - 1, conv_dim]: the last kernel - 1 conv inputs, oldest first
  Buffer recurrent;  // f32 [n_v_heads, d_k, d_v]: S of the delta rule (o = S^T q), per value head
  int conv_dim = 0;
  int kernel = 0;
  int n_v_heads = 0;
  int d_k = 0;
  int d_v = 0;
};

}  // namespace uniprefill
