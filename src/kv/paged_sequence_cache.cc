#include "kv/paged_sequence_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

namespace uniprefill {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// Whether `layout` is what `manager` and `arena` were built for, and `id` is registered.
Status CheckMatches(const CacheLayout& layout, int max_tokens, const KvBlockManager* manager,
                    RequestId id, const KvArena* arena) {
  if (manager == nullptr || arena == nullptr) {
    return InvalidArgument("paged cache: no block manager or KV arena");
  }
  if (max_tokens < 0) return InvalidArgument("paged cache: max_tokens " + Str(max_tokens) + " < 0");
  UP_ASSIGN_OR_RETURN(KvCacheSpec spec,
                      KvCacheSpec::FromLayout(layout, KvElementBytes(layout.kv_dtype)));
  const KvCacheSpec& want = manager->spec();
  if (spec.n_segments() != want.n_segments()) {
    return InvalidArgument("paged cache: the layout has " + Str(spec.n_segments()) +
                           " segments but the KV block manager was built for " +
                           Str(want.n_segments()) + " (other drop layers)");
  }
  for (int s = 0; s < spec.n_segments(); ++s) {
    const KvSegmentSpec &a = spec.segments[s], &b = want.segments[s];
    if (a.full_layers != b.full_layers || a.sliding_layers != b.sliding_layers ||
        a.window != b.window) {
      return InvalidArgument(
          "paged cache: segment " + Str(s) + " of the layout has " + Str(a.full_layers) +
          " full and " + Str(a.sliding_layers) + " sliding layers (window " + Str(a.window) +
          "); the KV block manager's has " + Str(b.full_layers) + " and " +
          Str(b.sliding_layers) + " (window " + Str(b.window) + ")");
    }
  }
  if (spec.layer_token_bytes != want.layer_token_bytes || spec.linear_layers != want.linear_layers) {
    return InvalidArgument("paged cache: the layout needs " + Str(spec.layer_token_bytes) +
                           " bytes per token and layer and " + Str(spec.linear_layers) +
                           " linear layers; the KV block manager was sized for " +
                           Str(want.layer_token_bytes) + " and " + Str(want.linear_layers));
  }
  if (arena->dtype() != layout.kv_dtype) {
    return InvalidArgument(std::string("paged cache: the KV arena holds ") +
                           DTypeName(arena->dtype()) + " keys and values, the layout asks for " +
                           DTypeName(layout.kv_dtype));
  }
  if (arena->block_tokens() != manager->block_tokens() ||
      arena->block_bytes() != manager->block_bytes() ||
      arena->num_blocks() < manager->num_blocks() ||
      arena->state_slots() < manager->Usage().state_slots ||
      arena->linear_layers() != want.linear_layers) {
    return InvalidArgument(
        "paged cache: the KV arena (" + Str(arena->num_blocks()) + " blocks of " +
        Str(arena->block_tokens()) + " tokens, " + Str(arena->block_bytes()) + " bytes, " +
        Str(arena->state_slots()) + " state slots) does not back the KV block manager's pool (" +
        Str(manager->num_blocks()) + " blocks of " + Str(manager->block_tokens()) + " tokens, " +
        Str(manager->block_bytes()) + " bytes, " + Str(manager->Usage().state_slots) +
        " state slots)");
  }
  if (!manager->Contains(id)) {
    return InvalidArgument("paged cache: request " + Str(id) +
                           " holds no KV blocks; allocate it in the block manager first");
  }
  return OkStatus();
}

}  // namespace

Result<std::unique_ptr<PagedSequenceCache>> PagedSequenceCache::Create(
    CacheLayout layout, int max_tokens, const KvBlockManager* manager, RequestId id,
    KvArena* arena) {
  UP_RETURN_IF_ERROR(CheckMatches(layout, max_tokens, manager, id, arena));
  return std::make_unique<PagedSequenceCache>(std::move(layout), max_tokens, manager, id, arena);
}

PagedSequenceCache::PagedSequenceCache(CacheLayout layout, int max_tokens,
                                       const KvBlockManager* manager, RequestId id, KvArena* arena)
    : layout_(std::move(layout)),
      max_tokens_(max_tokens),
      manager_(manager),
      id_(id),
      arena_(arena) {
  assert(CheckMatches(layout_, max_tokens_, manager_, id_, arena_).ok());
  segment_len_.assign(layout_.n_segments, 0);
  layers_.resize(layout_.layers.size());
  std::vector<int> full_seen(layout_.n_segments, 0), sliding_seen(layout_.n_segments, 0);
  for (size_t i = 0; i < layout_.layers.size(); ++i) {
    const CacheLayerSpec& spec = layout_.layers[i];
    LayerState& l = layers_[i];
    l.segment = layout_.segment_of_layer[i];
    l.kv_dim = spec.kv_dim;
    if (spec.kind == CacheLayerKind::kLinearAttention) continue;
    l.attention = true;
    l.sliding = spec.kind == CacheLayerKind::kSlidingAttention;
    l.ordinal = l.sliding ? sliding_seen[l.segment]++ : full_seen[l.segment]++;
  }
  for (LayerState& l : layers_) {
    if (l.attention) l.layers_of_kind = (l.sliding ? sliding_seen : full_seen)[l.segment];
  }
  slot_ = manager_->StateSlot(id_);
  arena_->Reset(slot_);
}

std::span<const int> PagedSequenceCache::Table(const LayerState& l) const {
  return l.sliding ? manager_->SlidingTable(id_, l.segment) : manager_->FullTable(id_, l.segment);
}

Result<KvAppendSlot> PagedSequenceCache::AppendKv(int layer, int n, const int32_t* pos,
                                                  const int32_t* index) {
  UP_RETURN_IF_ERROR(broken_);
  const std::string who = "layer " + Str(layer);
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) {
    return InvalidArgument(who + " is outside the model's " + Str(layers_.size()) + " layers");
  }
  LayerState& l = layers_[layer];
  if (!l.attention) return InvalidArgument(who + " is a linear-attention layer: no KV");
  const int held = l.committed + l.staged;
  if (n < 0 || held + n > max_tokens_) {
    return OutOfRange("context is full: " + who + " holds " + Str(held) + " entries and " + Str(n) +
                      " more exceed the context length " + Str(max_tokens_));
  }
  for (int i = 0; i < n; ++i) {
    if (index[i] != held + i) {
      return Internal("paged cache: " + who + " holds " + Str(held) + " entries, so new entry " +
                      Str(i) + " must have alive index " + Str(held + i) + ", got " +
                      Str(index[i]));
    }
  }
  const int reserved = manager_->segment_tokens(id_, l.segment);
  if (reserved < held + n) {
    return Internal("paged cache: request " + Str(id_) + " " + who + " (segment " +
                    Str(l.segment) + ") needs room for " + Str(held + n) + " entries but the KV " +
                    "block manager reserved " + Str(reserved) +
                    " (blocks must be allocated before the forward)");
  }
  const size_t row = static_cast<size_t>(l.kv_dim) * KvElementBytes(layout_.kv_dtype);  // bytes
  const size_t rows = static_cast<size_t>(l.staged) + n;
  l.k.resize(rows * row);
  l.v.resize(rows * row);
  l.pos.insert(l.pos.end(), pos, pos + n);
  l.index.insert(l.index.end(), index, index + n);
  KvAppendSlot slot;
  slot.k = TensorView::Contiguous(l.k.data() + l.staged * row, layout_.kv_dtype, {n, l.kv_dim});
  slot.v = TensorView::Contiguous(l.v.data() + l.staged * row, layout_.kv_dtype, {n, l.kv_dim});
  l.staged += n;
  return slot;
}

KvLayerView PagedSequenceCache::Layer(int layer) const {
  const LayerState& l = layers_[layer];
  KvLayerView view;
  view.kv_dim = l.kv_dim;
  view.dtype = layout_.kv_dtype;
  if (!l.attention) return view;
  const std::span<const int> table = Table(l);
  const int bt = arena_->block_tokens();
  const int pages = (l.committed + bt - 1) / bt;
  for (int p = 0; p < pages; ++p) {
    const size_t entry = static_cast<size_t>(p) * l.layers_of_kind + l.ordinal;
    assert(entry < table.size());  // the manager holds every committed entry's page
    if (entry >= table.size()) break;
    const int block = table[entry];
    if (block == BlockPool::kNoBlock) continue;  // a sliding page behind every window
    view.chunks.push_back({arena_->k(block, 0, l.kv_dim), arena_->v(block, 0, l.kv_dim),
                           arena_->pos(block, 0), arena_->index(block, 0),
                           std::min(bt, l.committed - p * bt)});
  }
  if (l.staged > 0) {
    view.chunks.push_back({l.k.data(), l.v.data(), l.pos.data(), l.index.data(), l.staged});
  }
  return view;
}

LinearAttentionState* PagedSequenceCache::Linear(int layer) { return arena_->Linear(slot_, layer); }

void PagedSequenceCache::Scatter(int layer) {
  LayerState& l = layers_[layer];
  const std::span<const int> table = Table(l);
  const int bt = arena_->block_tokens();
  const size_t row_bytes = static_cast<size_t>(KvElementBytes(layout_.kv_dtype)) * l.kv_dim;
  // One run per block: rows j .. j + run - 1 go to consecutive rows of one block.
  for (int j = 0; j < l.staged;) {
    const int a = l.committed + j;  // alive index
    const int p = a / bt, r = a % bt, run = std::min(bt - r, l.staged - j);
    const size_t entry = static_cast<size_t>(p) * l.layers_of_kind + l.ordinal;
    const int block = entry < table.size() ? table[entry] : BlockPool::kNoBlock;
    if (block == BlockPool::kNoBlock) {
      if (broken_.ok()) {
        broken_ = Internal("paged cache: request " + Str(id_) + " layer " + Str(layer) +
                           " has no block for alive index " + Str(a) + " at Commit (the block " +
                           "tables changed during the step); its keys and values were lost");
      }
    } else {
      std::memcpy(arena_->k(block, r, l.kv_dim), l.k.data() + j * row_bytes, row_bytes * run);
      std::memcpy(arena_->v(block, r, l.kv_dim), l.v.data() + j * row_bytes, row_bytes * run);
      std::memcpy(arena_->pos(block, r), l.pos.data() + j, sizeof(int32_t) * run);
      std::memcpy(arena_->index(block, r), l.index.data() + j, sizeof(int32_t) * run);
    }
    j += run;
  }
  l.committed += l.staged;
  l.staged = 0;
  l.pos.clear();
  l.index.clear();
  // Keep a decode-sized buffer for the next step; give a prefill's rows back.
  if (l.k.capacity() > static_cast<size_t>(bt) * row_bytes) {
    std::vector<uint8_t>().swap(l.k);
    std::vector<uint8_t>().swap(l.v);
    std::vector<int32_t>().swap(l.pos);
    std::vector<int32_t>().swap(l.index);
  } else {
    l.k.clear();
    l.v.clear();
  }
}

void PagedSequenceCache::Commit(int tokens, const std::vector<int>& added) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].attention && layers_[i].staged > 0) Scatter(static_cast<int>(i));
  }
  length_ += tokens;
  for (size_t s = 0; s < added.size() && s < segment_len_.size(); ++s) segment_len_[s] += added[s];
#ifndef NDEBUG
  for (const LayerState& l : layers_) {
    assert(!l.attention || l.committed == segment_len_[l.segment]);
  }
#endif
}

size_t PagedSequenceCache::bytes() const {
  const int64_t linear = arena_->linear_layers() > 0 ? arena_->slot_state_bytes() : 0;
  return static_cast<size_t>(int64_t{manager_->BlocksHeld(id_)} * manager_->block_bytes() + linear);
}

}  // namespace uniprefill
