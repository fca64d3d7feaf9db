// Engine::Generate with the request's sampling and stop settings, on the tiny random-weight Gemma 3
// (byte-level vocabulary): stop strings, stop token ids, the repetition penalty, seeds, and
// invalid settings rejected before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "testing/tiny_gemma3.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

class EngineSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions o;
    o.model_path = testing::WriteTempFile("engine_sampling_tiny.gguf", testing::BuildTinyGemma3());
    o.threads = 1;
    auto engine = Engine::Load(o);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = engine->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  // Greedy past EOS, so the random model always produces `max_tokens` tokens unless told to stop.
  static SamplingParams Greedy(int max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
  }

  struct Run {
    GenerationResult result;
    std::string streamed;  // the pieces passed to on_text, concatenated
    int pieces = 0;
  };

  static Run Generate(const SamplingParams& params, const std::string& prompt = "the theme") {
    Run run;
    auto r = engine_->Generate(engine_->Tokenize(prompt, /*add_bos=*/true), params,
                               [&run](std::string_view piece) {
                                 run.streamed += piece;
                                 ++run.pieces;
                               });
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (r.ok()) run.result = std::move(*r);
    return run;
  }

  static Engine* engine_;
};
Engine* EngineSamplingTest::engine_ = nullptr;

TEST_F(EngineSamplingTest, TextIsExactlyTheStreamedPieces) {
  const Run run = Generate(Greedy(16));
  EXPECT_EQ(run.result.tokens.size(), 16u);
  EXPECT_EQ(run.result.finish_reason, "length");
  EXPECT_FALSE(run.result.text.empty());
  EXPECT_EQ(run.result.text, run.streamed);
}

TEST_F(EngineSamplingTest, StopStringCutsTheOutputBeforeIt) {
  const Run full = Generate(Greedy(16));
  const std::string& text = full.result.text;
  ASSERT_GE(text.size(), 6u) << text;
  // Two bytes from the middle of the unconstrained output; the output must end before their
  // first occurrence.
  const std::string stop = text.substr(text.size() / 2, 2);
  const size_t at = text.find(stop);

  SamplingParams p = Greedy(16);
  p.stop = {"never appears \x01", stop};
  const Run cut = Generate(p);
  EXPECT_EQ(cut.result.finish_reason, "stop");
  EXPECT_EQ(cut.result.text, text.substr(0, at));
  EXPECT_EQ(cut.streamed, cut.result.text);
  // Generation ended at the token completing the stop string: a prefix of the full run's tokens.
  ASSERT_LE(cut.result.tokens.size(), full.result.tokens.size());
  EXPECT_TRUE(
      std::equal(cut.result.tokens.begin(), cut.result.tokens.end(), full.result.tokens.begin()));
  EXPECT_LT(cut.result.tokens.size(), full.result.tokens.size());
}

TEST_F(EngineSamplingTest, StopStringNotInTheOutputChangesNothing) {
  const Run full = Generate(Greedy(12));
  SamplingParams p = Greedy(12);
  p.stop = {"\x01\x02\x03 not generated"};
  const Run run = Generate(p);
  EXPECT_EQ(run.result.finish_reason, "length");
  EXPECT_EQ(run.result.tokens, full.result.tokens);
  EXPECT_EQ(run.result.text, full.result.text);
  EXPECT_EQ(run.streamed, full.result.text);
}

TEST_F(EngineSamplingTest, StopTokenIdEndsGenerationRightBeforeIt) {
  const Run full = Generate(Greedy(12));
  ASSERT_EQ(full.result.tokens.size(), 12u);
  const int32_t stop_id = full.result.tokens[2];
  // Greedy may have produced that id earlier; generation ends at its first occurrence.
  const auto first = std::find(full.result.tokens.begin(), full.result.tokens.end(), stop_id);
  const int before = static_cast<int>(first - full.result.tokens.begin());

  SamplingParams p = Greedy(12);
  p.stop_token_ids = {stop_id};
  const Run run = Generate(p);
  EXPECT_EQ(run.result.finish_reason, "stop");
  EXPECT_EQ(run.result.tokens,
            std::vector<int32_t>(full.result.tokens.begin(), full.result.tokens.begin() + before));
  EXPECT_EQ(run.result.text, run.streamed);
  if (before > 0) {
    // The same text as a run that simply stopped after those tokens.
    const Run shorter = Generate(Greedy(before));
    EXPECT_EQ(run.result.text, shorter.result.text);
  } else {
    EXPECT_EQ(run.result.text, "");
  }
}

TEST_F(EngineSamplingTest, StopTokenIdsApplyEvenWithIgnoreEos) {
  const Run full = Generate(Greedy(4));
  SamplingParams p = Greedy(4);  // ignore_eos is set
  p.stop_token_ids = {full.result.tokens[0]};
  const Run run = Generate(p);
  EXPECT_EQ(run.result.finish_reason, "stop");
  EXPECT_TRUE(run.result.tokens.empty());
  EXPECT_EQ(run.result.text, "");
  EXPECT_EQ(run.pieces, 0);
}

// With a window over everything (penalty_last_n = -1) a repetition penalty r > 1 only lowers the
// logits of tokens already seen, so greedy keeps the unpenalised choice as long as that choice is
// new, and must change it at the first step whose unpenalised choice was seen before (given a
// large r and any unseen token with a higher penalised logit).
TEST_F(EngineSamplingTest, RepetitionPenaltyChangesGreedyAtTheFirstRepeat) {
  // On this prompt the tiny model's first greedy token is new and then repeats at once.
  const std::string prompt = "hi";
  const std::vector<int32_t> prompt_ids = engine_->Tokenize(prompt, /*add_bos=*/true);
  const Run plain = Generate(Greedy(32), prompt);
  const std::vector<int32_t>& g = plain.result.tokens;
  std::vector<int32_t> seen = prompt_ids;
  int repeat = -1;
  for (size_t i = 0; i < g.size() && repeat < 0; ++i) {
    if (std::find(seen.begin(), seen.end(), g[i]) != seen.end()) repeat = static_cast<int>(i);
    seen.push_back(g[i]);
  }
  ASSERT_GE(repeat, 0) << "greedy never repeated a token in 32 steps; pick another prompt";

  SamplingParams p = Greedy(32);
  p.repetition_penalty = 1000.0f;
  p.penalty_last_n = -1;
  const Run penalised = Generate(p, prompt);
  ASSERT_GT(static_cast<int>(penalised.result.tokens.size()), repeat);
  for (int i = 0; i < repeat; ++i) EXPECT_EQ(penalised.result.tokens[i], g[i]) << "step " << i;
  EXPECT_NE(penalised.result.tokens[repeat], g[repeat]) << "step " << repeat;
}

TEST_F(EngineSamplingTest, PenaltiesAtTheirNeutralValuesChangeNothing) {
  const Run plain = Generate(Greedy(10));
  SamplingParams p = Greedy(10);
  p.repetition_penalty = 1.0f;
  p.penalty_last_n = -1;
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  p.min_p = 0.0f;
  EXPECT_EQ(Generate(p).result.tokens, plain.result.tokens);
}

TEST_F(EngineSamplingTest, SameSeedSameTokensOtherSeedsDiffer) {
  auto sampled = [](uint64_t seed) {
    SamplingParams p = Greedy(8);
    p.temperature = 0.8f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.seed = seed;
    return Generate(p).result.tokens;
  };
  const std::vector<int32_t> a = sampled(7);
  EXPECT_EQ(a.size(), 8u);
  EXPECT_EQ(sampled(7), a);
  int differ = 0;
  for (uint64_t seed : {1, 2, 3}) differ += sampled(seed) != a;
  // Three other seeds all drawing the same 8 tokens would mean the seed is ignored.
  EXPECT_GE(differ, 1);
}

TEST_F(EngineSamplingTest, InvalidSettingsAreRejectedNamingTheField) {
  struct Case {
    const char* field;
    SamplingParams params;
  };
  std::vector<Case> cases;
  cases.push_back({"temperature", Greedy(4)});
  cases.back().params.temperature = 3.0f;
  cases.push_back({"top_p", Greedy(4)});
  cases.back().params.top_p = 0.0f;
  cases.push_back({"min_p", Greedy(4)});
  cases.back().params.min_p = 1.5f;
  cases.push_back({"repetition_penalty", Greedy(4)});
  cases.back().params.repetition_penalty = 0.0f;
  cases.push_back({"presence_penalty", Greedy(4)});
  cases.back().params.presence_penalty = 2.5f;
  cases.push_back({"stop", Greedy(4)});
  cases.back().params.stop = {"a", "b", "c", "d", "e"};
  cases.push_back({"stop", Greedy(4)});
  cases.back().params.stop = {""};
  cases.push_back({"stop_token_ids", Greedy(4)});
  cases.back().params.stop_token_ids = {5, engine_->vocab_size()};
  cases.push_back({"stop_token_ids", Greedy(4)});
  cases.back().params.stop_token_ids = {-1};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    int pieces = 0;
    auto r = engine_->Generate(engine_->Tokenize("the", /*add_bos=*/true), c.params,
                               [&pieces](std::string_view) { ++pieces; });
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
    EXPECT_EQ(pieces, 0);
  }
}

}  // namespace
}  // namespace uniprefill
