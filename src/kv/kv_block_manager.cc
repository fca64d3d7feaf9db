#include "kv/kv_block_manager.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <string>

#include "kv/sequence_cache.h"

namespace uniprefill {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

Status KvCacheSpec::Validate() const {
  if (segments.empty()) return InvalidArgument("KV cache spec has no segments");
  bool attention = false;
  for (int s = 0; s < n_segments(); ++s) {
    const KvSegmentSpec& seg = segments[s];
    if (seg.full_layers < 0 || seg.sliding_layers < 0) {
      return InvalidArgument("segment " + Str(s) + " has a negative layer count");
    }
    if (seg.sliding_layers > 0 && seg.window < 1) {
      return InvalidArgument("segment " + Str(s) + " has sliding-window layers but window " +
                             Str(seg.window) + "; the window must be >= 1");
    }
    attention = attention || seg.full_layers + seg.sliding_layers > 0;
  }
  if (attention && layer_token_bytes <= 0) {
    return InvalidArgument("attention layers need layer_token_bytes > 0, got " +
                           Str(layer_token_bytes));
  }
  if (linear_layers < 0 || linear_state_bytes < 0) {
    return InvalidArgument("negative linear-attention layer count or state size");
  }
  return OkStatus();
}

Result<KvCacheSpec> KvCacheSpec::FromLayout(const CacheLayout& layout, int kv_element_bytes) {
  if (layout.segment_of_layer.size() != layout.layers.size() || layout.n_segments < 1) {
    return InvalidArgument("cache layout: segment_of_layer has " +
                           Str(layout.segment_of_layer.size()) + " entries for " +
                           Str(layout.layers.size()) + " layers");
  }
  if (kv_element_bytes < 1) {
    return InvalidArgument("KV element size must be >= 1 byte, got " + Str(kv_element_bytes));
  }
  KvCacheSpec spec;
  spec.segments.resize(layout.n_segments);
  for (size_t i = 0; i < layout.layers.size(); ++i) {
    const CacheLayerSpec& layer = layout.layers[i];
    const int s = layout.segment_of_layer[i];
    if (s < 0 || s >= layout.n_segments) {
      return InvalidArgument("cache layout: layer " + Str(i) + " is in segment " + Str(s) + " of " +
                             Str(layout.n_segments));
    }
    KvSegmentSpec& seg = spec.segments[s];
    const int64_t token_bytes = int64_t{2} * layer.kv_dim * kv_element_bytes;  // K and V
    switch (layer.kind) {
      case CacheLayerKind::kFullAttention:
        ++seg.full_layers;
        spec.layer_token_bytes = std::max(spec.layer_token_bytes, token_bytes);
        break;
      case CacheLayerKind::kSlidingAttention:
        ++seg.sliding_layers;
        seg.window = std::max(seg.window, layer.window);
        spec.layer_token_bytes = std::max(spec.layer_token_bytes, token_bytes);
        break;
      case CacheLayerKind::kLinearAttention: {
        const LinearStateShape& l = layer.linear;
        const int64_t floats =
            int64_t{l.conv_kernel - 1} * l.conv_dim + int64_t{l.n_v_heads} * l.d_k * l.d_v;
        ++spec.linear_layers;
        spec.linear_state_bytes = std::max(spec.linear_state_bytes, floats * int64_t{4});
        break;
      }
    }
  }
  UP_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

Result<KvPoolSize> KvBlockManager::SizePool(const KvCacheSpec& spec, const KvCacheConfig& config) {
  UP_RETURN_IF_ERROR(spec.Validate());
  if (config.block_tokens < 1) {
    return InvalidArgument("--kv-block-tokens must be >= 1, got " + Str(config.block_tokens));
  }
  if (config.max_seqs < 1) {
    return InvalidArgument("--max-num-seqs must be >= 1, got " + Str(config.max_seqs));
  }
  if (config.memory_bytes <= 0) {
    return InvalidArgument("--kv-cache-memory must be > 0 bytes, got " + Str(config.memory_bytes));
  }
  const int64_t slot_bytes = int64_t{spec.linear_layers} * spec.linear_state_bytes;
  const int64_t state_bytes = int64_t{config.max_seqs} * slot_bytes;
  if (state_bytes >= config.memory_bytes) {
    return ResourceExhausted("--kv-cache-memory " + Str(config.memory_bytes) +
                             " bytes does not cover the linear-attention state of --max-num-seqs " +
                             Str(config.max_seqs) + " requests (" + Str(slot_bytes) +
                             " bytes each, " + Str(state_bytes) +
                             " in all); raise --kv-cache-memory or lower "
                             "--max-num-seqs");
  }
  KvPoolSize size;
  size.block_tokens = config.block_tokens;
  size.state_slots = config.max_seqs;
  bool attention = false;
  for (const KvSegmentSpec& seg : spec.segments) {
    attention = attention || seg.full_layers + seg.sliding_layers > 0;
  }
  if (!attention) return size;  // linear attention only: no KV blocks at all
  const int64_t block_bytes = int64_t{config.block_tokens} * spec.layer_token_bytes;
  const int64_t blocks = (config.memory_bytes - state_bytes) / block_bytes;
  if (blocks < 1) {
    return ResourceExhausted("--kv-cache-memory " + Str(config.memory_bytes) + " bytes leaves " +
                             Str(config.memory_bytes - state_bytes) +
                             " bytes after linear-attention state, less than one KV block of " +
                             Str(block_bytes) + " bytes (" + Str(config.block_tokens) +
                             " tokens x " + Str(spec.layer_token_bytes) +
                             " bytes per token and layer); raise --kv-cache-memory");
  }
  size.num_blocks = static_cast<int>(std::min<int64_t>(blocks, INT_MAX));
  return size;
}

Result<KvBlockManager> KvBlockManager::Create(KvCacheSpec spec, const KvCacheConfig& config) {
  UP_ASSIGN_OR_RETURN(KvPoolSize size, SizePool(spec, config));
  return KvBlockManager(std::move(spec), size);
}

KvBlockManager::KvBlockManager(KvCacheSpec spec, KvPoolSize size)
    : spec_(std::move(spec)),
      block_tokens_(std::max(1, size.block_tokens)),
      pool_(size.num_blocks),
      slots_(size.state_slots) {}

Status KvBlockManager::CheckCounts(const std::vector<int>& counts, const char* what) const {
  if (static_cast<int>(counts.size()) != n_segments()) {
    return InvalidArgument(std::string(what) + " has " + Str(counts.size()) +
                           " entries; the cache has " + Str(n_segments()) + " segments");
  }
  for (int s = 0; s < n_segments(); ++s) {
    if (counts[s] < 0) {
      return InvalidArgument(std::string(what) + "[" + Str(s) + "] is negative: " + Str(counts[s]));
    }
  }
  return OkStatus();
}

int KvBlockManager::BlocksFor(const std::vector<int>& tokens) const {
  if (!CheckCounts(tokens, "tokens").ok()) return -1;
  int blocks = 0;
  for (int s = 0; s < n_segments(); ++s) {
    const KvSegmentSpec& seg = spec_.segments[s];
    blocks += Pages(tokens[s]) * (seg.full_layers + seg.sliding_layers);
  }
  return blocks;
}

int KvBlockManager::DenseBlocksFor(int tokens) const {
  return BlocksFor(std::vector<int>(n_segments(), tokens));
}

bool KvBlockManager::CanAllocate(const std::vector<int>& tokens) const {
  const int need = BlocksFor(tokens);
  return need >= 0 && need <= pool_.free_count() && slots_.free_count() > 0;
}

Status KvBlockManager::Allocate(RequestId id, const std::vector<int>& tokens) {
  if (Contains(id)) return InvalidArgument("request " + Str(id) + " already holds KV blocks");
  UP_RETURN_IF_ERROR(CheckCounts(tokens, "tokens"));
  const int need = BlocksFor(tokens);
  if (need > pool_.free_count()) {
    return ResourceExhausted("request " + Str(id) + " needs " + Str(need) + " KV blocks; " +
                             Str(pool_.free_count()) + " of " + Str(num_blocks()) + " are free");
  }
  if (slots_.free_count() == 0) {
    return ResourceExhausted("request " + Str(id) + ": all " + Str(slots_.num_blocks()) +
                             " sequence slots (--max-num-seqs) are in use");
  }
  RequestTables r;
  r.state_slot = *slots_.Allocate();
  r.segments.resize(n_segments());
  Grow(r, tokens);
  requests_.emplace(id, std::move(r));
  return OkStatus();
}

int KvBlockManager::BlocksToExtend(RequestId id, const std::vector<int>& added) const {
  auto it = requests_.find(id);
  if (it == requests_.end() || !CheckCounts(added, "added").ok()) return -1;
  int blocks = 0;
  for (int s = 0; s < n_segments(); ++s) {
    const KvSegmentSpec& seg = spec_.segments[s];
    const int t = it->second.segments[s].tokens;
    blocks += (Pages(t + added[s]) - Pages(t)) * (seg.full_layers + seg.sliding_layers);
  }
  return blocks;
}

Status KvBlockManager::Extend(RequestId id, const std::vector<int>& added) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFound("request " + Str(id) + " holds no KV blocks");
  UP_RETURN_IF_ERROR(CheckCounts(added, "added"));
  const int need = BlocksToExtend(id, added);
  if (need > pool_.free_count()) {
    return ResourceExhausted("request " + Str(id) + " needs " + Str(need) + " more KV blocks; " +
                             Str(pool_.free_count()) + " of " + Str(num_blocks()) + " are free");
  }
  Grow(it->second, added);
  return OkStatus();
}

bool KvBlockManager::CanAppendDecode(RequestId id) const {
  const int need = BlocksToExtend(id, std::vector<int>(n_segments(), 1));
  return need >= 0 && need <= pool_.free_count();
}

Status KvBlockManager::AppendDecode(RequestId id) {
  return Extend(id, std::vector<int>(n_segments(), 1));
}

void KvBlockManager::Grow(RequestTables& r, const std::vector<int>& added) {
  for (int s = 0; s < n_segments(); ++s) {
    const KvSegmentSpec& spec = spec_.segments[s];
    SegmentTables& seg = r.segments[s];
    const int old_pages = Pages(seg.tokens), new_pages = Pages(seg.tokens + added[s]);
    for (int p = old_pages; p < new_pages; ++p) {
      for (int l = 0; l < spec.full_layers; ++l) seg.full.push_back(*pool_.Allocate());
    }
    for (int p = old_pages; p < new_pages; ++p) {
      for (int l = 0; l < spec.sliding_layers; ++l) seg.sliding.push_back(*pool_.Allocate());
    }
    r.blocks += (new_pages - old_pages) * (spec.full_layers + spec.sliding_layers);
    seg.tokens += added[s];
  }
}

void KvBlockManager::FreeBlock(RequestTables& r, int& entry) {
  if (entry == BlockPool::kNoBlock) return;
  [[maybe_unused]] const Status st = pool_.Free(entry);
  assert(st.ok());  // a table entry always names a used block (CheckInvariants)
  entry = BlockPool::kNoBlock;
  --r.blocks;
}

void KvBlockManager::ShrinkSegment(RequestTables& r, int segment, int tokens) {
  const KvSegmentSpec& spec = spec_.segments[segment];
  SegmentTables& seg = r.segments[segment];
  const int pages = Pages(tokens);
  // Reverse allocation order: sliding pages, then full pages, each from the back.
  const size_t sliding_keep = static_cast<size_t>(pages) * spec.sliding_layers;
  while (seg.sliding.size() > sliding_keep) {
    FreeBlock(r, seg.sliding.back());
    seg.sliding.pop_back();
  }
  const size_t full_keep = static_cast<size_t>(pages) * spec.full_layers;
  while (seg.full.size() > full_keep) {
    FreeBlock(r, seg.full.back());
    seg.full.pop_back();
  }
  seg.tokens = tokens;
  seg.sliding_first_live = std::min(seg.sliding_first_live, pages);
}

void KvBlockManager::ReleaseSegmentWindow(RequestTables& r, int segment) {
  const KvSegmentSpec& spec = spec_.segments[segment];
  if (spec.sliding_layers == 0) return;
  SegmentTables& seg = r.segments[segment];
  // Pages wholly below keep_from = T - (W - 1) are outside every future query's window.
  const auto first_live = [&](int tokens) {
    const int keep_from = std::max(0, tokens - (spec.window - 1));
    return std::min(keep_from / block_tokens_, Pages(tokens));
  };
  const int first = first_live(seg.tokens);
  for (int p = seg.sliding_first_live; p < first; ++p) {
    for (int l = 0; l < spec.sliding_layers; ++l) {
      FreeBlock(r, seg.sliding[static_cast<size_t>(p) * spec.sliding_layers + l]);
    }
  }
  seg.sliding_first_live = std::max(seg.sliding_first_live, first);
  seg.dense_first_live = std::max(seg.dense_first_live, first_live(r.segments[0].tokens));
}

Status KvBlockManager::CommitPrefill(RequestId id, const std::vector<int>& kept) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFound("request " + Str(id) + " holds no KV blocks");
  UP_RETURN_IF_ERROR(CheckCounts(kept, "kept"));
  RequestTables& r = it->second;
  for (int s = 0; s < n_segments(); ++s) {
    if (kept[s] > r.segments[s].tokens) {
      return InvalidArgument("request " + Str(id) + " segment " + Str(s) + " kept " + Str(kept[s]) +
                             " tokens but only " + Str(r.segments[s].tokens) + " were reserved");
    }
  }
  for (int s = n_segments() - 1; s >= 0; --s) ShrinkSegment(r, s, kept[s]);
  const int dense_pages = Pages(r.segments[0].tokens);
  for (SegmentTables& seg : r.segments) {
    seg.dense_first_live = std::min(seg.dense_first_live, dense_pages);
  }
  return ReleaseWindow(id);
}

Status KvBlockManager::ReleaseWindow(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFound("request " + Str(id) + " holds no KV blocks");
  for (int s = 0; s < n_segments(); ++s) ReleaseSegmentWindow(it->second, s);
  return OkStatus();
}

Status KvBlockManager::Free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFound("request " + Str(id) + " holds no KV blocks");
  RequestTables& r = it->second;
  for (int s = n_segments() - 1; s >= 0; --s) ShrinkSegment(r, s, 0);
  [[maybe_unused]] const Status st = slots_.Free(r.state_slot);
  assert(st.ok());
  requests_.erase(it);
  return OkStatus();
}

int KvBlockManager::segment_tokens(RequestId id, int segment) const {
  auto it = requests_.find(id);
  if (it == requests_.end() || segment < 0 || segment >= n_segments()) return 0;
  return it->second.segments[segment].tokens;
}

std::span<const int> KvBlockManager::FullTable(RequestId id, int segment) const {
  auto it = requests_.find(id);
  if (it == requests_.end() || segment < 0 || segment >= n_segments()) return {};
  return it->second.segments[segment].full;
}

std::span<const int> KvBlockManager::SlidingTable(RequestId id, int segment) const {
  auto it = requests_.find(id);
  if (it == requests_.end() || segment < 0 || segment >= n_segments()) return {};
  return it->second.segments[segment].sliding;
}

int KvBlockManager::StateSlot(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? -1 : it->second.state_slot;
}

int KvBlockManager::BlocksHeld(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.blocks;
}

int KvBlockManager::DenseBlocksHeld(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return 0;
  const RequestTables& r = it->second;
  const int pages = Pages(r.segments[0].tokens);
  int blocks = 0;
  for (int s = 0; s < n_segments(); ++s) {
    const KvSegmentSpec& spec = spec_.segments[s];
    blocks += pages * spec.full_layers +
              std::max(0, pages - r.segments[s].dense_first_live) * spec.sliding_layers;
  }
  return blocks;
}

KvUsage KvBlockManager::Usage() const {
  KvUsage u;
  u.num_blocks = num_blocks();
  u.used_blocks = pool_.used_count();
  for (const auto& [id, r] : requests_) u.dense_blocks += DenseBlocksHeld(id);
  u.block_bytes = block_bytes();
  u.used_bytes = int64_t{u.used_blocks} * u.block_bytes;
  u.dense_bytes = int64_t{u.dense_blocks} * u.block_bytes;
  u.saved_bytes = u.dense_bytes - u.used_bytes;
  u.state_slots = slots_.num_blocks();
  u.used_state_slots = slots_.used_count();
  u.state_bytes = int64_t{u.used_state_slots} * spec_.linear_layers * spec_.linear_state_bytes;
  return u;
}

Status KvBlockManager::CheckInvariants() const {
  std::vector<uint8_t> seen_block(num_blocks(), 0), seen_slot(slots_.num_blocks(), 0);
  int total = 0;
  for (const auto& [id, r] : requests_) {
    const std::string who = "request " + Str(id);
    if (!slots_.is_used(r.state_slot) || seen_slot[r.state_slot]) {
      return Internal(who + " holds state slot " + Str(r.state_slot) + " not uniquely in use");
    }
    seen_slot[r.state_slot] = 1;
    int held = 0;
    for (int s = 0; s < n_segments(); ++s) {
      const KvSegmentSpec& spec = spec_.segments[s];
      const SegmentTables& seg = r.segments[s];
      const size_t pages = Pages(seg.tokens);
      if (seg.full.size() != pages * spec.full_layers ||
          seg.sliding.size() != pages * spec.sliding_layers) {
        return Internal(who + " segment " + Str(s) + ": table sizes do not match " +
                        Str(seg.tokens) + " tokens");
      }
      for (size_t i = 0; i < seg.full.size() + seg.sliding.size(); ++i) {
        const bool full = i < seg.full.size();
        const size_t j = full ? i : i - seg.full.size();
        const int b = full ? seg.full[j] : seg.sliding[j];
        const bool released =
            !full && static_cast<int>(j / spec.sliding_layers) < seg.sliding_first_live;
        if (released) {
          if (b != BlockPool::kNoBlock) {
            return Internal(who + " segment " + Str(s) + " keeps block " + Str(b) +
                            " of a released sliding page");
          }
          continue;
        }
        if (!pool_.is_used(b) || seen_block[b]) {
          return Internal(who + " segment " + Str(s) + " names block " + Str(b) +
                          ", which is free or held twice");
        }
        seen_block[b] = 1;
        ++held;
      }
    }
    if (held != r.blocks) {
      return Internal(who + " counts " + Str(r.blocks) + " blocks but its tables hold " +
                      Str(held));
    }
    total += held;
  }
  if (total != pool_.used_count()) {
    return Internal("tables hold " + Str(total) + " blocks but the pool has " +
                    Str(pool_.used_count()) + " in use (leak)");
  }
  if (slots_.used_count() != num_requests()) {
    return Internal(Str(slots_.used_count()) + " state slots in use for " + Str(num_requests()) +
                    " requests");
  }
  return OkStatus();
}

}  // namespace uniprefill
