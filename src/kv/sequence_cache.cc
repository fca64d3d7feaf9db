#include "kv/sequence_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kv/kv_rows.h"

namespace uniprefill {

CacheLayout CacheLayout::WithDropLayers(std::vector<CacheLayerSpec> layers,
                                        const std::vector<int>& drop_layers) {
  CacheLayout out;
  out.layers = std::move(layers);
  out.segment_of_layer.resize(out.layers.size());
  int segment = 0;
  size_t next_drop = 0;
  for (size_t i = 0; i < out.layers.size(); ++i) {
    out.segment_of_layer[i] = segment;
    if (next_drop < drop_layers.size() && drop_layers[next_drop] == static_cast<int>(i)) {
      ++segment;
      ++next_drop;
    }
  }
  // A drop at the last layer opens no segment that holds layers.
  out.n_segments = out.layers.empty() ? 1 : out.segment_of_layer.back() + 1;
  return out;
}

int KvLayerView::count() const {
  int n = 0;
  for (const KvChunk& c : chunks) n += c.count;
  return n;
}

ContiguousSequenceCache::ContiguousSequenceCache(CacheLayout layout, int max_tokens)
    : layout_(std::move(layout)), max_tokens_(max_tokens) {
  segment_len_.assign(layout_.n_segments, 0);
  kv_.resize(layout_.layers.size());
  linear_.resize(layout_.layers.size());
  for (size_t i = 0; i < layout_.layers.size(); ++i) {
    const CacheLayerSpec& spec = layout_.layers[i];
    if (spec.kind == CacheLayerKind::kLinearAttention) {
      const LinearStateShape& s = spec.linear;
      linear_[i] = std::make_unique<LinearAttentionState>();
      linear_[i]->Init(s.conv_dim, s.conv_kernel, s.n_v_heads, s.d_k, s.d_v);
    }
  }
}

Status ContiguousSequenceCache::Reserve(int layer, int needed) {
  LayerStore& l = kv_[layer];
  if (needed <= l.capacity) return OkStatus();
  const int cap = std::max(needed, std::min(max_tokens_, l.capacity * 2));
  const size_t row =
      static_cast<size_t>(layout_.layers[layer].kv_dim) * KvElementBytes(layout_.kv_dtype);
  Buffer k(row * cap), v(row * cap);
  if (l.count) {
    std::memcpy(k.data(), l.k.data(), row * l.count);
    std::memcpy(v.data(), l.v.data(), row * l.count);
  }
  l.k = std::move(k);
  l.v = std::move(v);
  l.capacity = cap;
  return OkStatus();
}

Result<KvAppendSlot> ContiguousSequenceCache::AppendKv(int layer, int n, const int32_t* pos,
                                                       const int32_t* index) {
  const CacheLayerSpec& spec = layout_.layers[layer];
  LayerStore& l = kv_[layer];
  if (spec.kind == CacheLayerKind::kLinearAttention) {
    return InvalidArgument("layer " + std::to_string(layer) + " is a linear-attention layer: no KV");
  }
  if (n < 0 || l.count + n > max_tokens_) {
    return OutOfRange("context is full: layer " + std::to_string(layer) + " holds " +
                      std::to_string(l.count) + " entries and " + std::to_string(n) +
                      " more exceed the context length " + std::to_string(max_tokens_));
  }
  const size_t row = static_cast<size_t>(spec.kv_dim) * KvElementBytes(layout_.kv_dtype);
  if (spec.kind == CacheLayerKind::kSlidingAttention && l.count + n > l.capacity) {
    // The first new query (alive index i) sees indices > i - W: W - 1 older entries suffice.
    const int keep = std::min(l.count, spec.window - 1);
    const int drop = l.count - keep;
    if (drop > 0) {
      std::memmove(l.k.data(), l.k.as<char>() + row * drop, row * keep);
      std::memmove(l.v.data(), l.v.as<char>() + row * drop, row * keep);
      l.pos.erase(l.pos.begin(), l.pos.begin() + drop);
      l.index.erase(l.index.begin(), l.index.begin() + drop);
      l.count = keep;
    }
  }
  UP_RETURN_IF_ERROR(Reserve(layer, l.count + n));
  l.pos.insert(l.pos.end(), pos, pos + n);
  l.index.insert(l.index.end(), index, index + n);
  KvAppendSlot slot;
  slot.k =
      TensorView::Contiguous(l.k.as<char>() + row * l.count, layout_.kv_dtype, {n, spec.kv_dim});
  slot.v =
      TensorView::Contiguous(l.v.as<char>() + row * l.count, layout_.kv_dtype, {n, spec.kv_dim});
  l.count += n;
  return slot;
}

void ContiguousSequenceCache::TrimWindow(int layer) {
  const CacheLayerSpec& spec = layout_.layers[layer];
  LayerStore& l = kv_[layer];
  if (spec.kind != CacheLayerKind::kSlidingAttention) return;
  const int keep = std::min(l.count, spec.window - 1);
  const int cap = std::min(max_tokens_, keep + kWindowHeadroom);
  // A buffer of the window's size is left to AppendKv, which moves the window once per
  // kWindowHeadroom appends; trimming it here would move W - 1 rows at every decode step.
  if (l.capacity <= cap) return;
  // A prompt-sized buffer (a prefill, or a chunk, longer than the headroom): copy the window into
  // a small one and free it.
  const int drop = l.count - keep;
  const size_t row = static_cast<size_t>(spec.kv_dim) * KvElementBytes(layout_.kv_dtype);
  Buffer k(row * cap), v(row * cap);
  std::memcpy(k.data(), l.k.as<char>() + row * drop, row * keep);
  std::memcpy(v.data(), l.v.as<char>() + row * drop, row * keep);
  l.k = std::move(k);
  l.v = std::move(v);
  l.capacity = cap;
  l.pos.erase(l.pos.begin(), l.pos.begin() + drop);
  l.index.erase(l.index.begin(), l.index.begin() + drop);
  l.pos.shrink_to_fit();
  l.index.shrink_to_fit();
  l.count = keep;
}

KvLayerView ContiguousSequenceCache::Layer(int layer) const {
  const LayerStore& l = kv_[layer];
  KvLayerView view;
  view.kv_dim = layout_.layers[layer].kv_dim;
  view.dtype = layout_.kv_dtype;
  if (l.count > 0) {
    view.chunks.push_back({l.k.data(), l.v.data(), l.pos.data(), l.index.data(), l.count});
  }
  return view;
}

void ContiguousSequenceCache::Commit(int tokens, const std::vector<int>& added) {
  length_ += tokens;
  for (size_t s = 0; s < added.size() && s < segment_len_.size(); ++s) segment_len_[s] += added[s];
}

size_t ContiguousSequenceCache::bytes() const {
  size_t b = 0;
  for (const LayerStore& l : kv_) b += l.k.size() + l.v.size();
  for (const auto& s : linear_) {
    if (s) b += s->conv.size() + s->recurrent.size();
  }
  return b;
}

}  // namespace uniprefill
