// `bench step`'s mixes: the grammar and its errors, and TimeStepMix against a recording model
// (the tiny CPU preset behind a wrapper that logs every forward's steps): each timed forward
// holds exactly the mix, decodes first, every chunk over exactly its cached prefix, the head
// asked for only by decodes and last chunks; then `uniprefill bench step` itself.
#include "loadgen/step_mix.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"

namespace uniprefill {
namespace {

TEST(StepMixParseTest, ItemsMixesAndWhitespace) {
  Result<std::vector<StepMix>> m = ParseStepMixes(" c2048@16384 ; d3@32768 + c896@0+l128@2048 ;"
                                                  "s64@7 ;");
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].text, "c2048@16384");
  ASSERT_EQ((*m)[0].items.size(), 1u);
  EXPECT_EQ((*m)[0].items[0].kind, 'c');
  EXPECT_EQ((*m)[0].items[0].rows, 2048);
  EXPECT_EQ((*m)[0].items[0].depth, 16384);
  EXPECT_FALSE((*m)[0].has_segment_chunk());
  const StepMix& mixed = (*m)[1];
  ASSERT_EQ(mixed.items.size(), 3u);
  EXPECT_EQ(mixed.items[0].kind, 'd');
  EXPECT_EQ(mixed.items[0].count, 3);
  EXPECT_EQ(mixed.items[0].rows, 1);
  EXPECT_EQ(mixed.items[0].depth, 32768);
  EXPECT_EQ(mixed.items[2].kind, 'l');
  EXPECT_EQ(mixed.requests(), 5);
  EXPECT_EQ(mixed.new_rows(), 3 + 896 + 128);
  EXPECT_TRUE((*m)[2].has_segment_chunk());
  EXPECT_EQ((*m)[2].items[0].depth, 7);
}

TEST(StepMixParseTest, ErrorsNameTheItemAndTheGrammar) {
  const auto error = [](const std::string& text) {
    Result<std::vector<StepMix>> m = ParseStepMixes(text);
    EXPECT_FALSE(m.ok()) << text;
    return m.ok() ? std::string() : m.status().message();
  };
  EXPECT_NE(error("x5@3").find("step item 'x5@3': unknown kind 'x'"), std::string::npos);
  EXPECT_NE(error("c5").find("no '@'"), std::string::npos);
  EXPECT_NE(error("c0@5").find(">= 1"), std::string::npos);
  EXPECT_NE(error("c-1@5").find(">= 1"), std::string::npos);
  EXPECT_NE(error("c4@x").find(">= 0"), std::string::npos);
  EXPECT_NE(error("d2@0").find("at least 1 cached token"), std::string::npos);
  EXPECT_NE(error("d2000@10").find("at most 1024 decodes"), std::string::npos);
  EXPECT_NE(error("c4@4+").find("empty"), std::string::npos);
  EXPECT_NE(error("c99999999999@1").find("'c99999999999@1'"), std::string::npos);
  EXPECT_NE(error(" ; ;").find("no step mix given"), std::string::npos);
}

// A model that runs the tiny CPU preset and logs what each forward was asked to do.
struct LoggedStep {
  int tokens = 0, cached = 0, segment0 = 0;
  bool logits = false, allow_drop = true, chunk = false;
  SegmentChunk segment;
};
class RecordingModel final : public Model {
 public:
  explicit RecordingModel(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  size_t resident_weight_bytes() const override { return inner_->resident_weight_bytes(); }
  size_t host_weight_bytes() const override { return inner_->host_weight_bytes(); }
  std::unique_ptr<SequenceCache> NewCache(int max_tokens,
                                          const std::vector<int>& drops) const override {
    return inner_->NewCache(max_tokens, drops);
  }
  bool supports_segment_chunks() const override { return inner_->supports_segment_chunks(); }
  Status ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                      const UniPrefillConfig& up, const ProgressFn& progress,
                      ForwardStats* stats) override {
    std::vector<LoggedStep> log;
    for (const SequenceStep& s : steps) {
      LoggedStep l;
      l.tokens = static_cast<int>(s.tokens.size());
      l.cached = s.cache->length();
      l.segment0 = s.cache->segment_length(0);
      l.logits = s.logits != nullptr;
      l.allow_drop = s.allow_drop;
      l.chunk = s.chunk != nullptr;
      if (s.chunk) l.segment = *s.chunk;
      log.push_back(l);
    }
    forwards.push_back(log);
    enabled.push_back(up.enabled);
    return inner_->ForwardBatch(ctx, steps, up, progress, stats);
  }
  std::vector<std::vector<LoggedStep>> forwards;
  std::vector<bool> enabled;

 private:
  std::unique_ptr<Model> inner_;
};

class StepMixRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = DeviceContext::Cpu(2);
    RandomModelOptions ro;
    ro.materialize = true;
    Result<ModelDefinition> def = RandomModelDefinition("tiny", ro);
    ASSERT_TRUE(def.ok()) << def.status().message();
    options_.uniprefill = DefaultUniPrefillConfig(def->config);
    options_.uniprefill.enabled = true;
    options_.uniprefill.selection.mode = SelectionMode::kFixedRatio;
    options_.uniprefill.selection.keep_ratio = 0.5f;
    options_.warmup = 1;
    options_.repeats = 3;
    Result<std::unique_ptr<Model>> m = MakeModel(std::move(*def), *ctx_, {});
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::make_unique<RecordingModel>(std::move(*m));
  }
  StepMix Mix(const std::string& text) {
    Result<std::vector<StepMix>> m = ParseStepMixes(text);
    EXPECT_TRUE(m.ok() && m->size() == 1u) << text;
    return m.ok() ? m->front() : StepMix{};
  }
  std::unique_ptr<DeviceContext> ctx_;
  StepMixOptions options_;
  std::unique_ptr<RecordingModel> model_;
};

// The forwards of `requests` steps: the timed ones (prefixes and contexts are prefilled one
// request per forward).
std::vector<std::vector<LoggedStep>> ForwardsOf(const RecordingModel& m, size_t requests) {
  std::vector<std::vector<LoggedStep>> out;
  for (const auto& f : m.forwards) {
    if (f.size() == requests) out.push_back(f);
  }
  return out;
}

TEST_F(StepMixRunTest, EachTimedForwardHoldsExactlyTheMixDecodesFirst) {
  const StepMix mix = Mix("c24@40 + d2@30 + l8@0 + c16@20");
  Result<StepMixTiming> t = TimeStepMix(*model_, *ctx_, mix, options_);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->forward_ms.size(), 3u);
  for (double ms : t->forward_ms) EXPECT_GT(ms, 0.0);
  EXPECT_EQ(t->stats.head_rows, 3) << "two decodes and the last chunk want a token";
  for (bool e : model_->enabled) EXPECT_FALSE(e) << "no s item: dense forwards";
  const auto steps = ForwardsOf(*model_, 5);
  ASSERT_EQ(steps.size(), 4u) << "warm-up + repeats";
  for (size_t it = 0; it < steps.size(); ++it) {
    const std::vector<LoggedStep>& s = steps[it];
    for (int d = 0; d < 2; ++d) {  // decodes first, their context one token longer each time
      EXPECT_EQ(s[d].tokens, 1);
      EXPECT_EQ(s[d].cached, 30 + static_cast<int>(it));
      EXPECT_TRUE(s[d].logits);
      EXPECT_FALSE(s[d].chunk);
    }
    // Then the chunks in the mix's order, each over a fresh prefix of exactly its depth.
    EXPECT_EQ(s[2].tokens, 24);
    EXPECT_EQ(s[2].cached, 40);
    EXPECT_FALSE(s[2].logits);
    EXPECT_EQ(s[3].tokens, 8);
    EXPECT_EQ(s[3].cached, 0);
    EXPECT_TRUE(s[3].logits);
    EXPECT_EQ(s[4].tokens, 16);
    EXPECT_EQ(s[4].cached, 20);
    EXPECT_FALSE(s[4].logits);
  }
}

TEST_F(StepMixRunTest, AChunkBeforeItsPromptsLastRunsNoHead) {
  Result<StepMixTiming> t = TimeStepMix(*model_, *ctx_, Mix("c32@16"), options_);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->stats.head_rows, 0);
}

TEST_F(StepMixRunTest, SegmentChunksRunUnderTheUniPrefillLayoutBesideDenseRequests) {
  const StepMix mix = Mix("s16@24 + d1@10 + c8@8");
  Result<StepMixTiming> t = TimeStepMix(*model_, *ctx_, mix, options_);
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (bool e : model_->enabled) EXPECT_TRUE(e) << "an s item: every forward under UniPrefill";
  EXPECT_EQ(t->stats.head_rows, 1) << "the decode only";
  const int last_n = options_.uniprefill.selection.last_n;
  const auto steps = ForwardsOf(*model_, 3);
  ASSERT_EQ(steps.size(), 4u);
  for (const std::vector<LoggedStep>& s : steps) {
    EXPECT_EQ(s[0].tokens, 1);  // the decode passes the drop layers densely
    EXPECT_FALSE(s[0].allow_drop);
    const LoggedStep& seg = s[1];
    EXPECT_TRUE(seg.chunk);
    EXPECT_TRUE(seg.allow_drop);
    EXPECT_EQ(seg.tokens, 16);
    EXPECT_EQ(seg.segment0, 24) << "its prefix: earlier chunks of segment 0";
    EXPECT_EQ(seg.segment.segment, 0);
    EXPECT_EQ(seg.segment.rows, 16);
    EXPECT_EQ(seg.segment.segment_rows, 24 + 16 + last_n) << "the last n rows still to come";
    EXPECT_FALSE(seg.segment.ends_segment);
    EXPECT_FALSE(seg.logits);
    EXPECT_FALSE(s[2].chunk);
    EXPECT_FALSE(s[2].allow_drop);
    EXPECT_EQ(s[2].cached, 8);
  }
}

// warmup 1 + repeats 3: the middle timed forward is the third of four. A chunk at least 2 x its
// rows deep keeps one cache, prefilled once to where that forward's chunk starts at exactly its
// depth (c8@40 from 24: 24, 32, 40, 48; s4@24 from 16), and its segment's rows cover every
// forward's chunk and the last n rows after them.
TEST_F(StepMixRunTest, DeepChunksKeepOneCacheWithTheMiddleTimedForwardAtTheirDepth) {
  const StepMix mix = Mix("d1@10 + c8@40 + s4@24");
  Result<StepMixTiming> t = TimeStepMix(*model_, *ctx_, mix, options_);
  ASSERT_TRUE(t.ok()) << t.status().message();
  const int last_n = options_.uniprefill.selection.last_n;
  const auto steps = ForwardsOf(*model_, 3);
  ASSERT_EQ(steps.size(), 4u);
  for (size_t it = 0; it < steps.size(); ++it) {
    SCOPED_TRACE("forward " + std::to_string(it));
    const int i = static_cast<int>(it);
    EXPECT_EQ(steps[it][0].cached, 10 + i);  // the decode
    EXPECT_EQ(steps[it][1].tokens, 8);
    EXPECT_EQ(steps[it][1].cached, 24 + 8 * i);
    EXPECT_FALSE(steps[it][1].logits);
    const LoggedStep& seg = steps[it][2];
    EXPECT_EQ(seg.tokens, 4);
    EXPECT_EQ(seg.segment0, 16 + 4 * i);
    EXPECT_EQ(seg.segment.segment_rows, 16 + 4 * 4 + last_n);
    EXPECT_FALSE(seg.segment.ends_segment);
  }
  EXPECT_EQ(ForwardsOf(*model_, 1).size(), 3u) << "each prefix prefilled once (one piece each)";
  EXPECT_EQ(StepItemCacheTokens(mix.items[1], options_), 24 + 4 * 8 + 8);
  EXPECT_EQ(StepItemCacheTokens(mix.items[2], options_), 16 + 4 * 4 + last_n);
  EXPECT_EQ(StepItemCacheTokens(mix.items[0], options_), 10 + 4 + 1);
  // A shallower chunk (c24@40 would start at -8) still gets a fresh prefix of its depth.
  EXPECT_EQ(StepItemCacheTokens(Mix("c24@40").items[0], options_), 40 + 2 * 24);
}

TEST_F(StepMixRunTest, SegmentItemsNeedDropLayers) {
  options_.uniprefill.drop_layers.clear();
  Result<StepMixTiming> t = TimeStepMix(*model_, *ctx_, Mix("s8@8"), options_);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("s items need a model with UniPrefill drop layers"),
            std::string::npos)
      << t.status().message();
}

TEST(BenchStepCliTest, TimesEachMixAndWritesJson) {
  const std::string json = testing::TempPath("bench_step.json");
  const CliResult r = RunCli(
      "bench step --shape tiny --threads 1 --warmup 0 --repeats 2 --mixes 'c8@8; l4@4+d1@6' "
      "--json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("c8@8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("l4@4+d1@6"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["benchmark"], "step");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["head_rows"], 0);
  EXPECT_EQ(j["rows"][1]["head_rows"], 2);
  EXPECT_EQ(j["rows"][1]["requests"], 2);
  EXPECT_EQ(j["rows"][1]["rows"], 5);
  EXPECT_EQ(j["rows"][1]["forward_ms_all"].size(), 2u);
  EXPECT_GT(j["rows"][1]["forward_ms_median"].get<double>(), 0.0);
  EXPECT_EQ(j["rows"][1]["clock_samples"], 0) << "the CPU has no GPU clock to sample";
}

// The JSON records the UNIPREFILL_* variables the run was started with (the launch choices of
// two arms of one binary differ by nothing else), and no other variable.
TEST(BenchStepCliTest, TheJsonRecordsTheRunsUniprefillVariables) {
  const std::string json = testing::TempPath("bench_step_env.json");
  const CliResult r = RunCliWithEnv(
      "UNIPREFILL_CUDA_WGMMA_SCHEDULE=overlap UP_NOT_RECORDED=1",
      "bench step --shape tiny --threads 1 --warmup 0 --repeats 1 --mixes 'c8@8' --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  ASSERT_TRUE(j["environment"].is_object()) << j.dump();
  EXPECT_EQ(j["environment"]["UNIPREFILL_CUDA_WGMMA_SCHEDULE"], "overlap");
  EXPECT_FALSE(j["environment"].contains("UP_NOT_RECORDED"));
  for (const auto& [name, value] : j["environment"].items()) {
    EXPECT_EQ(name.rfind("UNIPREFILL_", 0), 0u) << name;
  }
}

TEST(BenchStepCliTest, BadMixesAndAMissingGpuAreOneErrorLine) {
  const CliResult bad = RunCli("bench step --shape tiny --mixes 'q1@1'");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_FALSE(bad.crashed);
  EXPECT_NE(bad.err.find("error: --mixes: step item 'q1@1': unknown kind 'q'"), std::string::npos)
      << bad.err;
  const CliResult none = RunCli("bench step --shape tiny --mixes ''");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no step mix given"), std::string::npos) << none.err;
  // Caches of 1024 decodes over 16M tokens each: refused before anything is allocated.
  const CliResult huge = RunCli("bench step --shape tiny --mixes 'd1024@16000000'");
  EXPECT_EQ(huge.exit_code, 1);
  EXPECT_FALSE(huge.crashed);
  EXPECT_NE(huge.err.find("error: --device cpu: the tiny model's weights"), std::string::npos)
      << huge.err;
  EXPECT_NE(huge.err.find("available; use a smaller --shape (tiny)"), std::string::npos)
      << huge.err;
  if (!DeviceContext::CudaAvailable()) {
    const CliResult gpu = RunCli("bench step --shape tiny --device cuda --mixes 'c8@8'");
    EXPECT_EQ(gpu.exit_code, 1);
    EXPECT_FALSE(gpu.crashed);
    EXPECT_NE(gpu.err.find("error: --device cuda: "), std::string::npos) << gpu.err;
  }
}

}  // namespace
}  // namespace uniprefill
