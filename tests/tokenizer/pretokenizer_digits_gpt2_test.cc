// The SmolLM pre-tokenizer (PreTokenizerKind::kDigitsGpt2): every \p{N} character alone, then the
// GPT-2 regex on each run between digits, each run treated as a whole text (as `tokenizers` runs
// its Sequence and llama.cpp its list of regexes). Expectations follow the regex by hand; the
// real vocabulary's ids are checked against llama.cpp in smollm2_tokenizer_golden_test.cc.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace uniprefill::tokenizer {
namespace {

using Strings = std::vector<std::string>;

Strings Split(std::string_view text) {
  std::vector<std::string_view> views;
  PreTokenize(PreTokenizerKind::kDigitsGpt2, text, &views);
  return Strings(views.begin(), views.end());
}

TEST(DigitsGpt2PreTokenizer, EveryDigitIsAlone) {
  EXPECT_EQ(Split("2026"), (Strings{"2", "0", "2", "6"}));
  EXPECT_EQ(Split("x\u00b2\u00b3"), (Strings{"x", "\u00b2", "\u00b3"}));  // any \p{N}
  EXPECT_EQ(Split("v1.2"), (Strings{"v", "1", ".", "2"}));
}

TEST(DigitsGpt2PreTokenizer, ASpaceBeforeADigitEndsItsRunAlone) {
  // The digit split comes first, so " 1" never reaches the " ?\p{N}+" alternative.
  EXPECT_EQ(Split("Hello world! 123"),
            (Strings{"Hello", " world", "!", " ", "1", "2", "3"}));
  EXPECT_EQ(Split("a  1"), (Strings{"a", "  ", "1"}));
}

TEST(DigitsGpt2PreTokenizer, ContractionsAreCaseSensitive) {
  EXPECT_EQ(Split("it's"), (Strings{"it", "'s"}));
  EXPECT_EQ(Split("IT'S"), (Strings{"IT", "'", "S"}));
  EXPECT_EQ(Split("we've they'll I'm"),
            (Strings{"we", "'ve", " they", "'ll", " I", "'m"}));
  EXPECT_EQ(Split("'hello"), (Strings{"'", "hello"}));
}

TEST(DigitsGpt2PreTokenizer, OnlyAnAsciiSpaceJoinsTheNextWord) {
  EXPECT_EQ(Split("a b"), (Strings{"a", " b"}));
  EXPECT_EQ(Split("a\tb"), (Strings{"a", "\t", "b"}));
  EXPECT_EQ(Split("a\u00a0b"), (Strings{"a", "\u00a0", "b"}));
  EXPECT_EQ(Split("a !?"), (Strings{"a", " !?"}));
  // Letters and punctuation do not mix (unlike Llama 3's [^\r\n\p{L}\p{N}]?\p{L}+).
  EXPECT_EQ(Split("(abc)"), (Strings{"(", "abc", ")"}));
}

TEST(DigitsGpt2PreTokenizer, WhitespaceRunsLeaveTheirLastCharacterToTheNextToken) {
  EXPECT_EQ(Split("  multiple   spaces"), (Strings{" ", " multiple", "  ", " spaces"}));
  EXPECT_EQ(Split("x  "), (Strings{"x", "  "}));
  // Newlines are whitespace like any other (no \s*[\r\n]+ alternative).
  EXPECT_EQ(Split("a\n\nb"), (Strings{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("a \n b"), (Strings{"a", " \n", " b"}));
  EXPECT_EQ(Split("\n"), (Strings{"\n"}));
}

TEST(DigitsGpt2PreTokenizer, CoversAnyBytesExactly) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text(rng() % 40, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 4 == 0 ? "1 a\n'"[rng() % 5] : rng() % 256);
    std::string joined;
    for (const std::string& piece : Split(text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace uniprefill::tokenizer
