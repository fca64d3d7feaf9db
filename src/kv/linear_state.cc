#include "kv/linear_state.h"

#include <cassert>
#include <cstring>

namespace uniprefill {

void LinearAttentionState::Init(int channels, int conv_kernel, int v_heads, int k_dim, int v_dim) {
  assert(channels > 0 && conv_kernel >= 1 && v_heads > 0 && k_dim > 0 && v_dim > 0);
  conv_dim = channels;
  kernel = conv_kernel;
  n_v_heads = v_heads;
  d_k = k_dim;
  d_v = v_dim;
  conv = Buffer(sizeof(float) * static_cast<size_t>(kernel - 1) * conv_dim);
  recurrent = Buffer(sizeof(float) * static_cast<size_t>(n_v_heads) * d_k * d_v);
}

void LinearAttentionState::Reset() {
  if (conv.size()) std::memset(conv.data(), 0, conv.size());
  if (recurrent.size()) std::memset(recurrent.data(), 0, recurrent.size());
}

LinearAttentionState LinearAttentionState::Copy() const {
  LinearAttentionState s;
  s.conv = conv.Copy();
  s.recurrent = recurrent.Copy();
  s.conv_dim = conv_dim;
  s.kernel = kernel;
  s.n_v_heads = n_v_heads;
  s.d_k = d_k;
  s.d_v = d_v;
  return s;
}

TensorView LinearAttentionState::ConvView() const {
  return TensorView::Contiguous(conv.data(), DType::kF32, {kernel - 1, conv_dim});
}

TensorView LinearAttentionState::RecurrentView() const {
  return TensorView::Contiguous(recurrent.data(), DType::kF32, {n_v_heads, d_k, d_v});
}

}  // namespace uniprefill
