// ContiguousSequenceCache::TrimWindow: after a forward's attention a sliding layer whose buffer
// outgrew W - 1 + kWindowHeadroom rows (a prefill) keeps exactly its W - 1 newest entries (keys,
// values, positions, alive indices) in a buffer of that size, so a long prompt's prefill does not
// hold every sliding layer's keys until the first decode step; window-sized buffers (decode) and
// full-attention layers are left alone, and appends continue after a trim.
// Model-level equality (the same logits as a cache that trims only when it appends) is covered
// bit for bit by PagedSequenceCacheModelTest, whose reference is this cache.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/sequence_cache.h"

namespace uniprefill {
namespace {

constexpr int kDim = 4, kWindow = 8, kMaxTokens = 4096;

// Layer 0 full attention, layer 1 sliding (window 8); kv_dim 4; one segment.
ContiguousSequenceCache MakeCache() {
  CacheLayerSpec full, sliding;
  full.kind = CacheLayerKind::kFullAttention;
  full.kv_dim = kDim;
  sliding.kind = CacheLayerKind::kSlidingAttention;
  sliding.kv_dim = kDim;
  sliding.window = kWindow;
  return ContiguousSequenceCache(CacheLayout::WithDropLayers({full, sliding}, {}), kMaxTokens);
}

// Appends entries first..first+n-1 to `layer`: positions and indices equal the entry number,
// and every key / value element of entry e is e / -e.
void Append(ContiguousSequenceCache& cache, int layer, int first, int n) {
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), first);
  auto slot = cache.AppendKv(layer, n, ids.data(), ids.data());
  ASSERT_TRUE(slot.ok()) << slot.status().message();
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < kDim; ++d) {
      slot->k.as<float>()[i * kDim + d] = static_cast<float>(first + i);
      slot->v.as<float>()[i * kDim + d] = -static_cast<float>(first + i);
    }
  }
}

// The entries `layer` holds, as their numbers read from pos, index, keys and values alike.
std::vector<int> Held(const ContiguousSequenceCache& cache, int layer) {
  std::vector<int> out;
  for (const KvChunk& c : cache.Layer(layer).chunks) {
    for (int i = 0; i < c.count; ++i) {
      EXPECT_EQ(c.index[i], c.pos[i]);
      EXPECT_EQ(static_cast<const float*>(c.k)[i * kDim], static_cast<float>(c.pos[i]));
      EXPECT_EQ(static_cast<const float*>(c.v)[i * kDim + kDim - 1], -static_cast<float>(c.pos[i]));
      out.push_back(c.pos[i]);
    }
  }
  return out;
}

std::vector<int> Range(int first, int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(ContiguousSequenceCacheTest, TrimWindowKeepsTheNewestWMinusOneAndFreesThePromptBuffer) {
  ContiguousSequenceCache cache = MakeCache();
  const int prompt = 3000;
  Append(cache, 0, 0, prompt);
  Append(cache, 1, 0, prompt);
  const size_t before = cache.bytes();
  const size_t row_pair = 2 * kDim * sizeof(float);
  EXPECT_GE(before, 2 * prompt * row_pair);

  cache.TrimWindow(1);
  EXPECT_EQ(Held(cache, 1), Range(prompt - (kWindow - 1), kWindow - 1));
  cache.TrimWindow(0);  // a full layer: untouched
  EXPECT_EQ(Held(cache, 0), Range(0, prompt));
  // Layer 1's prompt-sized buffer is gone: it holds W - 1 + headroom rows at most.
  EXPECT_LE(cache.bytes(), before - (prompt - (kWindow - 1 + 64)) * row_pair);

  // Decode steps append past the headroom: the window-sized buffer is AppendKv's to trim (once
  // per 64 appends), so TrimWindow leaves it, and the newest W entries are always there.
  const size_t trimmed = cache.bytes();
  for (int step = 0; step < 200; ++step) {
    Append(cache, 1, prompt + step, 1);
    cache.TrimWindow(1);
    const std::vector<int> held = Held(cache, 1);
    ASSERT_GE(held.size(), static_cast<size_t>(kWindow));
    ASSERT_LE(held.size(), static_cast<size_t>(kWindow - 1 + 64));
    EXPECT_EQ(std::vector<int>(held.end() - kWindow, held.end()),
              Range(prompt + step + 1 - kWindow, kWindow));
  }
  EXPECT_EQ(cache.bytes(), trimmed);
}

TEST(ContiguousSequenceCacheTest, TrimWindowLeavesWindowSizedBuffersAndShrinksLongChunks) {
  ContiguousSequenceCache cache = MakeCache();
  Append(cache, 1, 0, 5);  // fewer than W - 1
  cache.TrimWindow(1);
  EXPECT_EQ(Held(cache, 1), Range(0, 5));
  Append(cache, 1, 5, 10);  // a short chunk: within W - 1 + headroom, left as it is
  cache.TrimWindow(1);
  EXPECT_EQ(Held(cache, 1), Range(0, 15));
  Append(cache, 1, 15, 200);  // a long chunk: AppendKv kept W - 1 older, the trim keeps W - 1
  EXPECT_EQ(Held(cache, 1), Range(15 - (kWindow - 1), kWindow - 1 + 200));
  cache.TrimWindow(1);
  EXPECT_EQ(Held(cache, 1), Range(215 - (kWindow - 1), kWindow - 1));
}

}  // namespace
}  // namespace uniprefill
