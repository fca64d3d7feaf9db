// The device memory behind a CUDA model's caches, and the per-request cache over it.
//
// CudaKvPool holds, for every attention layer and request of one model:
//   kv    bf16 [num_blocks, 2 (K, V), block_tokens, kv_dim]   (ops/cuda/cuda_paged_attention.h)
//         laid out as two planes, every block's K rows, then every block's V rows (strides
//         {block_tokens kv_dim, num_blocks block_tokens kv_dim, kv_dim, 1}): consecutive blocks
//         are consecutive K rows and V rows, so a request whose pages of a layer are one run of
//         blocks has that layer's keys in one piece, which attention reads in place;
//   meta  int32 [num_blocks, 2 (position, alive index), block_tokens]
// and per linear-attention (Gated DeltaNet) layer a slab of state slots:
//   conv f32 [slots, K - 1, conv_dim], recurrent f32 [slots, Hv, Dk, Dv] (cuda_linear_attention.h).
// A block holds block_tokens entries of one layer of one request (as KvBlockManager counts them),
// so the serving engine can size this pool exactly like its manager's (FixCapacity). Without a
// fixed capacity the pool grows on demand (doubling, old contents copied; block ids stay valid).
//
// Free blocks are extents (kv/block_extents.h): single blocks from the lowest free id, runs by
// best fit.
//
// CudaSequenceCache is one request's SequenceCache on that pool: per attention layer the list of
// its blocks (alive index a lives in blocks[a / block_tokens], row a % block_tokens) and per
// segment the token counts; its state slot for the linear layers. Told the prefill's length
// (ExpectPrefill), a full-attention layer takes the run of blocks its entries will fill at its
// first append and fills it in order (contiguous_pages); without a run (none free, short or
// sliding layers) pages take single blocks. The CUDA model writes entries
// through AppendSlots (device kernels scatter K/V and meta into the returned slots); the generic
// AppendKv / Layer of the host interface are not available on device memory.
//
// Not thread-safe: one engine thread drives a model's forwards and caches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/device_buffer.h"
#include "core/device_context.h"
#include "core/status.h"
#include "kv/block_extents.h"
#include "kv/sequence_cache.h"

namespace uniprefill {

class CudaKvPool {
 public:
  CudaKvPool(DeviceContext& ctx, const CacheLayout& layout, int block_tokens);

  int block_tokens() const { return block_tokens_; }
  int kv_dim() const { return kv_dim_; }
  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return free_.free_count(); }
  int64_t block_bytes() const { return int64_t{2} * block_tokens_ * kv_dim_ * 2; }

  // Sizes the pool to exactly num_blocks blocks (no later growth). Fails if blocks are in use.
  Status FixCapacity(int num_blocks);

  // At least n free blocks now (a growing pool grows; a fixed one is left as it is), so that a
  // step captured into a CUDA graph never grows the pool (which synchronises) mid-capture.
  Status ReserveFreeBlocks(int n);
  bool fixed() const { return fixed_; }
  Result<int> AllocateBlock();
  void FreeBlock(int block);
  // `count` consecutive blocks (a growing pool grows for them), or -1 when no free run is that
  // long; never an error (the caller falls back to single blocks). FreeBlock returns each.
  int AllocateRun(int count);
  // A state slot with every linear layer's state zeroed.
  Result<int> AllocateSlot();
  void FreeSlot(int slot);

  // bf16 [num_blocks, 2, block_tokens, kv_dim].
  TensorView kv() const;
  // int32 [num_blocks, block_tokens] (row stride 2 * block_tokens): the positions or alive indices.
  TensorView coords(bool positions) const;
  int32_t* meta() const { return meta_.as<int32_t>(); }
  // State slabs of the ordinal-th linear-attention layer.
  float* conv_state(int ordinal) const { return linear_[ordinal].conv.as<float>(); }
  float* recurrent_state(int ordinal) const { return linear_[ordinal].recurrent.as<float>(); }
  // The ordinal of model layer `layer` among the linear layers, or -1.
  int linear_ordinal(int layer) const { return linear_of_layer_[layer]; }
  size_t slot_bytes() const;

 private:
  struct LinearSlab {
    LinearStateShape shape;
    DeviceBuffer conv, recurrent;
    int64_t conv_floats() const { return int64_t{shape.conv_kernel - 1} * shape.conv_dim; }
    int64_t recurrent_floats() const { return int64_t{shape.n_v_heads} * shape.d_k * shape.d_v; }
  };
  Status GrowBlocks(int num_blocks);
  Status GrowSlots(int slots);

  DeviceContext& ctx_;
  int block_tokens_;
  int kv_dim_ = 0;
  int num_blocks_ = 0;
  bool fixed_ = false;
  DeviceBuffer kv_, meta_;
  BlockExtents free_;
  int num_slots_ = 0;
  std::vector<int> free_slots_;
  std::vector<int> linear_of_layer_;
  std::vector<LinearSlab> linear_;
};

class CudaSequenceCache final : public SequenceCache {
 public:
  // runs false: ExpectPrefill is ignored (single blocks only: UNIPREFILL_CUDA_PREFIX_COPY).
  CudaSequenceCache(CacheLayout layout, int max_tokens, CudaKvPool* pool, bool runs = true);
  ~CudaSequenceCache() override;

  const CacheLayout& layout() const override { return layout_; }
  int length() const override { return length_; }
  int max_tokens() const override { return max_tokens_; }
  int segment_length(int segment) const override { return segment_len_[segment]; }
  // Device caches are written by the CUDA model (AppendSlots); these host-memory calls fail.
  Result<KvAppendSlot> AppendKv(int layer, int n, const int32_t* pos,
                                const int32_t* index) override;
  KvLayerView Layer(int layer) const override;
  LinearAttentionState* Linear(int) override { return nullptr; }
  void Commit(int tokens, const std::vector<int>& added) override;
  void ExpectPrefill(int tokens, bool every_segment) override;
  size_t bytes() const override;

  // Makes room for n entries of attention layer `layer` and appends their global slot ids
  // (block * block_tokens + row) to *slots; the entries count as held from now on. Entries of pages
  // wholly below alive index first_stored are not stored (slot -1, page -1): a sliding layer's
  // prefill computed from the step's own keys keeps only the pages its window can still reach.
  // expected: entries the layer will hold once this prefill is done (a segment-wise chunk's
  // segment rows), 0 when unknown; with ExpectPrefill's count, sizes the run a full-attention
  // layer takes at its first append.
  Status AppendSlots(int layer, int n, int first_stored, std::vector<int32_t>* slots,
                     int expected = 0);
  // Forgets the last n entries of attention layer `layer` and returns the pages they alone held
  // (the padding rows of a bounded segment, once the forward knows the true kept count).
  void DropTail(int layer, int n);
  // Entries held by attention layer `layer` and its block table (-1: a released page).
  int count(int layer) const { return layers_[layer].count; }
  const std::vector<int32_t>& blocks(int layer) const { return layers_[layer].blocks; }
  // Pages 0 .. contiguous_pages(layer) - 1 of the layer are blocks blocks[0], blocks[0] + 1, ...:
  // their entries are consecutive rows of the pool's K and V planes.
  int contiguous_pages(int layer) const { return layers_[layer].contiguous; }
  // Returns to the pool the pages of a sliding layer whose every entry has an alive index at most
  // count - window (invisible to every later query when windows count alive indices).
  void ReleaseBehindWindow(int layer, int window);
  // The state slot of the linear layers (allocated, zeroed, on first call).
  Result<int> StateSlot();
  bool empty() const { return length_ == 0; }

 private:
  struct LayerBlocks {
    std::vector<int32_t> blocks;
    int count = 0;
    int contiguous = 0;             // leading pages in one run of blocks
    int run_next = 0, run_end = 0;  // blocks of its run not yet handed to a page
  };
  // Fewer pages than this take single blocks: a short prefix is cheap to copy, and long runs
  // stay whole for long prompts.
  static constexpr int kMinRunPages = 32;
  Result<int> NextBlock(LayerBlocks& l);
  void ReturnRun(LayerBlocks& l);
  CacheLayout layout_;
  int max_tokens_;
  CudaKvPool* pool_;
  int length_ = 0;
  std::vector<int> segment_len_;
  std::vector<LayerBlocks> layers_;
  int slot_ = -1;
  int held_blocks_ = 0;
  std::vector<int> expected_;  // per segment: entries its full layers will hold (0: unknown)
  bool runs_ = true;
};

}  // namespace uniprefill
