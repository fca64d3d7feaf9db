#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace uniprefill {
namespace {

// Writes value = position into every element of this step's keys and values.
void FillStep(KvCache& cache, int layer, int n, int first_pos) {
  TensorView k = cache.NewKeys(layer, n), v = cache.NewValues(layer, n);
  for (int t = 0; t < n; ++t) {
    for (int d = 0; d < k.dim(1); ++d) {
      k.row<float>(t)[d] = float(first_pos + t);
      v.row<float>(t)[d] = -float(first_pos + t);
    }
  }
}

TEST(KvCacheTest, FullLayerKeepsEveryToken) {
  KvCache cache({{4, 0}}, /*max_tokens=*/100, /*max_chunk=*/8);
  int pos = 0;
  for (int n : {8, 3, 1, 1, 8}) {
    ASSERT_TRUE(cache.BeginAppend(n).ok());
    FillStep(cache, 0, n, pos);
    cache.EndAppend(n);
    pos += n;
  }
  ASSERT_EQ(cache.length(), 21);
  ASSERT_EQ(cache.Count(0), 21);
  for (int i = 0; i < 21; ++i) {
    EXPECT_EQ(cache.Positions(0)[i], i);
    EXPECT_EQ(cache.Keys(0).row<float>(i)[3], float(i));
    EXPECT_EQ(cache.Values(0).row<float>(i)[0], -float(i));
  }
}

TEST(KvCacheTest, SlidingLayerKeepsAtLeastWindowMinusOneAndStaysBounded) {
  const int W = 5, chunk = 4;
  KvCache cache({{2, W}}, 1000, chunk);
  int pos = 0;
  for (int step = 0; step < 50; ++step) {
    const int n = 1 + step % chunk;
    ASSERT_TRUE(cache.BeginAppend(n).ok());
    const int count = cache.Count(0);
    // Before this step's tokens, the last W - 1 positions (or all so far) must be present.
    ASSERT_GE(count, std::min(pos, W - 1));
    const int32_t* p = cache.Positions(0);
    for (int i = 0; i < count + n; ++i) EXPECT_EQ(p[i], pos - count + i);
    FillStep(cache, 0, n, pos);
    for (int i = 0; i < count + n; ++i) EXPECT_EQ(cache.Keys(0).row<float>(i)[1], float(p[i]));
    cache.EndAppend(n);
    pos += n;
    ASSERT_LE(cache.Count(0), W - 1 + chunk);  // memory is O(window + chunk)
  }
}

TEST(KvCacheTest, RefusesToOverflowTheContext) {
  KvCache cache({{2, 0}}, 10, 8);
  ASSERT_TRUE(cache.BeginAppend(8).ok());
  cache.EndAppend(8);
  Status st = cache.BeginAppend(3);
  EXPECT_EQ(st.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(st.message().find("exceed the context length 10"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace uniprefill
