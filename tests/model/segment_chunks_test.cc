// Segment-wise chunked prefill equals the unchunked prefill (docs/design.md section 2) on every
// architecture family (tiny HF checkpoints: Llama full attention, Qwen3-Next linear/full hybrid
// with MoE, Gemma 3 sliding/full hybrid), on the CPU:
// - the same kept tokens at every drop layer (the positions each segment's cache holds), logits
//   within f32 rounding, the same greedy tokens after it, for chunks of one KV block, odd sizes
//   and more than the prompt, top-p and fixed ratio;
// - p = 1 chunked bit for bit equal to dense chunked;
// - prompts at different segments and a decode in the same forwards equal each alone;
// and on Gemma 3 270M (the real default model, a real 4177-token document): its default setting
// (drop at 11, windows by position) and drops at 5 and 11 (windows by alive index).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "testing/compare.h"
#include "testing/required_asset.h"
#include "testing/segment_chunks.h"

namespace uniprefill {
namespace {

using testing::SegmentChunkedPrefill;

std::string Dir(const std::string& family) {
  return std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Positions held by each full-attention layer's cache (the kept tokens of its segment; sliding
// layers keep only their window).
std::vector<std::vector<int32_t>> CachedPositions(const SequenceCache& cache) {
  std::vector<std::vector<int32_t>> out;
  for (size_t l = 0; l < cache.layout().layers.size(); ++l) {
    if (cache.layout().layers[l].kind != CacheLayerKind::kFullAttention) continue;
    std::vector<int32_t> pos;
    for (const KvChunk& c : cache.Layer(static_cast<int>(l)).chunks) {
      pos.insert(pos.end(), c.pos, c.pos + c.count);
    }
    out.push_back(std::move(pos));
  }
  return out;
}

class SegmentChunksTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ctx_ = DeviceContext::Cpu(2);
    LoadOptions lo;
    lo.f32_decode = true;
    auto m = LoadModel(Dir(GetParam()), *ctx_, lo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(*m);
    const ModelConfig& c = model_->config();
    for (int i = 0; i < c.n_layers; ++i) {
      if (c.layer_kinds[i] == LayerKind::kFullAttention) drops_.push_back(i);
    }
    ASSERT_FALSE(drops_.empty());
    ASSERT_TRUE(model_->supports_segment_chunks());
  }

  UniPrefillConfig Config(sparsity::SelectionMode mode) const {
    return testing::ChunkTestSelection(drops_, mode);
  }

  // Greedy decodes after a prefill whose last logits are `logits`.
  std::vector<int32_t> Decode(SequenceCache& cache, std::vector<float> logits,
                              const UniPrefillConfig& up, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(Argmax(logits));
      const std::vector<int32_t> t = {out.back()};
      SequenceStep s{&cache, t, logits.data()};
      const Status st = model_->ForwardBatch(*ctx_, std::span<const SequenceStep>(&s, 1), up);
      EXPECT_TRUE(st.ok()) << st.message();
    }
    return out;
  }

  std::unique_ptr<DeviceContext> ctx_;
  std::unique_ptr<Model> model_;
  std::vector<int> drops_;
};

TEST_P(SegmentChunksTest, ChunkedEqualsUnchunked) {
  Model& m = *model_;
  const int V = m.config().vocab_size;
  const std::vector<int32_t> prompt = RandomTokens(700, V, 11);
  for (auto mode : {sparsity::SelectionMode::kTopP, sparsity::SelectionMode::kFixedRatio}) {
    const UniPrefillConfig up = Config(mode);
    auto whole = m.NewCache(800, drops_);
    std::vector<float> want(V);
    std::vector<KeptTokens> kept_whole;
    SequenceStep s{whole.get(), prompt, want.data(), &kept_whole};
    ASSERT_TRUE(m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&s, 1), up).ok());
    ASSERT_EQ(kept_whole.size(), drops_.size());
    EXPECT_LT(kept_whole.back().kept, 700);
    const auto want_positions = CachedPositions(*whole);
    std::vector<int> want_lengths;
    const int n_segments = m.CacheLayoutFor(drops_).n_segments;
    for (int seg = 0; seg < n_segments; ++seg) {
      want_lengths.push_back(whole->segment_length(seg));
    }
    const std::vector<int32_t> want_tokens = Decode(*whole, want, up, 4);
    // 16: one KV block (the segments' last chunks run the 48 queries the selection reads).
    for (int chunk : {16, 97, 256, 5000}) {
      SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)) + ", chunk " +
                   std::to_string(chunk));
      auto cache = m.NewCache(800, drops_);
      std::vector<float> got(V);
      std::vector<KeptTokens> kept;
      SegmentChunkedPrefill p =
          SegmentChunkedPrefill::Of(cache.get(), prompt, chunk, got.data(), &kept);
      const Status st = testing::RunSegmentChunked(m, *ctx_, up, {&p});
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE(cache->boundary().empty());
      ASSERT_EQ(kept.size(), kept_whole.size());
      for (size_t k = 0; k < kept.size(); ++k) {
        EXPECT_EQ(kept[k].layer, kept_whole[k].layer);
        EXPECT_EQ(kept[k].kept, kept_whole[k].kept) << "drop " << k;
        EXPECT_EQ(kept[k].alive, kept_whole[k].alive) << "drop " << k;
      }
      EXPECT_EQ(CachedPositions(*cache), want_positions);
      for (int seg = 0; seg < n_segments; ++seg) {
        EXPECT_EQ(cache->segment_length(seg), want_lengths[seg]) << seg;
      }
      EXPECT_EQ(cache->length(), 700);
      EXPECT_TRUE(testing::AllCloseToScale(want, got, 1e-4));
      EXPECT_EQ(Decode(*cache, got, up, 4), want_tokens);
      if (chunk >= 700) {  // one per segment
        EXPECT_EQ(p.chunk_rows.size(), m.CacheLayoutFor(drops_).n_segments);
      }
    }
  }
}

TEST_P(SegmentChunksTest, POneChunkedEqualsDenseChunkedBitForBit) {
  Model& m = *model_;
  const int V = m.config().vocab_size;
  const std::vector<int32_t> prompt = RandomTokens(700, V, 12);
  UniPrefillConfig up = Config(sparsity::SelectionMode::kTopP);
  up.selection.top_p = 1.0f;
  UniPrefillConfig dense;
  dense.enabled = false;
  const int chunk = 100;  // >= the 48 queries read, so every segment is cut at the same rows
  auto cd = m.NewCache(800);
  std::vector<float> want(V);
  for (int done = 0; done < 700; done += chunk) {
    SequenceStep s{cd.get(), std::span<const int32_t>(prompt).subspan(done, chunk),
                   done + chunk == 700 ? want.data() : nullptr};
    ASSERT_TRUE(m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&s, 1), dense).ok());
  }
  auto cu = m.NewCache(800, drops_);
  std::vector<float> got(V);
  std::vector<KeptTokens> kept;
  SegmentChunkedPrefill p = SegmentChunkedPrefill::Of(cu.get(), prompt, chunk, got.data(), &kept);
  {
    const Status st = testing::RunSegmentChunked(m, *ctx_, up, {&p});
    ASSERT_TRUE(st.ok()) << st.message();
  }
  for (const KeptTokens& k : kept) EXPECT_EQ(k.kept, 700);
  EXPECT_EQ(want, got);
  EXPECT_EQ(Decode(*cu, got, up, 3), Decode(*cd, want, dense, 3));
}

TEST_P(SegmentChunksTest, PromptsAtDifferentSegmentsAndADecodeShareForwards) {
  Model& m = *model_;
  const int V = m.config().vocab_size;
  const UniPrefillConfig up = Config(sparsity::SelectionMode::kFixedRatio);
  UniPrefillConfig top_p = Config(sparsity::SelectionMode::kTopP);
  const std::vector<std::vector<int32_t>> prompts = {RandomTokens(700, V, 13),
                                                     RandomTokens(450, V, 14)};
  const int chunks[] = {300, 61};
  const UniPrefillConfig* selections[] = {nullptr, &top_p};
  // Alone: each prompt chunked on its own.
  std::vector<std::vector<float>> want(2, std::vector<float>(V)), got(2, std::vector<float>(V));
  std::vector<std::vector<KeptTokens>> kept_alone(2), kept_shared(2);
  std::vector<std::unique_ptr<SequenceCache>> alone, shared;
  for (int i = 0; i < 2; ++i) {
    alone.push_back(m.NewCache(800, drops_));
    shared.push_back(m.NewCache(800, drops_));
    SegmentChunkedPrefill p = SegmentChunkedPrefill::Of(alone[i].get(), prompts[i], chunks[i],
                                                        want[i].data(), &kept_alone[i],
                                                        selections[i]);
    {
    const Status st = testing::RunSegmentChunked(m, *ctx_, up, {&p});
    ASSERT_TRUE(st.ok()) << st.message();
  }
  }
  // A third request decodes beside them in the first forward.
  auto history = m.NewCache(800, drops_), history_alone = m.NewCache(800, drops_);
  const std::vector<int32_t> hist = RandomTokens(300, V, 15), next = {7};
  for (SequenceCache* c : {history.get(), history_alone.get()}) {
    SequenceStep s{c, hist, nullptr};
    ASSERT_TRUE(m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&s, 1), up).ok());
  }
  std::vector<float> decode_want(V), decode_got(V);
  SequenceStep d_alone{history_alone.get(), next, decode_want.data()};
  ASSERT_TRUE(m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&d_alone, 1), up).ok());

  std::vector<SegmentChunkedPrefill> ps;
  for (int i = 0; i < 2; ++i) {
    ps.push_back(SegmentChunkedPrefill::Of(shared[i].get(), prompts[i], chunks[i], got[i].data(),
                                           &kept_shared[i], selections[i]));
  }
  SequenceStep d{history.get(), next, decode_got.data()};
  const Status st =
      testing::RunSegmentChunked(m, *ctx_, up, {&ps[0], &ps[1]}, std::span(&d, 1));
  ASSERT_TRUE(st.ok()) << st.message();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(testing::AllCloseToScale(want[i], got[i], 1e-4)) << i;
    EXPECT_EQ(Argmax(want[i]), Argmax(got[i])) << i;
    ASSERT_EQ(kept_alone[i].size(), kept_shared[i].size());
    for (size_t k = 0; k < kept_alone[i].size(); ++k) {
      EXPECT_EQ(kept_alone[i][k].kept, kept_shared[i][k].kept);
    }
    EXPECT_EQ(CachedPositions(*alone[i]), CachedPositions(*shared[i]));
  }
  EXPECT_TRUE(testing::AllCloseToScale(decode_want, decode_got, 1e-4));
}

TEST_P(SegmentChunksTest, BadChunksAreRejectedWithAReason) {
  Model& m = *model_;
  const UniPrefillConfig up = Config(sparsity::SelectionMode::kTopP);
  auto cache = m.NewCache(800, drops_);
  const std::vector<int32_t> tokens = RandomTokens(100, m.config().vocab_size, 16);
  std::vector<float> logits(m.config().vocab_size);
  const auto run = [&](SegmentChunk c, std::span<const int32_t> t, float* l) {
    SequenceStep s{cache.get(), t, l};
    s.chunk = &c;
    return m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&s, 1), up);
  };
  // Token count and rows disagree; a segment out of range.
  Status st = run({0, 50, 100, false}, tokens, nullptr);
  EXPECT_NE(st.message().find("brought 100 tokens"), std::string::npos) << st.message();
  st = run({9, 1, 100, false}, {}, nullptr);
  EXPECT_NE(st.message().find("chunk of segment 9"), std::string::npos) << st.message();
  if (m.CacheLayoutFor(drops_).n_segments == 1) return;  // Gemma 3 tiny: its one drop is last
  // A later segment before its rows exist.
  st = run({1, 10, 100, false}, {}, nullptr);
  EXPECT_NE(st.message().find("boundary holds 0 unread rows"), std::string::npos) << st.message();
  // Logits from a chunk that stops at a drop layer.
  st = run({0, 100, 100, true}, tokens, logits.data());
  EXPECT_NE(st.message().find("no logits to give"), std::string::npos) << st.message();
  // The segment's last chunk without the queries the selection reads (48).
  st = run({0, 80, 100, false}, std::span<const int32_t>(tokens).subspan(0, 80), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  st = run({0, 20, 100, true}, std::span<const int32_t>(tokens).subspan(80, 20), nullptr);
  EXPECT_NE(st.message().find("must hold them"), std::string::npos) << st.message();
}

// Only a forward whose requests want logits runs the LM head (ForwardStats::head_rows): dense
// chunks before the last want none, the last chunk and a decode one row each.
TEST_P(SegmentChunksTest, OnlyRowsThatWantLogitsRunTheHead) {
  Model& m = *model_;
  const UniPrefillConfig dense;
  auto cache = m.NewCache(400, {});
  const std::vector<int32_t> prompt = RandomTokens(300, m.config().vocab_size, 17);
  std::vector<float> logits(m.config().vocab_size);
  ForwardStats stats;
  for (size_t at = 0; at < prompt.size(); at += 97) {
    const size_t n = std::min<size_t>(97, prompt.size() - at);
    const bool last = at + n == prompt.size();
    SequenceStep s{cache.get(), std::span<const int32_t>(prompt).subspan(at, n),
                   last ? logits.data() : nullptr};
    ASSERT_TRUE(m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&s, 1), dense, nullptr, &stats)
                    .ok());
    EXPECT_EQ(stats.head_rows, last ? 1 : 0) << "after the chunk at " << at;
  }
  const std::vector<int32_t> next = {Argmax(logits)};
  SequenceStep d{cache.get(), next, logits.data()};
  ASSERT_TRUE(m.ForwardBatch(*ctx_, std::span<const SequenceStep>(&d, 1), dense, nullptr, &stats)
                  .ok());
  EXPECT_EQ(stats.head_rows, 2);
}

TEST(SegmentChunksGemma3_270mTest, ChunkedEqualsUnchunkedOnARealDocument) {
  const std::string model_path = std::string(UP_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  const std::string prompt_path =
      std::string(UP_SOURCE_DIR) + "/tests/goldens/model_gemma3/prompt3.json";
  UP_REQUIRE_ASSET(model_path, "the default model");
  UP_REQUIRE_ASSET(prompt_path, "the committed golden file");
  const std::vector<int32_t> prompt =
      nlohmann::json::parse(std::ifstream(prompt_path))["ids"].get<std::vector<int32_t>>();
  const int n = static_cast<int>(prompt.size());
  auto ctx = DeviceContext::Cpu(2);
  LoadOptions lo;
  lo.f32_decode = true;
  auto loaded = LoadModel(model_path, *ctx, lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Model& m = **loaded;
  const int V = m.config().vocab_size;
  UniPrefillConfig by_index = DefaultUniPrefillConfig(m.config());
  by_index.drop_layers = {5, 11};
  by_index.window_mode = WindowMode::kAliveIndex;
  const std::vector<UniPrefillConfig> configs = {DefaultUniPrefillConfig(m.config()), by_index};
  const int chunks[] = {1000, 333};  // one size per setting keeps the test short
  for (size_t c = 0; c < configs.size(); ++c) {
    const UniPrefillConfig& up = configs[c];
    SCOPED_TRACE("drops " + LayerListToString(up.drop_layers));
    auto whole = m.NewCache(n + 8, up.drop_layers);
    std::vector<float> want(V);
    std::vector<KeptTokens> kept_whole;
    SequenceStep s{whole.get(), prompt, want.data(), &kept_whole};
    ASSERT_TRUE(m.ForwardBatch(*ctx, std::span<const SequenceStep>(&s, 1), up).ok());
    ASSERT_EQ(kept_whole.size(), up.drop_layers.size());
    EXPECT_LT(kept_whole.back().kept, n);
    const auto want_positions = CachedPositions(*whole);
    for (int chunk : {chunks[c]}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      auto cache = m.NewCache(n + 8, up.drop_layers);
      std::vector<float> got(V);
      std::vector<KeptTokens> kept;
      SegmentChunkedPrefill p =
          SegmentChunkedPrefill::Of(cache.get(), prompt, chunk, got.data(), &kept);
      const Status st = testing::RunSegmentChunked(m, *ctx, up, {&p});
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(kept.size(), kept_whole.size());
      for (size_t k = 0; k < kept.size(); ++k) EXPECT_EQ(kept[k].kept, kept_whole[k].kept);
      EXPECT_EQ(CachedPositions(*cache), want_positions);
      EXPECT_TRUE(testing::AllCloseToScale(want, got, 1e-4));
      EXPECT_EQ(Argmax(got), Argmax(want));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, SegmentChunksTest,
                         ::testing::Values("llama", "qwen3_next", "gemma3"));

}  // namespace
}  // namespace uniprefill
