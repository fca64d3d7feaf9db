// SequenceCache: everything one request keeps between forwards: per attention layer the keys and
// values of the tokens alive in that layer's segment, per linear-attention layer its recurrent and
// conv state, and per segment the number of tokens it holds.
//
// Segments (docs/design.md section 2): the drop layers d_1 < d_2 < ... cut the stack; segment 0 is
// layers 0..d_1, segment s is d_s + 1 .. d_{s+1}. Every layer of a segment sees the same token set,
// so a token appended to a segment gets the same *alive index* (its rank in that segment) in each
// of its layers. Later segments hold fewer tokens after a UniPrefill drop; decode appends to every
// segment.
//
// Each KV entry carries its original position (RoPE used it; kept tokens keep positions) and its
// alive index (causal order and the sliding window are by alive index, as the reference's paged
// cache of compacted tokens behaves). Sliding-window layers keep only the W - 1 newest entries
// (plus the tokens being appended), so their memory is O(W + step).
//
// Model code sees the cache only through this interface and KvLayerView, a list of chunks:
// ContiguousSequenceCache returns one chunk per layer; the paged allocator of the serving issue
// returns one chunk per block behind the same calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kv/linear_state.h"

namespace uniprefill {

// Sizes of a linear-attention (Gated DeltaNet) layer's per-request state.
struct LinearStateShape {
  int conv_dim = 0, conv_kernel = 0, n_v_heads = 0, d_k = 0, d_v = 0;
};

enum class CacheLayerKind { kFullAttention, kSlidingAttention, kLinearAttention };

struct CacheLayerSpec {
  CacheLayerKind kind = CacheLayerKind::kFullAttention;
  int kv_dim = 0;   // n_kv_heads * head_dim (attention layers)
  int window = 0;   // W for sliding layers
  LinearStateShape linear;  // linear-attention layers
};

struct CacheLayout {
  std::vector<CacheLayerSpec> layers;
  std::vector<int> segment_of_layer;  // [n_layers], non-decreasing from 0
  int n_segments = 1;
  // Element type of host caches' keys and values (ContiguousSequenceCache, KvArena): kF32, or
  // kF16 (kv/kv_rows.h; the engine's default for CPU models, set through Model::kv_dtype).
  // Device caches keep bf16.
  DType kv_dtype = DType::kF32;
  // Builds segment_of_layer from ascending drop layers (empty: one segment).
  static CacheLayout WithDropLayers(std::vector<CacheLayerSpec> layers,
                                    const std::vector<int>& drop_layers);
};

// A contiguous run of cached entries of one layer.
struct KvChunk {
  const void* k = nullptr;        // KvLayerView::dtype [count, kv_dim]
  const void* v = nullptr;        // KvLayerView::dtype [count, kv_dim]
  const int32_t* pos = nullptr;   // [count] original positions, ascending
  const int32_t* index = nullptr; // [count] alive indices in the layer's segment, ascending
  int count = 0;
};

struct KvLayerView {
  std::vector<KvChunk> chunks;  // in order; total = count()
  int kv_dim = 0;
  DType dtype = DType::kF32;    // of every chunk's k and v (CacheLayout::kv_dtype)
  int count() const;
};

// Where a step's new entries go: views [n, kv_dim] of the cache's dtype to fill (StoreKvValues).
struct KvAppendSlot {
  TensorView k, v;
};

// Segment-wise chunked prefill (docs/design.md section 2): a UniPrefill prompt's rows between
// two segments. Each chunk of segment s leaves its residual rows here at drop layer d_{s+1} (after
// that layer's attention); the segment's last chunk selects, the collected rows shrink to the
// kept ones and become the rows segment s + 1's chunks enter with, in order.
class BoundaryStorage {  // the rows themselves, in the backend's memory (host f32, device bf16)
 public:
  virtual ~BoundaryStorage() = default;
  virtual size_t bytes() const = 0;
};

struct BoundaryRows {
  int segment = 0;                  // the segment these rows enter
  std::vector<int32_t> pos;         // [rows] their original positions, ascending
  int consumed = 0;                 // rows already fed to that segment's chunks
  std::unique_ptr<BoundaryStorage> data;
  int rows() const { return static_cast<int>(pos.size()); }
  void Clear() { *this = BoundaryRows(); }
};

struct SegmentBoundary {
  BoundaryRows ready;      // rows the current segment's chunks enter with
  BoundaryRows collected;  // rows the current segment's chunks left (for the next segment)
  // Set by the selecting (segment-ending) chunk's drop layer, used when its rows leave: the kept
  // rows among `collected` (ascending; every row when the request did not select).
  std::vector<int32_t> kept;
  bool segment_ended = false;
  bool empty() const { return ready.rows() == 0 && collected.rows() == 0; }
  size_t bytes() const {
    return (ready.data ? ready.data->bytes() : 0) + (collected.data ? collected.data->bytes() : 0);
  }
};

class SequenceCache {
 public:
  virtual ~SequenceCache() = default;
  virtual const CacheLayout& layout() const = 0;
  // Tokens fed so far: the position of the next token.
  virtual int length() const = 0;
  virtual int max_tokens() const = 0;
  // Tokens held by segment s (its next alive index).
  virtual int segment_length(int segment) const = 0;

  // Makes room for n new entries of attention layer `layer` with the given positions and alive
  // indices (ascending, after every entry held) and returns where to write their keys and values.
  // The entries count as held from now on.
  virtual Result<KvAppendSlot> AppendKv(int layer, int n, const int32_t* pos,
                                        const int32_t* index) = 0;
  virtual KvLayerView Layer(int layer) const = 0;
  virtual LinearAttentionState* Linear(int layer) = 0;
  // After a forward's attention of sliding-window layer `layer`: its entries older than the W - 1
  // newest will never be read again (the next query's window holds W - 1 of them), so a cache may
  // free them now rather than at the next append. A whole-prompt prefill otherwise holds every
  // sliding layer's keys of the prompt at once until the first decode step.
  virtual void TrimWindow(int layer) { (void)layer; }

  // Ends a forward: every segment s grew by added[s] tokens and the sequence by `tokens` positions.
  virtual void Commit(int tokens, const std::vector<int>& added) = 0;
  virtual size_t bytes() const = 0;
  // A hint before a fresh cache's prefill of `tokens` (which may come in chunks): segment 0
  // holds them all, and so does every segment when the request drops nothing (every_segment). A
  // device cache lays each layer's entries out in one piece for it (CudaSequenceCache); host
  // caches ignore it.
  virtual void ExpectPrefill(int tokens, bool every_segment) { (void)tokens, (void)every_segment; }

  // The request's rows between segments while its prefill runs segment-wise in chunks (held with
  // its KV, so a preempted or finished request frees both at once).
  SegmentBoundary& boundary() { return boundary_; }
  const SegmentBoundary& boundary() const { return boundary_; }

 private:
  SegmentBoundary boundary_;
};

// Each attention layer in one growable buffer (full layers) or a bounded one (sliding layers).
class ContiguousSequenceCache final : public SequenceCache {
 public:
  ContiguousSequenceCache(CacheLayout layout, int max_tokens);

  const CacheLayout& layout() const override { return layout_; }
  int length() const override { return length_; }
  int max_tokens() const override { return max_tokens_; }
  int segment_length(int segment) const override { return segment_len_[segment]; }
  Result<KvAppendSlot> AppendKv(int layer, int n, const int32_t* pos,
                                const int32_t* index) override;
  KvLayerView Layer(int layer) const override;
  LinearAttentionState* Linear(int layer) override { return linear_[layer].get(); }
  // A layer whose buffer outgrew W - 1 + kWindowHeadroom rows (a prefill) keeps its W - 1 newest
  // entries in a buffer of that size and returns the prompt-sized one to the allocator; a
  // window-sized buffer is left to AppendKv's trimming.
  void TrimWindow(int layer) override;
  void Commit(int tokens, const std::vector<int>& added) override;
  size_t bytes() const override;

 private:
  struct LayerStore {
    Buffer k, v;                 // kv_dtype [capacity, kv_dim]
    std::vector<int32_t> pos, index;
    int capacity = 0;
    int count = 0;
  };
  Status Reserve(int layer, int needed);
  // Entries a trimmed sliding layer has room for beyond its W - 1: decode steps append this many
  // before the next trim moves the window (one memmove of W - 1 rows per kWindowHeadroom steps).
  static constexpr int kWindowHeadroom = 64;

  CacheLayout layout_;
  int max_tokens_;
  int length_ = 0;
  std::vector<int> segment_len_;
  std::vector<LayerStore> kv_;
  std::vector<std::unique_ptr<LinearAttentionState>> linear_;
};

}  // namespace uniprefill
