// KvArena and PagedSequenceCache.
// - Unit (a synthetic 5-layer layout, two segments, block_tokens 4): rows land in the block and row
//   the page-major tables name, Layer() returns one chunk per block plus the staged chunk, released
//   sliding pages are skipped, and protocol errors are clean Status errors that change nothing.
// - Model (tiny 12-layer Gemma 3: full attention at 5 and 11, window 8 elsewhere): a request whose
//   paged cache is driven as the scheduler drives the block manager gives the same logits, bit for
//   bit, as the same request on a ContiguousSequenceCache: dense, with UniPrefill drops, packed
//   with another request through a real Scheduler, and with sliding pages released.
#include "kv/paged_sequence_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_arena.h"
#include "kv/kv_rows.h"
#include "kv/kv_block_manager.h"
#include "model/model.h"
#include "testing/tiny_gemma3.h"
#include "testing/compare.h"

namespace uniprefill {
namespace {

constexpr int X = BlockPool::kNoBlock;  // a released sliding page in expected tables
constexpr int kDim = 4;                 // kv_dim of the synthetic layout

std::vector<int> Vec(std::span<const int> s) { return {s.begin(), s.end()}; }

// Layers 0 full, 1 sliding, 2 full (the drop layer), 3 full, 4 sliding; kv_dim 4. Segment 0 =
// layers 0..2 (full 0, 2 and sliding 1), segment 1 = layers 3..4.
CacheLayout TestLayout(int window = 3, std::vector<int> drops = {2}) {
  std::vector<CacheLayerSpec> layers(5);
  for (CacheLayerSpec& l : layers) l.kv_dim = kDim;
  for (int i : {1, 4}) {
    layers[i].kind = CacheLayerKind::kSlidingAttention;
    layers[i].window = window;
  }
  return CacheLayout::WithDropLayers(std::move(layers), drops);
}

KvBlockManager ManagerFor(const CacheLayout& layout, int num_blocks, int block_tokens,
                          int slots = 4) {
  Result<KvCacheSpec> spec = KvCacheSpec::FromLayout(layout, KvElementBytes(layout.kv_dtype));
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return KvBlockManager(*spec, KvPoolSize{num_blocks, block_tokens, slots});
}

// What the unit tests write for (layer, alive index, column): exact in f32. V is its negation.
float Val(int layer, int index, int col) { return layer * 10000.0f + index * 10.0f + col; }

// Appends alive indices first, first + 1, ... with positions `pos` to `layer` and fills them.
Status Append(SequenceCache& c, int layer, int first, const std::vector<int32_t>& pos) {
  const int n = static_cast<int>(pos.size());
  std::vector<int32_t> index(n);
  std::iota(index.begin(), index.end(), first);
  UP_ASSIGN_OR_RETURN(KvAppendSlot slot, c.AppendKv(layer, n, pos.data(), index.data()));
  for (int i = 0; i < n; ++i) {
    for (int col = 0; col < kDim; ++col) {
      slot.k.as<float>()[i * kDim + col] = Val(layer, first + i, col);
      slot.v.as<float>()[i * kDim + col] = -Val(layer, first + i, col);
    }
  }
  return OkStatus();
}

std::vector<int32_t> Range(int begin, int end) {
  std::vector<int32_t> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// Every entry of a layer view, in order: alive indices, positions, and K/V checked against Val.
struct Flat {
  std::vector<int32_t> index, pos;
  std::vector<int> counts;  // per chunk
};
Flat Flatten(const KvLayerView& view, int layer) {
  Flat f;
  for (const KvChunk& c : view.chunks) {
    f.counts.push_back(c.count);
    for (int i = 0; i < c.count; ++i) {
      f.index.push_back(c.index[i]);
      f.pos.push_back(c.pos[i]);
      for (int col = 0; col < kDim; ++col) {
        EXPECT_EQ(static_cast<const float*>(c.k)[i * kDim + col], Val(layer, c.index[i], col))
            << "layer " << layer << " index " << c.index[i];
        EXPECT_EQ(static_cast<const float*>(c.v)[i * kDim + col], -Val(layer, c.index[i], col))
            << "layer " << layer << " index " << c.index[i];
      }
    }
  }
  return f;
}

// --- KvArena ------------------------------------------------------------------------------------

TEST(KvArenaTest, BlocksAreSizedAsTheManagerBudgetsThem) {
  const CacheLayout layout = TestLayout();
  Result<KvCacheSpec> spec = KvCacheSpec::FromLayout(layout, 4);
  ASSERT_TRUE(spec.ok());
  Result<KvPoolSize> size = KvBlockManager::SizePool(*spec, {int64_t{1} << 20, 16, 4});
  ASSERT_TRUE(size.ok()) << size.status().message();
  KvBlockManager manager(*spec, *size);
  KvArena arena(layout, *size);
  EXPECT_EQ(arena.num_blocks(), size->num_blocks);
  EXPECT_EQ(arena.block_bytes(), manager.block_bytes());
  EXPECT_EQ(arena.block_bytes(), 16 * 2 * kDim * 4);
  EXPECT_LE(int64_t{arena.num_blocks()} * arena.block_bytes(), int64_t{1} << 20);
  // K + V within the budget; positions and indices add 8 bytes per token slot.
  EXPECT_EQ(arena.bytes(), static_cast<size_t>(arena.num_blocks()) *
                               (arena.block_bytes() + 8 * arena.block_tokens()));
}

TEST(KvArenaTest, BlockRowsLiveAtTheirOffsets) {
  KvArena arena(TestLayout(), /*num_blocks=*/3, /*block_tokens=*/4, /*state_slots=*/1);
  float* base = static_cast<float*>(arena.k(0, 0));
  for (int b = 0; b < 3; ++b) {
    for (int r = 0; r < 4; ++r) {
      // Block b at byte b * block_bytes: K [4, kDim], then V [4, kDim].
      EXPECT_EQ(static_cast<float*>(arena.k(b, r)),
                base + b * (arena.block_bytes() / 4) + r * kDim);
      EXPECT_EQ(static_cast<float*>(arena.v(b, r)), static_cast<float*>(arena.k(b, r)) + 4 * kDim);
      EXPECT_EQ(arena.index(b, r), arena.pos(b, r) + 4);
      EXPECT_EQ(arena.pos(b, r), arena.pos(0, 0) + b * 8 + r);
      EXPECT_EQ(*static_cast<float*>(arena.k(b, r)), 0.0f);  // zeroed
    }
  }
  // A narrower layer packs its rows at the block's start.
  EXPECT_EQ(static_cast<float*>(arena.k(1, 3, 2)), static_cast<float*>(arena.k(1, 0)) + 6);
  EXPECT_EQ(static_cast<float*>(arena.v(1, 3, 2)), static_cast<float*>(arena.v(1, 0)) + 6);
}

TEST(KvArenaTest, LinearStatesAreLazyPerSlotAndReset) {
  std::vector<CacheLayerSpec> layers(3);
  layers[0].kind = layers[2].kind = CacheLayerKind::kLinearAttention;
  layers[0].linear = layers[2].linear = {/*conv_dim=*/6, /*conv_kernel=*/4, /*n_v_heads=*/2,
                                         /*d_k=*/3, /*d_v=*/5};
  layers[1].kv_dim = 8;
  const CacheLayout layout = CacheLayout::WithDropLayers(layers, {});
  KvArena arena(layout, 2, 4, /*state_slots=*/2);
  const int64_t per_layer = 4 * (3 * 6 + 2 * 3 * 5);
  EXPECT_EQ(arena.linear_layers(), 2);
  EXPECT_EQ(arena.slot_state_bytes(), 2 * per_layer);
  const size_t empty = arena.bytes();
  EXPECT_EQ(arena.Linear(0, 1), nullptr);  // an attention layer
  EXPECT_EQ(arena.Linear(2, 0), nullptr);  // no such slot
  LinearAttentionState* s = arena.Linear(1, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(arena.bytes(), empty + per_layer);
  EXPECT_EQ(s->conv_dim, 6);
  EXPECT_EQ(s->kernel, 4);
  EXPECT_EQ(s->RecurrentView().ShapeString(), "F32 [2, 3, 5]");
  EXPECT_EQ(arena.Linear(1, 2), s);  // the same state every time
  EXPECT_NE(arena.Linear(0, 2), s);
  EXPECT_NE(arena.Linear(1, 0), s);
  s->conv_data()[0] = 3.0f;
  s->recurrent_data()[29] = 4.0f;
  arena.Linear(0, 2)->conv_data()[0] = 5.0f;
  arena.Reset(1);
  EXPECT_EQ(s->conv_data()[0], 0.0f);
  EXPECT_EQ(s->recurrent_data()[29], 0.0f);
  EXPECT_EQ(arena.Linear(0, 2)->conv_data()[0], 5.0f);  // other slots keep theirs
}

// --- PagedSequenceCache: unit -------------------------------------------------------------------

TEST(PagedSequenceCacheTest, RoundTripPlacesRowsInTheTablesBlocks) {
  const CacheLayout layout = TestLayout(/*window=*/3);
  KvBlockManager manager = ManagerFor(layout, 64, /*block_tokens=*/4);
  KvArena arena(layout, 64, 4, 4);
  const RequestId id = 9;
  // A 6-token prefill, reserved dense: segment 0 pages [0, 1] x full layers {0, 2} -> blocks 0..3,
  // sliding page blocks 4, 5; segment 1: full 6, 7, sliding 8, 9.
  ASSERT_TRUE(manager.Allocate(id, {6, 6}).ok());
  auto made = PagedSequenceCache::Create(layout, 64, &manager, id, &arena);
  ASSERT_TRUE(made.ok()) << made.status().message();
  PagedSequenceCache& cache = **made;

  // The forward: segment 0 sees 6 rows; the drop at layer 2 keeps positions {0, 2, 4, 5}.
  const std::vector<int32_t> kept_pos = {0, 2, 4, 5};
  for (int layer : {0, 1, 2}) ASSERT_TRUE(Append(cache, layer, 0, Range(0, 6)).ok());
  for (int layer : {3, 4}) ASSERT_TRUE(Append(cache, layer, 0, kept_pos).ok());
  // Before Commit the step's rows are one staged chunk.
  for (int layer = 0; layer < 5; ++layer) {
    EXPECT_EQ(cache.staged(layer), layer < 3 ? 6 : 4);
    const Flat f = Flatten(cache.Layer(layer), layer);
    EXPECT_EQ(f.counts, std::vector<int>({layer < 3 ? 6 : 4}));
  }
  cache.Commit(6, {6, 4});
  EXPECT_EQ(cache.length(), 6);
  EXPECT_EQ(cache.segment_length(0), 6);
  EXPECT_EQ(cache.segment_length(1), 4);
  // Exact placement: (layer, alive index) -> (block, row).
  struct Where {
    int layer, index, block, row;
  };
  for (const Where& w : std::vector<Where>{{0, 0, 0, 0}, {0, 3, 0, 3}, {0, 4, 2, 0}, {0, 5, 2, 1},
                                           {2, 0, 1, 0}, {2, 5, 3, 1}, {1, 2, 4, 2}, {1, 5, 5, 1},
                                           {3, 3, 6, 3}, {4, 0, 8, 0}, {4, 3, 8, 3}}) {
    SCOPED_TRACE("layer " + std::to_string(w.layer) + " index " + std::to_string(w.index));
    EXPECT_EQ(static_cast<float*>(arena.k(w.block, w.row))[1], Val(w.layer, w.index, 1));
    EXPECT_EQ(static_cast<float*>(arena.v(w.block, w.row))[3], -Val(w.layer, w.index, 3));
    EXPECT_EQ(*arena.index(w.block, w.row), w.index);
    EXPECT_EQ(*arena.pos(w.block, w.row), w.layer < 3 ? w.index : kept_pos[w.index]);
  }
  // The scheduler's OnStepDone: segment 1 shrinks to its 4 kept tokens (blocks 7 and 9 freed),
  // then segment 0's sliding page 0 leaves the window (6 tokens, W = 3: indices >= 4 stay).
  ASSERT_TRUE(manager.CommitPrefill(id, {6, 4}).ok());
  EXPECT_EQ(Vec(manager.SlidingTable(id, 0)), std::vector<int>({X, 5}));
  EXPECT_EQ(Vec(manager.FullTable(id, 1)), std::vector<int>({6}));
  EXPECT_EQ(manager.BlocksHeld(id), 7);
  EXPECT_EQ(cache.bytes(), static_cast<size_t>(7 * manager.block_bytes()));

  Flat f = Flatten(cache.Layer(0), 0);
  EXPECT_EQ(f.counts, std::vector<int>({4, 2}));
  EXPECT_EQ(f.index, Range(0, 6));
  EXPECT_EQ(cache.Layer(0).chunks[1].k, arena.k(2, 0));  // chunks point into the blocks
  f = Flatten(cache.Layer(1), 1);
  EXPECT_EQ(f.counts, std::vector<int>({2}));  // page 0 was released: skipped
  EXPECT_EQ(f.index, Range(4, 6));
  f = Flatten(cache.Layer(3), 3);
  EXPECT_EQ(f.counts, std::vector<int>({4}));
  EXPECT_EQ(f.pos, kept_pos);

  // Decodes, as the scheduler runs them: AppendDecode, forward (a staged chunk until Commit),
  // ReleaseWindow.
  for (int step = 0; step < 7; ++step) {
    SCOPED_TRACE("decode " + std::to_string(step));
    ASSERT_TRUE(manager.AppendDecode(id).ok());
    const int pos = 6 + step;
    for (int layer = 0; layer < 5; ++layer) {
      const int held = cache.segment_length(layer < 3 ? 0 : 1);
      ASSERT_TRUE(Append(cache, layer, held, {pos}).ok());
      const KvLayerView view = cache.Layer(layer);
      ASSERT_FALSE(view.chunks.empty());
      EXPECT_EQ(view.chunks.back().count, 1);
      EXPECT_EQ(view.chunks.back().index[0], held);
    }
    cache.Commit(1, {1, 1});
    ASSERT_TRUE(manager.ReleaseWindow(id).ok());
    ASSERT_TRUE(manager.CheckInvariants().ok());
    for (int layer = 0; layer < 5; ++layer) {
      const int seg = layer < 3 ? 0 : 1;
      const int held = cache.segment_length(seg);
      const bool sliding = layer == 1 || layer == 4;
      // Sliding layers: the pages at or after the one holding T - (W - 1).
      const int first = sliding ? (held - 2) / 4 * 4 : 0;
      const Flat got = Flatten(cache.Layer(layer), layer);
      EXPECT_EQ(got.index, Range(first, held)) << "layer " << layer;
      EXPECT_EQ(static_cast<int>(got.counts.size()), (held - 1) / 4 - first / 4 + 1);
      EXPECT_EQ(got.pos.back(), pos);
    }
  }
  EXPECT_EQ(cache.length(), 13);
  EXPECT_EQ(cache.segment_length(0), 13);
  EXPECT_EQ(cache.segment_length(1), 11);
  // 13 tokens, W = 3: pages 0 and 1 left the window; Layer(1) showed only pages 2 and 3.
  const std::vector<int> sliding = Vec(manager.SlidingTable(id, 0));
  ASSERT_EQ(sliding.size(), 4u);
  EXPECT_EQ(sliding[0], X);
  EXPECT_EQ(sliding[1], X);
  EXPECT_NE(sliding[2], X);
  EXPECT_NE(sliding[3], X);
  EXPECT_EQ(cache.bytes(), static_cast<size_t>(manager.BlocksHeld(id) * manager.block_bytes()));
}

TEST(PagedSequenceCacheTest, StagedRowsOfSeveralAppendsStayInOrder) {
  const CacheLayout layout = TestLayout(/*window=*/8, /*drops=*/{});
  KvBlockManager manager = ManagerFor(layout, 64, 4);
  KvArena arena(layout, 64, 4, 4);
  ASSERT_TRUE(manager.Allocate(1, {7}).ok());
  auto cache = PagedSequenceCache::Create(layout, 64, &manager, 1, &arena);
  ASSERT_TRUE(cache.ok());
  for (int layer = 0; layer < 5; ++layer) {
    ASSERT_TRUE(Append(**cache, layer, 0, Range(0, 3)).ok());
    ASSERT_TRUE(Append(**cache, layer, 3, Range(3, 7)).ok());
    EXPECT_EQ(Flatten((*cache)->Layer(layer), layer).index, Range(0, 7));
  }
  (*cache)->Commit(7, {7});
  for (int layer = 0; layer < 5; ++layer) {
    const Flat f = Flatten((*cache)->Layer(layer), layer);
    EXPECT_EQ(f.index, Range(0, 7));
    EXPECT_EQ(f.counts, std::vector<int>({4, 3}));
  }
}

TEST(PagedSequenceCacheTest, ProtocolErrorsAreCleanStatuses) {
  const CacheLayout layout = TestLayout();
  KvBlockManager manager = ManagerFor(layout, 64, 4);
  KvArena arena(layout, 64, 4, 4);
  ASSERT_TRUE(manager.Allocate(3, {5, 5}).ok());
  auto made = PagedSequenceCache::Create(layout, /*max_tokens=*/16, &manager, 3, &arena);
  ASSERT_TRUE(made.ok());
  PagedSequenceCache& cache = **made;
  struct Case {
    const char* name;
    int layer, first, n;
    ErrorCode code;
    const char* mentions;
  };
  for (const Case& c : std::vector<Case>{
           {"index gap", 0, 1, 2, ErrorCode::kInternal, "alive index 0, got 1"},
           {"no room reserved", 2, 0, 6, ErrorCode::kInternal, "reserved 5"},
           {"context full", 3, 0, 17, ErrorCode::kOutOfRange, "context length 16"},
           {"layer out of range", 5, 0, 1, ErrorCode::kInvalidArgument, "outside"}}) {
    SCOPED_TRACE(c.name);
    Status st = Append(cache, c.layer, c.first, Range(c.first, c.first + c.n));
    EXPECT_EQ(st.code(), c.code) << st.message();
    EXPECT_NE(st.message().find(c.mentions), std::string::npos) << st.message();
    for (int layer = 0; layer < 5; ++layer) EXPECT_EQ(cache.staged(layer), 0);  // nothing changed
  }
  // After a good append, the next one must continue it.
  ASSERT_TRUE(Append(cache, 0, 0, Range(0, 2)).ok());
  Status st = Append(cache, 0, 0, Range(0, 1));
  EXPECT_EQ(st.code(), ErrorCode::kInternal);
  EXPECT_NE(st.message().find("holds 2 entries"), std::string::npos) << st.message();
  EXPECT_EQ(cache.staged(0), 2);
  EXPECT_TRUE(Append(cache, 0, 2, Range(2, 5)).ok());
  EXPECT_EQ(Append(cache, 0, 5, Range(5, 6)).code(), ErrorCode::kInternal);  // past the 5 reserved
}

TEST(PagedSequenceCacheTest, TablesChangedMidStepAreReportedAtTheNextAppend) {
  const CacheLayout layout = TestLayout();
  KvBlockManager manager = ManagerFor(layout, 64, 4);
  KvArena arena(layout, 64, 4, 4);
  ASSERT_TRUE(manager.Allocate(2, {3, 3}).ok());
  auto made = PagedSequenceCache::Create(layout, 64, &manager, 2, &arena);
  ASSERT_TRUE(made.ok());
  for (int layer = 0; layer < 5; ++layer) ASSERT_TRUE(Append(**made, layer, 0, Range(0, 3)).ok());
  ASSERT_TRUE(manager.Free(2).ok());  // a protocol error: the blocks went away before Commit
  (*made)->Commit(3, {3, 3});         // Commit cannot fail...
  Status st = Append(**made, 0, 3, {3});  // ...so the next append reports the lost rows
  EXPECT_EQ(st.code(), ErrorCode::kInternal);
  EXPECT_NE(st.message().find("changed during the step"), std::string::npos) << st.message();
}

TEST(PagedSequenceCacheTest, CreateRejectsMismatchedPools) {
  const CacheLayout layout = TestLayout();
  KvBlockManager manager = ManagerFor(layout, 64, 4);
  KvArena arena(layout, 64, 4, 4);
  ASSERT_TRUE(manager.Allocate(0, {4, 4}).ok());
  KvArena other_blocks(layout, 64, 8, 4);
  KvArena fewer_blocks(layout, 32, 4, 4);
  struct Case {
    const char* name;
    CacheLayout layout;
    RequestId id;
    KvArena* arena;
    const char* mentions;
  };
  for (const Case& c : std::vector<Case>{
           {"other drop layers", TestLayout(3, {}), 0, &arena, "segments"},
           {"other window", TestLayout(5), 0, &arena, "window 5"},
           {"unallocated request", layout, 1, &arena, "request 1 holds no KV blocks"},
           {"other block size", layout, 0, &other_blocks, "does not back"},
           {"smaller arena", layout, 0, &fewer_blocks, "does not back"},
           {"no arena", layout, 0, nullptr, "no block manager or KV arena"}}) {
    SCOPED_TRACE(c.name);
    auto made = PagedSequenceCache::Create(c.layout, 64, &manager, c.id, c.arena);
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(made.status().message().find(c.mentions), std::string::npos)
        << made.status().message();
  }
}

TEST(PagedSequenceCacheTest, LinearStateIsTheSlotsAndStartsZero) {
  std::vector<CacheLayerSpec> layers(2);
  layers[0].kind = CacheLayerKind::kLinearAttention;
  layers[0].linear = {6, 4, 2, 3, 5};
  layers[1].kv_dim = kDim;
  const CacheLayout layout = CacheLayout::WithDropLayers(layers, {});
  KvBlockManager manager = ManagerFor(layout, 8, 4, /*slots=*/2);
  KvArena arena(layout, 8, 4, 2);
  ASSERT_TRUE(manager.Allocate(5, {4}).ok());
  ASSERT_TRUE(manager.Allocate(6, {4}).ok());
  const int slot = manager.StateSlot(6);
  arena.Linear(slot, 0)->conv_data()[2] = 7.0f;  // left over from an earlier request
  auto cache = PagedSequenceCache::Create(layout, 64, &manager, 6, &arena);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  EXPECT_EQ((*cache)->Linear(0), arena.Linear(slot, 0));
  EXPECT_EQ((*cache)->Linear(0)->conv_data()[2], 0.0f);
  EXPECT_EQ((*cache)->Linear(1), nullptr);
  EXPECT_TRUE((*cache)->Layer(0).chunks.empty());
  EXPECT_EQ((*cache)->AppendKv(0, 1, nullptr, nullptr).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ((*cache)->bytes(),
            static_cast<size_t>(manager.block_bytes() + arena.slot_state_bytes()));
}

// --- PagedSequenceCache: the model --------------------------------------------------------------

std::string TinyPath(int window) {
  testing::TinyGemma3Options o;
  o.layers = 12;
  o.window = window;
  return testing::WriteTempFile("tiny_gemma3_12l_w" + std::to_string(window) + ".gguf",
                                testing::BuildTinyGemma3(o));
}

std::unique_ptr<Model> LoadTiny(DeviceContext& ctx, int window = 8) {
  LoadOptions lo;
  lo.f32_decode = true;
  auto m = LoadModel(TinyPath(window), ctx, lo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int32_t> RandomTokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(4, 261);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  ids[0] = 2;
  return ids;
}

UniPrefillConfig Dense() {
  UniPrefillConfig c;
  c.enabled = false;
  return c;
}

// Drops at 5 and 11 that do drop ~100-token prompts (11 is the last layer: two segments).
UniPrefillConfig Dropping(WindowMode mode = WindowMode::kAliveIndex) {
  UniPrefillConfig c;
  c.drop_layers = {5, 11};
  c.selection.mode = sparsity::SelectionMode::kFixedRatio;
  c.selection.keep_ratio = 0.5f;
  c.selection.block_size = 8;
  c.selection.sink = 8;
  c.selection.last_n = 16;
  c.window_mode = mode;
  return c;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

void ExpectSameLogits(const std::vector<float>& want, const std::vector<float>& got,
                      const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(want, got) << what << ": max |diff| " << testing::MaxAbsDiff(want, got);
}

std::vector<int> SegmentLengths(const SequenceCache& c) {
  std::vector<int> v;
  for (int s = 0; s < c.layout().n_segments; ++s) v.push_back(c.segment_length(s));
  return v;
}

// A pool for one model: layout, block manager and the arena behind it.
struct PagedPool {
  PagedPool(const Model& m, const std::vector<int>& drops, int num_blocks, int block_tokens,
            int slots = 4)
      : layout(m.CacheLayoutFor(drops)),
        manager(ManagerFor(layout, num_blocks, block_tokens, slots)),
        arena(layout, num_blocks, block_tokens, slots) {}
  CacheLayout layout;
  KvBlockManager manager;
  KvArena arena;
};

std::vector<float> RunOne(Model& m, DeviceContext& ctx, SequenceCache& cache,
                       const std::vector<int32_t>& tokens, const UniPrefillConfig& c,
                       std::vector<KeptTokens>* kept = nullptr) {
  std::vector<float> logits(m.config().vocab_size);
  SequenceStep s{&cache, tokens, logits.data(), kept};
  Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), c);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

// One request on a contiguous cache and on a paged one whose blocks are managed as the scheduler
// manages them: a dense reservation for the prefill, CommitPrefill(kept counts) after it, then per
// decode AppendDecode before and ReleaseWindow after the forward. Logits must be bit-identical.
void ExpectPagedMatchesContiguous(Model& m, DeviceContext& ctx, const UniPrefillConfig& c,
                                  const std::vector<int32_t>& prompt, int decodes,
                                  int block_tokens, bool expect_drop) {
  const std::vector<int> drops = c.active_drop_layers();
  const int n = static_cast<int>(prompt.size());
  const int max_tokens = n + decodes;
  const int window = m.config().sliding_window;
  auto ref = m.NewCache(max_tokens, drops);
  PagedPool pool(m, drops, 1024, block_tokens);
  const RequestId id = 42;
  const int n_segments = pool.layout.n_segments;
  ASSERT_TRUE(pool.manager.Allocate(id, std::vector<int>(n_segments, n)).ok());
  auto made = PagedSequenceCache::Create(pool.layout, max_tokens, &pool.manager, id, &pool.arena);
  ASSERT_TRUE(made.ok()) << made.status().message();
  PagedSequenceCache& paged = **made;

  std::vector<KeptTokens> kept_ref, kept_paged;
  std::vector<float> want = RunOne(m, ctx, *ref, prompt, c, &kept_ref);
  std::vector<float> got = RunOne(m, ctx, paged, prompt, c, &kept_paged);
  ExpectSameLogits(want, got, "prefill");
  ASSERT_EQ(kept_ref.size(), kept_paged.size());
  for (size_t k = 0; k < kept_ref.size(); ++k) EXPECT_EQ(kept_ref[k].kept, kept_paged[k].kept);
  ASSERT_EQ(SegmentLengths(paged), SegmentLengths(*ref));
  if (expect_drop) {
    EXPECT_LT(paged.segment_length(n_segments - 1), n);
  }
  ASSERT_TRUE(pool.manager.CommitPrefill(id, SegmentLengths(paged)).ok());
  ASSERT_TRUE(pool.manager.CheckInvariants().ok());

  for (int step = 0; step < decodes; ++step) {
    const std::vector<int32_t> next = {Argmax(want)};
    ASSERT_TRUE(pool.manager.AppendDecode(id).ok());
    want = RunOne(m, ctx, *ref, next, c);
    got = RunOne(m, ctx, paged, next, c);
    ExpectSameLogits(want, got, "decode " + std::to_string(step));
    ASSERT_TRUE(pool.manager.ReleaseWindow(id).ok());
  }
  ASSERT_TRUE(pool.manager.CheckInvariants().ok());
  EXPECT_EQ(SegmentLengths(paged), SegmentLengths(*ref));
  bool released = false;
  for (size_t i = 0; i < pool.layout.layers.size(); ++i) {
    const CacheLayerSpec& spec = pool.layout.layers[i];
    const int held = paged.segment_length(pool.layout.segment_of_layer[i]);
    const KvLayerView view = paged.Layer(static_cast<int>(i));
    if (spec.kind == CacheLayerKind::kFullAttention) {
      EXPECT_EQ(view.count(), ref->Layer(static_cast<int>(i)).count()) << "layer " << i;
      EXPECT_EQ(static_cast<int>(view.chunks.size()), (held + block_tokens - 1) / block_tokens);
    } else {
      // The window's W - 1 entries, plus at most a page of older ones.
      EXPECT_GE(view.count(), std::min(held, window - 1)) << "layer " << i;
      EXPECT_LE(view.count(), window + block_tokens - 2) << "layer " << i;
      released = released || view.chunks.front().index[0] > 0;
    }
  }
  if (max_tokens >= window + 2 * block_tokens) {
    EXPECT_TRUE(released);
  }
  EXPECT_EQ(paged.bytes(),
            static_cast<size_t>(pool.manager.BlocksHeld(id) * pool.manager.block_bytes()));
  if (expect_drop) {
    // The later segment's full-attention pages shrank with its tokens. (Its sliding pages need
    // not: a window straddling a page boundary holds two pages, so on a context this short the
    // total may exceed the dense count; see KvUsage::saved_bytes.)
    const int last = n_segments - 1;
    const int dense_pages = (paged.segment_length(0) + block_tokens - 1) / block_tokens;
    EXPECT_LT(pool.manager.FullTable(id, last).size(),
              static_cast<size_t>(dense_pages * pool.manager.spec().segments[last].full_layers));
  }
  ASSERT_TRUE(pool.manager.Free(id).ok());
  EXPECT_EQ(pool.manager.free_blocks(), pool.manager.num_blocks());
}

// f32 and f16 keys and values (Model::set_kv_dtype: both caches take the model's layout): the
// arena's f16 blocks, the staging and the scatter keep the same rounded values as the contiguous
// f16 buffers, so the logits stay equal bit for bit.
TEST(PagedSequenceCacheModelTest, DenseMatchesContiguousBitForBit) {
  auto ctx = DeviceContext::Cpu(2);
  auto m = LoadTiny(*ctx);
  ASSERT_NE(m, nullptr);
  for (DType kv : {DType::kF32, DType::kF16}) {
    m->set_kv_dtype(kv);
    for (int block_tokens : {4, 16}) {
      SCOPED_TRACE(std::string(DTypeName(kv)) + " KV, block_tokens " +
                   std::to_string(block_tokens));
      ExpectPagedMatchesContiguous(*m, *ctx, Dense(), RandomTokens(37, 1), 12, block_tokens,
                                   false);
    }
  }
}

TEST(PagedSequenceCacheModelTest, UniPrefillDropsMatchContiguousBitForBit) {
  auto ctx = DeviceContext::Cpu(2);
  auto m = LoadTiny(*ctx);
  ASSERT_NE(m, nullptr);
  for (DType kv : {DType::kF32, DType::kF16}) {
    m->set_kv_dtype(kv);
    for (WindowMode mode : {WindowMode::kAliveIndex, WindowMode::kPosition}) {
      for (int block_tokens : {4, 16}) {
        SCOPED_TRACE(std::string(DTypeName(kv)) + " KV, block_tokens " +
                     std::to_string(block_tokens) +
                     (mode == WindowMode::kPosition ? ", position windows" : ""));
        ExpectPagedMatchesContiguous(*m, *ctx, Dropping(mode), RandomTokens(100, 2), 10,
                                     block_tokens, true);
      }
    }
  }
}

TEST(PagedSequenceCacheModelTest, SlidingWindowPagesAreReleasedAndSkipped) {
  auto ctx = DeviceContext::Cpu(2);
  for (int window : {8, 5}) {
    auto m = LoadTiny(*ctx, window);
    ASSERT_NE(m, nullptr);
    for (int block_tokens : {4, 16}) {
      for (int prompt : {13, 40}) {
        SCOPED_TRACE("window " + std::to_string(window) + ", block_tokens " +
                     std::to_string(block_tokens) + ", prompt " + std::to_string(prompt));
        ExpectPagedMatchesContiguous(*m, *ctx, Dense(), RandomTokens(prompt, 3), 20, block_tokens,
                                     false);
      }
    }
  }
}

// Two requests through a real Scheduler: A's prefill, then A's decode packed with B's prefill in
// one forward, then both decoding. Each step equals the same packed steps on contiguous caches bit
// for bit, and each request's run alone up to the packing's rounding.
TEST(PagedSequenceCacheModelTest, PackedPrefillAndDecodeThroughTheScheduler) {
  auto ctx = DeviceContext::Cpu(2);
  auto m = LoadTiny(*ctx);
  ASSERT_NE(m, nullptr);
  const UniPrefillConfig c = Dropping();
  const std::vector<int> drops = c.active_drop_layers();
  const CacheLayout layout = m->CacheLayoutFor(drops);
  const int block_tokens = 4, num_blocks = 1024;
  SchedulerConfig config;
  config.max_batched_tokens = 4096;
  Scheduler sched(config, ManagerFor(layout, num_blocks, block_tokens));
  KvArena arena(layout, num_blocks, block_tokens, 4);

  struct Req {
    std::vector<int32_t> prompt;
    int max_tokens = 0;
    std::unique_ptr<PagedSequenceCache> paged;
    std::unique_ptr<SequenceCache> ref;  // contiguous, run in the same packed steps
    std::vector<std::vector<int32_t>> fed;  // tokens of each of its steps
    std::vector<std::vector<float>> logits;  // paged logits of each step
    int32_t next = -1;
  };
  std::map<RequestId, Req> reqs;
  auto submit = [&](int prompt, int max_tokens, uint32_t seed) {
    Result<RequestId> id = sched.Submit({prompt, max_tokens, true});
    ASSERT_TRUE(id.ok()) << id.status().message();
    reqs[*id].prompt = RandomTokens(prompt, seed);
    reqs[*id].max_tokens = max_tokens;
  };
  submit(90, 6, 11);
  bool packed_mixed = false;
  for (int step = 0; sched.has_unfinished(); ++step) {
    ASSERT_LT(step, 20);
    if (step == 1) submit(120, 4, 12);  // admitted next to A's first decode
    Result<StepPlan> plan = sched.Schedule();
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    ASSERT_TRUE(plan->preempted.empty());
    std::vector<SequenceStep> paged_steps, ref_steps;
    std::vector<std::vector<float>> ref_logits(plan->requests.size());
    bool prefill = false, decode = false;
    for (const ScheduledRequest& s : plan->requests) {
      Req& r = reqs.at(s.id);
      if (s.is_prefill) {
        prefill = true;
        const int max = static_cast<int>(r.prompt.size()) + r.max_tokens;
        auto made = PagedSequenceCache::Create(layout, max, &sched.kv(), s.id, &arena);
        ASSERT_TRUE(made.ok()) << made.status().message();
        r.paged = std::move(*made);
        r.ref = m->NewCache(max, drops);
        r.fed.push_back(r.prompt);
      } else {
        decode = true;
        r.fed.push_back({r.next});
      }
      r.logits.emplace_back(m->config().vocab_size);
    }
    for (size_t i = 0; i < plan->requests.size(); ++i) {
      Req& r = reqs.at(plan->requests[i].id);
      ref_logits[i].resize(m->config().vocab_size);
      paged_steps.push_back({r.paged.get(), r.fed.back(), r.logits.back().data(), nullptr});
      ref_steps.push_back({r.ref.get(), r.fed.back(), ref_logits[i].data(), nullptr});
    }
    packed_mixed = packed_mixed || (prefill && decode);
    Status st = m->ForwardBatch(*ctx, paged_steps, c);
    ASSERT_TRUE(st.ok()) << st.message();
    st = m->ForwardBatch(*ctx, ref_steps, c);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<RequestStepResult> results;
    for (size_t i = 0; i < plan->requests.size(); ++i) {
      const ScheduledRequest& s = plan->requests[i];
      Req& r = reqs.at(s.id);
      ExpectSameLogits(ref_logits[i], r.logits.back(),
                       "step " + std::to_string(step) + " request " + std::to_string(s.id));
      EXPECT_EQ(SegmentLengths(*r.paged), SegmentLengths(*r.ref));
      r.next = Argmax(r.logits.back());
      RequestStepResult res;
      res.id = s.id;
      if (s.is_prefill) {
        res.segment_tokens = SegmentLengths(*r.paged);
        EXPECT_LT(res.segment_tokens.back(), s.num_tokens);  // UniPrefill dropped tokens
      }
      results.push_back(res);
    }
    Result<std::vector<FinishedRequest>> finished = sched.OnStepDone(results);
    ASSERT_TRUE(finished.ok()) << finished.status().message();
    ASSERT_TRUE(sched.CheckInvariants().ok());
    for (const FinishedRequest& f : *finished) reqs.at(f.id).paged.reset();  // blocks are freed
  }
  EXPECT_TRUE(packed_mixed);
  EXPECT_EQ(sched.kv().free_blocks(), num_blocks);

  // Each request alone on a contiguous cache, step by step: the same up to rounding (the packed
  // forward's matmuls see other rows) and the same greedy tokens.
  for (auto& [id, r] : reqs) {
    SCOPED_TRACE("request " + std::to_string(id));
    auto alone = m->NewCache(static_cast<int>(r.prompt.size()) + r.max_tokens, drops);
    ASSERT_EQ(r.fed.size(), static_cast<size_t>(r.max_tokens));
    for (size_t step = 0; step < r.fed.size(); ++step) {
      const std::vector<float> want = RunOne(*m, *ctx, *alone, r.fed[step], c);
      EXPECT_TRUE(testing::AllCloseToScale(want, r.logits[step], 1e-4)) << "step " << step;
      EXPECT_EQ(Argmax(want), Argmax(r.logits[step])) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace uniprefill
