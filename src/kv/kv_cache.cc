#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace uniprefill {

KvCache::KvCache(std::vector<LayerCacheSpec> layers, int max_tokens, int max_chunk)
    : max_tokens_(max_tokens), max_chunk_(max_chunk) {
  for (auto& s : layers) layers_.push_back(Layer{s, {}, {}, {}, 0, 0});
}

Status KvCache::Grow(Layer& l, int needed) {
  if (needed <= l.capacity) return OkStatus();
  int cap = std::max(needed, l.capacity * 2);
  if (l.spec.window == 0) cap = std::min(cap, max_tokens_);
  if (l.spec.window > 0) cap = std::max(needed, l.spec.window - 1 + max_chunk_);
  const size_t row = static_cast<size_t>(l.spec.kv_dim) * sizeof(float);
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

Status KvCache::BeginAppend(int n) {
  if (n <= 0) return InvalidArgument("KvCache::BeginAppend: need at least one token");
  if (length_ + n > max_tokens_) {
    return OutOfRange("context is full: " + std::to_string(length_) + " + " + std::to_string(n) +
                      " tokens exceed the context length " + std::to_string(max_tokens_));
  }
  for (Layer& l : layers_) {
    if (l.spec.window > 0) {
      // The new chunk's first query (position length_) sees keys > length_ - W: keep W - 1.
      const int keep = std::min(l.count, l.spec.window - 1);
      const int drop = l.count - keep;
      if (drop > 0 && l.count + n > l.capacity) {
        const size_t row = static_cast<size_t>(l.spec.kv_dim) * sizeof(float);
        std::memmove(l.k.data(), l.k.as<char>() + row * drop, row * keep);
        std::memmove(l.v.data(), l.v.as<char>() + row * drop, row * keep);
        l.pos.erase(l.pos.begin(), l.pos.begin() + drop);
        l.count = keep;
      }
    }
    UP_RETURN_IF_ERROR(Grow(l, l.count + n));
    l.pos.resize(l.count);
    for (int i = 0; i < n; ++i) l.pos.push_back(length_ + i);
  }
  pending_ = n;
  return OkStatus();
}

TensorView KvCache::NewKeys(int layer, int n) {
  Layer& l = layers_[layer];
  return TensorView::Contiguous(l.k.as<float>() + static_cast<size_t>(l.count) * l.spec.kv_dim,
                                DType::kF32, {n, l.spec.kv_dim});
}

TensorView KvCache::NewValues(int layer, int n) {
  Layer& l = layers_[layer];
  return TensorView::Contiguous(l.v.as<float>() + static_cast<size_t>(l.count) * l.spec.kv_dim,
                                DType::kF32, {n, l.spec.kv_dim});
}

TensorView KvCache::Keys(int layer) const {
  const Layer& l = layers_[layer];
  return TensorView::Contiguous(l.k.data(), DType::kF32, {l.count + pending_, l.spec.kv_dim});
}

TensorView KvCache::Values(int layer) const {
  const Layer& l = layers_[layer];
  return TensorView::Contiguous(l.v.data(), DType::kF32, {l.count + pending_, l.spec.kv_dim});
}

void KvCache::EndAppend(int n) {
  for (Layer& l : layers_) l.count += n;
  length_ += n;
  pending_ = 0;
}

void KvCache::Clear() {
  for (Layer& l : layers_) {
    l.count = 0;
    l.pos.clear();
  }
  length_ = 0;
  pending_ = 0;
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (const Layer& l : layers_) b += l.k.size() + l.v.size();
  return b;
}

}  // namespace uniprefill
