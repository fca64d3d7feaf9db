// Long-document QA samples: determinism, the fact placed once inside the document at the depth
// asked, the question after it, the length fit (with a byte counter, and with SmolLM2's real
// tokenizer and chat template on the license corpus), and the errors for lengths that cannot fit.
#include "eval/qa_tasks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "eval/qa_corpus.h"
#include "testing/required_asset.h"
#include "uniprefill/engine.h"

namespace uniprefill::eval {
namespace {

const std::string kSmolLm2 =
    std::string(UP_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";

// About four bytes a token plus a chat-template overhead.
int ByteCounter(const std::string& input, const std::string& answer_prefix) {
  return static_cast<int>((input.size() + answer_prefix.size()) / 4) + 10;
}

// ~60 KB of distinct sentences in paragraphs of five.
std::vector<CorpusPiece> Pieces() {
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    text += "Clause " + std::to_string(i) + " of the agreement covers copying and changes. ";
    if (i % 5 == 4) text += "\n\n";
  }
  return SplitCorpus(text);
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

QaSample MustMake(const std::vector<CorpusPiece>& pieces, int target, double depth, uint64_t seed,
                  const PromptTokenCounter& count = ByteCounter) {
  Result<QaSample> s = MakeQaSample(pieces, target, depth, seed, count);
  EXPECT_TRUE(s.ok()) << target << ": " << s.status().message();
  return s.ok() ? std::move(s).value() : QaSample{};
}

// The checks every sample must pass, whatever the counter.
void ExpectWellFormed(const QaSample& s) {
  EXPECT_EQ(Occurrences(s.input, s.fact.statement), 1u);
  EXPECT_GE(s.fact_offset, s.document_begin);
  EXPECT_LE(s.fact_offset + s.fact.statement.size(), s.document_end);
  EXPECT_EQ(s.input.compare(s.fact_offset, s.fact.statement.size(), s.fact.statement), 0);
  EXPECT_EQ(Occurrences(s.input, s.fact.answer_prefix), 1u);  // only the fact names the subject
  const size_t question = s.input.find("Question: " + s.fact.question);
  EXPECT_NE(question, std::string::npos);
  EXPECT_GE(question, s.document_end);
  EXPECT_EQ(s.answer_prefix, s.fact.answer_prefix);
  EXPECT_LE(s.prompt_tokens + kQaMaxNewTokens, s.target_tokens);
}

TEST(QaTasks, DeterministicForASeedAndDifferentAcrossSeeds) {
  const QaSample a = MustMake(Pieces(), 2048, 0.5, 11), b = MustMake(Pieces(), 2048, 0.5, 11);
  const QaSample c = MustMake(Pieces(), 2048, 0.5, 12);
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.fact.statement, b.fact.statement);
  EXPECT_NE(a.input, c.input);
}

TEST(QaTasks, FitsTheTargetAndPlacesTheFactAtTheDepthAsked) {
  for (int target : {512, 1024, 4096, 8192}) {
    for (double depth : {0.0, 0.3, 0.5, 0.9, 1.0}) {
      SCOPED_TRACE(std::to_string(target) + " at " + std::to_string(depth));
      const QaSample s = MustMake(Pieces(), target, depth, 3 + target);
      ExpectWellFormed(s);
      // One piece is ~14 tokens here, so the fit is within 3% even at 512.
      EXPECT_GE(s.prompt_tokens + kQaMaxNewTokens, 0.97 * target);
      EXPECT_NEAR(s.depth, depth, 0.03);
      EXPECT_EQ(s.depth_asked, depth);
    }
  }
}

TEST(QaTasks, TooShortATargetOrTooSmallACorpusIsAnError) {
  Result<QaSample> tiny = MakeQaSample(Pieces(), 40, 0.5, 1, ByteCounter);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(tiny.status().message().find("at least"), std::string::npos);
  Result<QaSample> big = MakeQaSample(Pieces(), 100000, 0.5, 1, ByteCounter);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("too short for length 100000"), std::string::npos);
  EXPECT_FALSE(MakeQaSample({}, 1024, 0.5, 1, ByteCounter).ok());
}

TEST(QaTasks, FitsWithSmolLm2sTokenizerAndChatTemplateOnTheLicenseCorpus) {
  UP_REQUIRE_ASSET(kSmolLm2, "SmolLM2-135M-Instruct");
  UP_REQUIRE_ASSET("/usr/share/common-licenses/GPL-3", "The license corpus (Debian base-files)");
  EngineOptions eo;
  eo.model_path = kSmolLm2;
  eo.threads = 1;
  Result<std::unique_ptr<Engine>> engine = Engine::Load(eo);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  ASSERT_TRUE((*engine)->has_chat_template());
  Result<std::string> corpus = LoadQaCorpus("licenses", {});
  ASSERT_TRUE(corpus.ok()) << corpus.status().message();
  const std::vector<CorpusPiece> pieces = SplitCorpus(*corpus);
  const Engine& e = **engine;
  PromptTokenCounter count = [&](const std::string& input, const std::string& prefix) {
    return static_cast<int>(e.Tokenize(e.FormatChat({{"user", input}}) + prefix, true).size());
  };
  for (int target : {1024, 2048, 4096}) {
    for (double depth : {0.1, 0.5, 0.9}) {
      SCOPED_TRACE(std::to_string(target) + " at " + std::to_string(depth));
      const QaSample s = MustMake(pieces, target, depth, 100 + target, count);
      ExpectWellFormed(s);
      // A piece is at most kMaxPieceWords words (~40 tokens): within 5% at 1K.
      EXPECT_GE(s.prompt_tokens + kQaMaxNewTokens, 0.95 * target);
      // License sentences run long: boundaries may sit up to ~one sentence from the depth.
      EXPECT_NEAR(s.depth, depth, 0.1);
    }
  }
}

}  // namespace
}  // namespace uniprefill::eval
