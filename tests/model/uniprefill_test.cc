// UniPrefill on the packed batch forward (tiny 12-layer Gemma 3: full attention at 5 and 11,
// sliding window 8 elsewhere):
// - p = 1 (and no drop layers) reproduces dense bit for bit;
// - the engine equals a naive model that physically removes dropped tokens (prefill and the
//   decodes after it, so decode attends to exactly the kept tokens of each segment);
// - a mixed batch (prefills of 300 to 20,000 tokens and decodes) equals each request alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"
#include "testing/naive_gemma3.h"
#include "testing/tiny_gemma3.h"
#include "testing/compare.h"

namespace uniprefill {
namespace {

using testing::BuildTinyGemma3;
using testing::TinyGemma3Options;
using testing::WriteTempFile;

std::string TinyPath() {
  TinyGemma3Options o;
  o.layers = 12;
  o.context_length = 32768;
  return WriteTempFile("tiny_gemma3_12l.gguf", BuildTinyGemma3(o));
}

std::unique_ptr<Model> LoadTiny(DeviceContext& ctx, const std::string& path) {
  LoadOptions lo;
  lo.f32_decode = true;  // compare decodes in f32
  auto m = LoadModel(path, ctx, lo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(*m);
}

std::vector<int32_t> RandomTokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(4, 261);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  ids[0] = 2;
  return ids;
}

UniPrefillConfig Config(std::vector<int> drops, sparsity::SelectionMode mode, float value) {
  UniPrefillConfig c;
  c.drop_layers = std::move(drops);
  c.selection.mode = mode;
  c.selection.top_p = mode == sparsity::SelectionMode::kTopP ? value : 0.99f;
  c.selection.keep_ratio = mode == sparsity::SelectionMode::kFixedRatio ? value : 0.5f;
  return c;
}

// Runs one request's tokens through the model with its own cache.
std::vector<float> RunOne(Model& m, DeviceContext& ctx, SequenceCache& cache,
                       const std::vector<int32_t>& tokens, const UniPrefillConfig& c,
                       std::vector<KeptTokens>* kept = nullptr) {
  std::vector<float> logits(m.config().vocab_size);
  SequenceStep s{&cache, tokens, logits.data(), kept};
  Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), c);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy tokens must match unless the reference's top two logits are within 1e-3 (a near-tie).
void ExpectSameGreedy(const std::vector<float>& ref, const std::vector<float>& got) {
  const int a = Argmax(ref), b = Argmax(got);
  if (a == b) return;
  std::vector<float> s = ref;
  std::nth_element(s.begin(), s.begin() + 1, s.end(), std::greater<float>());
  EXPECT_LT(s[0] - s[1], 1e-3f) << "greedy token differs (" << a << " vs " << b
                                << ") without a near-tie";
}

// max |a - b| <= tol * max |a|, and every value finite.
void ExpectClose(const std::vector<float>& ref, const std::vector<float>& got, float tol) {
  EXPECT_TRUE(testing::AllCloseToScale(ref, got, tol));
}

TEST(UniPrefillModelTest, POneAndNoDropLayersEqualDenseExactly) {
  auto ctx = DeviceContext::Cpu(2);
  auto m = LoadTiny(*ctx, TinyPath());
  const std::vector<int32_t> prompt = RandomTokens(700, 3);
  UniPrefillConfig dense;
  dense.enabled = false;
  for (const UniPrefillConfig& c :
       {Config({5, 11}, sparsity::SelectionMode::kTopP, 1.0f),
        Config({5, 11}, sparsity::SelectionMode::kFixedRatio, 1.0f), Config({}, {}, 0.5f)}) {
    auto cd = m->NewCache(1024);
    auto cu = m->NewCache(1024, c.drop_layers);
    std::vector<KeptTokens> kept;
    std::vector<float> ld = RunOne(*m, *ctx, *cd, prompt, dense);
    std::vector<float> lu = RunOne(*m, *ctx, *cu, prompt, c, &kept);
    EXPECT_EQ(ld, lu);
    EXPECT_EQ(kept.size(), c.drop_layers.size());
    for (const KeptTokens& k : kept) EXPECT_EQ(k.kept, k.alive);
    for (int step = 0; step < 3; ++step) {
      const std::vector<int32_t> next = {Argmax(ld)};
      ld = RunOne(*m, *ctx, *cd, next, dense);
      lu = RunOne(*m, *ctx, *cu, next, c);
      EXPECT_EQ(ld, lu) << "decode step " << step;
    }
  }
}

TEST(UniPrefillModelTest, EqualsNaiveModelThatRemovesDroppedTokens) {
  const std::string path = TinyPath();
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto ctx = DeviceContext::Cpu(2);
  auto m = LoadTiny(*ctx, path);
  const std::vector<int32_t> prompt = RandomTokens(900, 5);
  for (const UniPrefillConfig& c : {Config({5, 11}, sparsity::SelectionMode::kFixedRatio, 0.5f),
                                    Config({5, 11}, sparsity::SelectionMode::kTopP, 0.9f)}) {
    testing::NaiveGemma3 naive(**file, {c.drop_layers, c.selection});
    auto cache = m->NewCache(1024, c.drop_layers);
    std::vector<KeptTokens> kept;
    std::vector<float> got = RunOne(*m, *ctx, *cache, prompt, c, &kept);
    std::vector<float> want = naive.Forward(prompt);
    ASSERT_EQ(kept.size(), 2u);
    ASSERT_EQ(naive.kept_counts().size(), 2u);
    EXPECT_EQ(kept[0].kept, naive.kept_counts()[0]);
    EXPECT_EQ(kept[1].kept, naive.kept_counts()[1]);
    EXPECT_EQ(kept[1].alive, kept[0].kept);  // nested: layer 11 scores only what layer 5 kept
    if (c.selection.mode == sparsity::SelectionMode::kFixedRatio) {
      EXPECT_LT(kept[1].kept, kept[0].kept);
    }
    ExpectClose(want, got, 1e-4f);
    ExpectSameGreedy(want, got);
    for (int step = 0; step < 4; ++step) {
      const std::vector<int32_t> next = {Argmax(want)};
      got = RunOne(*m, *ctx, *cache, next, c);
      want = naive.Forward(next);
      ExpectClose(want, got, 1e-4f);
      ExpectSameGreedy(want, got);
    }
    // Full-attention layers hold exactly their segment's tokens: all of them up to layer 5, the
    // kept ones (plus decodes) after.
    EXPECT_EQ(cache->Layer(5).count(), 904);
    EXPECT_EQ(naive.cached(5), 904);
    EXPECT_EQ(cache->Layer(11).count(), kept[0].kept + 4);
    EXPECT_EQ(naive.cached(11), kept[0].kept + 4);
    // Layer 11 is the last layer: its drop only shortens its own FFN, so there are two segments.
    EXPECT_EQ(cache->layout().n_segments, 2);
    EXPECT_EQ(cache->segment_length(0), 904);
    EXPECT_EQ(cache->segment_length(1), kept[0].kept + 4);
  }
}

TEST(UniPrefillModelTest, MixedBatchEqualsEachRequestAlone) {
  auto ctx = DeviceContext::Cpu(2);
  auto m = LoadTiny(*ctx, TinyPath());
  const UniPrefillConfig c = Config({5, 11}, sparsity::SelectionMode::kFixedRatio, 0.5f);
  const std::vector<int> prefill_lengths = {300, 2500, 20000};
  const std::vector<int> history_lengths = {400, 1000};  // requests that decode in the batch
  // Two caches per request with identical history: one runs alone, one runs in the batch.
  struct Req {
    std::unique_ptr<SequenceCache> alone, batched;
    std::vector<int32_t> tokens;
    std::vector<float> logits_alone, logits_batched;
    std::vector<KeptTokens> kept_alone, kept_batched;
  };
  std::vector<Req> reqs;
  uint32_t seed = 10;
  for (int n : prefill_lengths) {
    Req r;
    r.alone = m->NewCache(n + 8, c.drop_layers);
    r.batched = m->NewCache(n + 8, c.drop_layers);
    r.tokens = RandomTokens(n, seed++);
    reqs.push_back(std::move(r));
  }
  for (int n : history_lengths) {
    Req r;
    r.alone = m->NewCache(n + 8, c.drop_layers);
    r.batched = m->NewCache(n + 8, c.drop_layers);
    const std::vector<int32_t> history = RandomTokens(n, seed++);
    std::vector<float> l = RunOne(*m, *ctx, *r.alone, history, c);
    RunOne(*m, *ctx, *r.batched, history, c);
    r.tokens = {Argmax(l)};
    reqs.push_back(std::move(r));
  }
  for (Req& r : reqs) r.logits_alone = RunOne(*m, *ctx, *r.alone, r.tokens, c, &r.kept_alone);
  std::vector<SequenceStep> steps;
  for (Req& r : reqs) {
    r.logits_batched.resize(m->config().vocab_size);
    steps.push_back({r.batched.get(), r.tokens, r.logits_batched.data(), &r.kept_batched});
  }
  ASSERT_TRUE(m->ForwardBatch(*ctx, steps, c).ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ExpectClose(reqs[i].logits_alone, reqs[i].logits_batched, 1e-4f);
    ExpectSameGreedy(reqs[i].logits_alone, reqs[i].logits_batched);
    ASSERT_EQ(reqs[i].kept_alone.size(), reqs[i].kept_batched.size());
    for (size_t k = 0; k < reqs[i].kept_alone.size(); ++k) {
      EXPECT_EQ(reqs[i].kept_alone[k].kept, reqs[i].kept_batched[k].kept);
    }
    if (i < prefill_lengths.size()) {
      EXPECT_EQ(reqs[i].kept_batched.size(), 2u);
    }
  }
  // Then every request decodes together (after dropped prefills) vs alone.
  steps.clear();
  for (Req& r : reqs) {
    r.tokens = {Argmax(r.logits_alone)};
    steps.push_back({r.batched.get(), r.tokens, r.logits_batched.data(), nullptr});
  }
  ASSERT_TRUE(m->ForwardBatch(*ctx, steps, c).ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<float> alone = RunOne(*m, *ctx, *reqs[i].alone, reqs[i].tokens, c);
    ExpectClose(alone, reqs[i].logits_batched, 1e-4f);
    ExpectSameGreedy(alone, reqs[i].logits_batched);
  }
}

TEST(UniPrefillModelTest, CacheMadeForOtherDropLayersIsRejected) {
  auto ctx = DeviceContext::Cpu(1);
  auto m = LoadTiny(*ctx, TinyPath());
  auto cache = m->NewCache(64, {});
  std::vector<float> logits(m->config().vocab_size);
  const std::vector<int32_t> ids = RandomTokens(10, 1);
  SequenceStep s{cache.get(), ids, logits.data(), nullptr};
  Status st = m->ForwardBatch(*ctx, std::span<const SequenceStep>(&s, 1),
                              Config({5, 11}, sparsity::SelectionMode::kTopP, 0.9f));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("segments"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace uniprefill
