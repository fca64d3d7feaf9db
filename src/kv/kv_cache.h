// KvCache: the keys and values of one sequence, per layer, in f32.
//
// Full-attention layers keep every token (capacity grows on demand up to the context length).
// Sliding-window layers keep a bounded buffer: before appending, entries older than the window
// can still need (the last W - 1 before the new chunk) are dropped by shifting, so their memory is
// O(W + chunk) whatever the context. Every layer also stores each entry's position, ascending, which
// is what attention masks by (this is also how later segments with dropped tokens will work).
// Not for: several sequences or paged blocks (the serving issue brings a paged allocator behind
// the same LayerCache view).
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "core/tensor.h"

namespace uniprefill {

struct LayerCacheSpec {
  int kv_dim = 0;   // n_kv_heads * head_dim
  int window = 0;   // 0: keep everything; W: sliding window
};

class KvCache {
 public:
  // max_tokens: the context length; max_chunk: the most tokens one forward appends.
  KvCache(std::vector<LayerCacheSpec> layers, int max_tokens, int max_chunk);

  // Tokens processed so far (the position of the next token).
  int length() const { return length_; }
  int max_tokens() const { return max_tokens_; }

  // Makes room for n more tokens in every layer (shifting sliding windows, growing full layers).
  // OutOfRange if the context would exceed max_tokens.
  Status BeginAppend(int n);
  // Rows where this step's n keys/values go: f32 [n, kv_dim] views, and the positions array.
  TensorView NewKeys(int layer, int n);
  TensorView NewValues(int layer, int n);
  // All cached entries of a layer including this step's: f32 [count, kv_dim]; positions ascending.
  TensorView Keys(int layer) const;
  TensorView Values(int layer) const;
  const int32_t* Positions(int layer) const { return layers_[layer].pos.data(); }
  int Count(int layer) const { return layers_[layer].count; }
  // Marks the n tokens of BeginAppend as written.
  void EndAppend(int n);
  void Clear();
  size_t bytes() const;

 private:
  struct Layer {
    LayerCacheSpec spec;
    Buffer k, v;             // f32 [capacity, kv_dim]
    std::vector<int32_t> pos;  // [count + pending]
    int capacity = 0;
    int count = 0;           // committed entries
  };
  Status Grow(Layer& l, int needed);

  std::vector<Layer> layers_;
  int max_tokens_;
  int max_chunk_;
  int length_ = 0;
  int pending_ = 0;
};

}  // namespace uniprefill
