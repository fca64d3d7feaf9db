#include "kv/kv_arena.h"

#include <algorithm>
#include <cassert>

namespace uniprefill {

KvArena::KvArena(const CacheLayout& layout, const KvPoolSize& size)
    : KvArena(layout, size.num_blocks, size.block_tokens, size.state_slots) {}

KvArena::KvArena(const CacheLayout& layout, int num_blocks, int block_tokens, int state_slots)
    : num_blocks_(std::max(0, num_blocks)),
      block_tokens_(std::max(1, block_tokens)),
      state_slots_(std::max(0, state_slots)),
      dtype_(layout.kv_dtype) {
  linear_of_layer_.assign(layout.layers.size(), -1);
  for (size_t i = 0; i < layout.layers.size(); ++i) {
    const CacheLayerSpec& spec = layout.layers[i];
    if (spec.kind == CacheLayerKind::kLinearAttention) {
      const LinearStateShape& s = spec.linear;
      linear_of_layer_[i] = static_cast<int>(linear_layers_.size());
      linear_layers_.push_back(s);
      slot_state_bytes_ += int64_t{4} * (int64_t{s.conv_kernel - 1} * s.conv_dim +
                                         int64_t{s.n_v_heads} * s.d_k * s.d_v);
    } else {
      max_kv_dim_ = std::max(max_kv_dim_, spec.kv_dim);
    }
  }
  // Zeroed up front (Buffer memsets): the whole budget is touched once at startup, so an
  // over-large --kv-cache-memory fails here rather than mid-request.
  kv_ = Buffer(static_cast<size_t>(num_blocks_) * static_cast<size_t>(block_bytes()));
  meta_ = Buffer(sizeof(int32_t) * num_blocks_ * 2 * block_tokens_);
  states_.resize(static_cast<size_t>(state_slots_) * linear_layers_.size());
}

void* KvArena::k(int block, int row, int kv_dim) const {
  assert(block >= 0 && block < num_blocks_ && row >= 0 && row < block_tokens_);
  assert(kv_dim > 0 && kv_dim <= max_kv_dim_);
  const size_t elem = KvElementBytes(dtype_);
  const size_t half = static_cast<size_t>(block_tokens_) * max_kv_dim_ * elem;  // bytes of K
  return kv_.as<char>() + static_cast<size_t>(block) * 2 * half +
         static_cast<size_t>(row) * kv_dim * elem;
}

void* KvArena::v(int block, int row, int kv_dim) const {
  const size_t half = static_cast<size_t>(block_tokens_) * max_kv_dim_ * KvElementBytes(dtype_);
  return static_cast<char*>(k(block, row, kv_dim)) + half;
}

int32_t* KvArena::pos(int block, int row) const {
  assert(block >= 0 && block < num_blocks_ && row >= 0 && row < block_tokens_);
  return meta_.as<int32_t>() + static_cast<size_t>(block) * 2 * block_tokens_ + row;
}

int32_t* KvArena::index(int block, int row) const { return pos(block, row) + block_tokens_; }

LinearAttentionState* KvArena::Linear(int slot, int layer) {
  if (slot < 0 || slot >= state_slots_ || layer < 0 ||
      layer >= static_cast<int>(linear_of_layer_.size()) || linear_of_layer_[layer] < 0) {
    return nullptr;
  }
  const int l = linear_of_layer_[layer];
  std::unique_ptr<LinearAttentionState>& state = states_[static_cast<size_t>(slot) *
                                                             linear_layers_.size() + l];
  if (!state) {
    const LinearStateShape& s = linear_layers_[l];
    state = std::make_unique<LinearAttentionState>(s.conv_dim, s.conv_kernel, s.n_v_heads, s.d_k,
                                                   s.d_v);
  }
  return state.get();
}

void KvArena::Reset(int slot) {
  if (slot < 0 || slot >= state_slots_) return;
  for (size_t l = 0; l < linear_layers_.size(); ++l) {
    auto& state = states_[static_cast<size_t>(slot) * linear_layers_.size() + l];
    if (state) state->Reset();
  }
}

size_t KvArena::bytes() const {
  size_t b = kv_.size() + meta_.size();
  for (const auto& s : states_) {
    if (s) b += s->conv.size() + s->recurrent.size();
  }
  return b;
}

}  // namespace uniprefill
