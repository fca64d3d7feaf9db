#include "backend/cuda/cuda_kv_cache.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cassert>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace uniprefill {

CudaKvPool::CudaKvPool(DeviceContext& ctx, const CacheLayout& layout, int block_tokens)
    : ctx_(ctx), block_tokens_(block_tokens) {
  linear_of_layer_.assign(layout.layers.size(), -1);
  for (size_t i = 0; i < layout.layers.size(); ++i) {
    const CacheLayerSpec& s = layout.layers[i];
    if (s.kind == CacheLayerKind::kLinearAttention) {
      linear_of_layer_[i] = static_cast<int>(linear_.size());
      LinearSlab slab;
      slab.shape = s.linear;
      linear_.push_back(std::move(slab));
    } else {
      kv_dim_ = std::max(kv_dim_, s.kv_dim);
    }
  }
}

size_t CudaKvPool::slot_bytes() const {
  size_t b = 0;
  for (const LinearSlab& s : linear_) b += 4 * (s.conv_floats() + s.recurrent_floats());
  return b;
}

Status CudaKvPool::GrowBlocks(int num_blocks) {
  const size_t kv_bytes = static_cast<size_t>(num_blocks) * block_bytes();
  const size_t meta_bytes = static_cast<size_t>(num_blocks) * 2 * block_tokens_ * 4;
  Result<DeviceBuffer> kv = DeviceBuffer::Allocate(std::max<size_t>(kv_bytes, 16));
  if (!kv.ok()) {
    return ResourceExhausted("the GPU KV cache needs " + std::to_string(kv_bytes >> 20) +
                             " MiB for " + std::to_string(num_blocks) + " blocks of " +
                             std::to_string(block_tokens_) + " tokens: " + kv.status().message() +
                             "; use a shorter context (--ctx-size) or fewer concurrent requests");
  }
  UP_ASSIGN_OR_RETURN(DeviceBuffer meta, DeviceBuffer::Allocate(std::max<size_t>(meta_bytes, 16)));
  cudaStream_t stream = ctx_.cuda().stream();
  // Zeros, so that every row holds finite values before it is written: attention kernels read
  // the rows past a request's last key within their last key tile and mask them, and 0 x NaN
  // would not vanish (CudaBackend::WgmmaPrefixBatch reads the planes so).
  UP_CUDA_CHECK(cudaMemsetAsync(kv->data(), 0, kv_bytes, stream));
  if (num_blocks_ > 0) {
    // Each plane (K, then V) keeps its blocks at the start of the new plane.
    const size_t plane = static_cast<size_t>(num_blocks_) * block_bytes() / 2;
    UP_CUDA_CHECK(cudaMemcpyAsync(kv->data(), kv_.data(), plane, cudaMemcpyDeviceToDevice,
                                  stream));
    UP_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(kv->data()) + kv_bytes / 2,
                                  static_cast<const char*>(kv_.data()) + plane, plane,
                                  cudaMemcpyDeviceToDevice, stream));
    UP_CUDA_CHECK(cudaMemcpyAsync(meta.data(), meta_.data(),
                                  static_cast<size_t>(num_blocks_) * 2 * block_tokens_ * 4,
                                  cudaMemcpyDeviceToDevice, stream));
    UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  free_.Grow(num_blocks);
  kv_ = std::move(*kv);
  meta_ = std::move(meta);
  num_blocks_ = num_blocks;
  return OkStatus();
}

Status CudaKvPool::FixCapacity(int num_blocks) {
  if (free_.free_count() != num_blocks_) {
    return Internal("the GPU KV pool is in use; size it before the first request");
  }
  free_ = BlockExtents();
  num_blocks_ = 0;
  kv_ = DeviceBuffer();
  meta_ = DeviceBuffer();
  UP_RETURN_IF_ERROR(GrowBlocks(num_blocks));
  fixed_ = true;
  return OkStatus();
}

Status CudaKvPool::ReserveFreeBlocks(int n) {
  const int missing = n - free_.free_count();
  if (fixed_ || missing <= 0) return OkStatus();
  return GrowBlocks(std::max({64, num_blocks_ * 2, num_blocks_ + missing}));
}

Result<int> CudaKvPool::AllocateBlock() {
  if (free_.free_count() == 0) {
    if (fixed_) {
      return ResourceExhausted("the GPU KV cache is full (" + std::to_string(num_blocks_) +
                               " blocks); raise --kv-cache-memory or lower --max-num-seqs");
    }
    UP_RETURN_IF_ERROR(GrowBlocks(std::max(64, num_blocks_ * 2)));
  }
  return free_.TakeOne();
}

int CudaKvPool::AllocateRun(int count) {
  if (!fixed_ && free_.longest_run() < count) {
    // Doubling leaves the new blocks in one extent (with any free tail) long enough for it.
    if (!GrowBlocks(std::max({64, num_blocks_ * 2, num_blocks_ + count})).ok()) return -1;
  }
  return free_.TakeRun(count);
}

void CudaKvPool::FreeBlock(int block) {
  [[maybe_unused]] const Status st = free_.Free(block);
  assert(st.ok());
}

Status CudaKvPool::GrowSlots(int slots) {
  cudaStream_t stream = ctx_.cuda().stream();
  for (LinearSlab& s : linear_) {
    UP_ASSIGN_OR_RETURN(DeviceBuffer conv,
                        DeviceBuffer::Allocate(std::max<size_t>(4 * slots * s.conv_floats(), 16)));
    UP_ASSIGN_OR_RETURN(DeviceBuffer rec, DeviceBuffer::Allocate(std::max<size_t>(
                                              4 * slots * s.recurrent_floats(), 16)));
    if (num_slots_ > 0) {
      UP_CUDA_CHECK(cudaMemcpyAsync(conv.data(), s.conv.data(), 4 * num_slots_ * s.conv_floats(),
                                    cudaMemcpyDeviceToDevice, stream));
      UP_CUDA_CHECK(cudaMemcpyAsync(rec.data(), s.recurrent.data(),
                                    4 * num_slots_ * s.recurrent_floats(), cudaMemcpyDeviceToDevice,
                                    stream));
    }
    s.conv = std::move(conv);
    s.recurrent = std::move(rec);
  }
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int i = slots - 1; i >= num_slots_; --i) free_slots_.push_back(i);
  num_slots_ = slots;
  return OkStatus();
}

Result<int> CudaKvPool::AllocateSlot() {
  if (free_slots_.empty()) UP_RETURN_IF_ERROR(GrowSlots(std::max(4, num_slots_ * 2)));
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  cudaStream_t stream = ctx_.cuda().stream();
  for (LinearSlab& s : linear_) {
    UP_CUDA_CHECK(cudaMemsetAsync(s.conv.as<float>() + slot * s.conv_floats(), 0,
                                  4 * s.conv_floats(), stream));
    UP_CUDA_CHECK(cudaMemsetAsync(s.recurrent.as<float>() + slot * s.recurrent_floats(), 0,
                                  4 * s.recurrent_floats(), stream));
  }
  return slot;
}

void CudaKvPool::FreeSlot(int slot) { free_slots_.push_back(slot); }

TensorView CudaKvPool::kv() const {
  TensorView v = TensorView::Contiguous(kv_.data(), DType::kBF16,
                                        {num_blocks_, 2, block_tokens_, kv_dim_}, Device::kCuda);
  v.stride[0] = int64_t{block_tokens_} * kv_dim_;  // the K plane, then the V plane
  v.stride[1] = int64_t{num_blocks_} * block_tokens_ * kv_dim_;
  return v;
}

TensorView CudaKvPool::coords(bool positions) const {
  TensorView v = TensorView::Contiguous(meta_.as<int32_t>() + (positions ? 0 : block_tokens_),
                                        DType::kI32, {num_blocks_, block_tokens_}, Device::kCuda);
  v.stride[0] = 2 * block_tokens_;
  return v;
}

CudaSequenceCache::CudaSequenceCache(CacheLayout layout, int max_tokens, CudaKvPool* pool,
                                     bool runs)
    : layout_(std::move(layout)), max_tokens_(max_tokens), pool_(pool), runs_(runs) {
  segment_len_.assign(layout_.n_segments, 0);
  layers_.resize(layout_.layers.size());
}

CudaSequenceCache::~CudaSequenceCache() {
  for (LayerBlocks& l : layers_) {
    for (int32_t b : l.blocks) {
      if (b >= 0) pool_->FreeBlock(b);
    }
    ReturnRun(l);
  }
  if (slot_ >= 0) pool_->FreeSlot(slot_);
}

void CudaSequenceCache::ExpectPrefill(int tokens, bool every_segment) {
  expected_.assign(layout_.n_segments, 0);
  for (int s = 0; s < layout_.n_segments; ++s) {
    if (s == 0 || every_segment) expected_[s] = tokens;
  }
}

void CudaSequenceCache::ReturnRun(LayerBlocks& l) {
  for (; l.run_next < l.run_end; ++l.run_next) pool_->FreeBlock(l.run_next);
}

Result<int> CudaSequenceCache::NextBlock(LayerBlocks& l) {
  if (l.run_next < l.run_end) return l.run_next++;
  return pool_->AllocateBlock();
}

Result<KvAppendSlot> CudaSequenceCache::AppendKv(int, int, const int32_t*, const int32_t*) {
  return Internal("a GPU cache is written by the CUDA model, not through AppendKv");
}

KvLayerView CudaSequenceCache::Layer(int layer) const {
  KvLayerView v;
  v.kv_dim = layout_.layers[layer].kv_dim;
  return v;  // device memory: no host chunks
}

void CudaSequenceCache::Commit(int tokens, const std::vector<int>& added) {
  length_ += tokens;
  for (size_t s = 0; s < added.size() && s < segment_len_.size(); ++s) segment_len_[s] += added[s];
}

size_t CudaSequenceCache::bytes() const {
  return static_cast<size_t>(held_blocks_) * pool_->block_bytes() +
         (slot_ >= 0 ? pool_->slot_bytes() : 0);
}

Status CudaSequenceCache::AppendSlots(int layer, int n, int first_stored,
                                      std::vector<int32_t>* slots, int expected) {
  LayerBlocks& l = layers_[layer];
  const int bt = pool_->block_tokens();
  // A full-attention layer's first append takes the run of blocks its prefill will fill. Not on
  // an append of no rows: a segment-wise chunk passes every layer outside its segment with 0
  // rows, and a run claimed there again at each step leaked (H200, session 7: a 130K UniPrefill
  // prompt filled a 48 GiB pool in a few steps).
  if (runs_ && n > 0 && l.count == 0 && l.blocks.empty() && first_stored <= 0 &&
      layout_.layers[layer].kind == CacheLayerKind::kFullAttention) {
    const int segment = layout_.segment_of_layer[layer];
    if (segment < static_cast<int>(expected_.size())) {
      expected = std::max(expected, expected_[segment]);
    }
    const int pages = (std::max(n, expected) + bt - 1) / bt;
    ReturnRun(l);  // what a layer emptied by DropTail still held of an earlier run
    if (pages >= kMinRunPages) {
      const int first = pool_->AllocateRun(pages);
      if (first >= 0) l.run_next = first, l.run_end = first + pages;
    }
  }
  for (int i = 0; i < n; ++i) {
    const int a = l.count + i;
    const int page = a / bt;
    if (page < first_stored / bt) {  // a whole page below first_stored: never read again
      while (static_cast<int>(l.blocks.size()) <= page) l.blocks.push_back(-1);
      slots->push_back(-1);
      continue;
    }
    while (static_cast<int>(l.blocks.size()) <= page) l.blocks.push_back(-1);
    if (l.blocks[page] < 0) {
      UP_ASSIGN_OR_RETURN(int b, NextBlock(l));
      l.blocks[page] = b;
      ++held_blocks_;
      if (page == l.contiguous && (page == 0 || b == l.blocks[page - 1] + 1)) ++l.contiguous;
    }
    slots->push_back(l.blocks[page] * bt + a % bt);
  }
  l.count += n;
  return OkStatus();
}

void CudaSequenceCache::ReleaseBehindWindow(int layer, int window) {
  LayerBlocks& l = layers_[layer];
  const int bt = pool_->block_tokens();
  // Page p holds alive indices [p bt, (p + 1) bt); a later query (index >= count) sees keys with
  // index > count - window.
  for (size_t p = 0; p < l.blocks.size(); ++p) {
    const int64_t last = static_cast<int64_t>(p + 1) * bt - 1;
    if (last > l.count - window) break;
    if (l.blocks[p] >= 0) {
      pool_->FreeBlock(l.blocks[p]);
      l.blocks[p] = -1;
      --held_blocks_;
      l.contiguous = 0;
    }
  }
}

void CudaSequenceCache::DropTail(int layer, int n) {
  LayerBlocks& l = layers_[layer];
  const int bt = pool_->block_tokens();
  l.count -= std::min(n, l.count);
  const size_t pages = static_cast<size_t>((l.count + bt - 1) / bt);
  while (l.blocks.size() > pages) {
    const int32_t b = l.blocks.back();
    if (b >= 0) {
      // The run's last block handed out goes back to the run (the next page gets it again).
      if (b == l.run_next - 1) {
        --l.run_next;
      } else {
        pool_->FreeBlock(b);
      }
      --held_blocks_;
    }
    l.blocks.pop_back();
  }
  l.contiguous = std::min<int>(l.contiguous, static_cast<int>(l.blocks.size()));
}

Result<int> CudaSequenceCache::StateSlot() {
  if (slot_ < 0) {
    UP_ASSIGN_OR_RETURN(slot_, pool_->AllocateSlot());
  }
  return slot_;
}

}  // namespace uniprefill
