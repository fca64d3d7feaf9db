// Scoring of the long-document QA family: SQuAD's normalisation, the answer cut out of a
// continuation, exact match and the looser "contains" diagnostic.
#include "eval/qa_scoring.h"

#include <gtest/gtest.h>

namespace uniprefill::eval {
namespace {

TEST(QaScoring, NormalisationFoldsCaseDropsPunctuationAndArticles) {
  EXPECT_EQ(NormalizeAnswer("The Violet Room."), "violet room");
  EXPECT_EQ(NormalizeAnswer("  an   Amber-Fox! "), "amberfox");
  EXPECT_EQ(NormalizeAnswer("A day, the THURSDAY"), "day thursday");
  EXPECT_EQ(NormalizeAnswer("Theatre and Anatomy"), "theatre and anatomy");  // words, not prefixes
  EXPECT_EQ(NormalizeAnswer("..."), "");
}

TEST(QaScoring, TheAnswerIsTheFirstSentenceOfTheFirstLine) {
  EXPECT_EQ(ExtractAnswer(" Bluefinch."), "Bluefinch.");
  EXPECT_EQ(ExtractAnswer(" Bluefinch. It was chosen in 2019."), "Bluefinch.");
  EXPECT_EQ(ExtractAnswer("\n Victor Moreau\nsecond line"), "Victor Moreau");
  EXPECT_EQ(ExtractAnswer(" pier 3.5 metres"), "pier 3.5 metres");  // a '.' inside a number stays
  EXPECT_EQ(ExtractAnswer("Mondays? No, Fridays."), "Mondays?");
  EXPECT_EQ(ExtractAnswer(""), "");
}

TEST(QaScoring, ExactMatchAfterNormalisation) {
  EXPECT_TRUE(QaExactMatch(" Bluefinch.", "Bluefinch"));
  EXPECT_TRUE(QaExactMatch(" the violet room.", "Violet Room"));
  EXPECT_TRUE(QaExactMatch(" 4817. The code was changed last year.", "4817"));
  EXPECT_FALSE(QaExactMatch(" Bluefinch and Amberfox.", "Bluefinch"));
  EXPECT_FALSE(QaExactMatch(" Thursday.", "Thursdays"));
  EXPECT_FALSE(QaExactMatch(" a set of instructions.", "1994"));
  EXPECT_FALSE(QaExactMatch("", ""));  // an empty answer never matches
}

TEST(QaScoring, ContainsMatchesWholeWordsAnywhere) {
  EXPECT_TRUE(QaContainsAnswer(" The code name is Bluefinch, I think.", "Bluefinch"));
  EXPECT_TRUE(QaContainsAnswer(" Victor Moreau.", "Victor Moreau"));
  EXPECT_FALSE(QaContainsAnswer(" Bluefinches.", "Bluefinch"));
  EXPECT_FALSE(QaContainsAnswer(" 48170", "4817"));
  EXPECT_FALSE(QaContainsAnswer(" anything", ""));
}

}  // namespace
}  // namespace uniprefill::eval
