// RULER scoring against hand-made cases of RULER's own definitions (postprocess_pred,
// string_match_all, string_match_part in scripts/eval/synthetic/constants.py).
#include "eval/ruler_scoring.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace uniprefill::eval {
namespace {

TEST(RulerScoring, PostprocessReplacesControlCharactersAndStrips) {
  EXPECT_EQ(PostprocessPrediction("  1234567.\n"), "1234567.");
  EXPECT_EQ(PostprocessPrediction("a\tb\x01" "c\x1f"), "a\nb\nc");
  EXPECT_EQ(PostprocessPrediction(std::string("x\0y", 3)), "x\ny");
  EXPECT_EQ(PostprocessPrediction("\x02\x03 answer \x04"), "answer");
  // DEL (0x7f) is not in [\x00-\x1f].
  EXPECT_EQ(PostprocessPrediction("keep\177del"), "keep\177del");
  EXPECT_EQ(PostprocessPrediction(" \n\t "), "");
  EXPECT_EQ(PostprocessPrediction(""), "");
}

TEST(RulerScoring, MatchAllGivesTheFractionOfReferencesFound) {
  const std::vector<std::string> refs = {"1111111", "2222222", "3333333", "4444444"};
  EXPECT_DOUBLE_EQ(StringMatchAll("1111111, 2222222, 3333333 and 4444444", refs), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("4444444 and 2222222", refs), 0.5);
  EXPECT_DOUBLE_EQ(StringMatchAll("3333333", refs), 0.25);
  EXPECT_DOUBLE_EQ(StringMatchAll("none of them", refs), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("", refs), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("anything", {}), 0.0);
}

TEST(RulerScoring, MatchIsACaseInsensitiveSubstringTest) {
  EXPECT_DOUBLE_EQ(StringMatchAll("the variables are abcde, FGHIJ", {"ABCDE", "fghij"}), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("xx1234567yy", {"1234567"}), 1.0);  // substring, no word bounds
  EXPECT_DOUBLE_EQ(StringMatchAll("123456", {"1234567"}), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("Fearless-Dragon", {"fearless-dragon"}), 1.0);
}

TEST(RulerScoring, MatchPartIsOneWhenAnyReferenceIsFound) {
  const std::vector<std::string> refs = {"paris", "the capital of france"};
  EXPECT_DOUBLE_EQ(StringMatchPart("It is Paris.", refs), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("The capital of France and Paris", refs), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("London", refs), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("", refs), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("x", {}), 0.0);
}

TEST(RulerScoring, ScoreUsesTheSampleMetricAfterPostprocessing) {
  RulerSample s;
  s.references = {"alpha", "beta", "gamma", "delta"};
  s.metric = RulerMetric::kStringMatchAll;
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, " Alpha, BETA, gamma, delta."), 100.0);
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, " alpha and delta"), 50.0);
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, "gamma"), 25.0);
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, ""), 0.0);
  // A control character splitting a reference breaks it: RULER turns it into a newline.
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, "al\x01pha beta"), 25.0);
  s.metric = RulerMetric::kStringMatchPart;
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, " alpha and delta"), 100.0);
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, "omega"), 0.0);
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, ""), 0.0);
}

TEST(RulerScoring, ScoresAGeneratedSample) {
  // The references of a niah sample, answered in the model's usual style.
  RulerSample s;
  s.references = {"4830211"};
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, " 4830211.<end_of_turn>"), 100.0);
  EXPECT_DOUBLE_EQ(ScoreRulerPrediction(s, " 4830212."), 0.0);
}

}  // namespace
}  // namespace uniprefill::eval
