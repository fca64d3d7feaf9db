#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace uniprefill {
namespace {

struct Streamed {
  std::vector<std::string> emits;  // one per piece
  std::string text;                // all emits, plus Flush() when no stop matched
  bool stopped = false;
  int stop_index = -1;
};

Streamed Stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Streamed r;
  for (const std::string& p : pieces) {
    StopResult s = m.Push(p);
    r.emits.push_back(s.emit);
    r.text += s.emit;
    r.stopped = s.stopped;
    r.stop_index = s.stop_index;
  }
  r.text += m.Flush();
  return r;
}

// True when `s` does not end inside a multibyte UTF-8 character.
bool EndsOnCharBoundary(const std::string& s) {
  for (size_t i = 1; i <= std::min<size_t>(3, s.size()); ++i) {
    const auto b = static_cast<unsigned char>(s[s.size() - i]);
    if ((b & 0xC0) == 0x80) continue;
    const size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return len <= i;
  }
  return true;
}

TEST(StopMatcherTest, StopStringSplitAcrossPieces) {
  const Streamed r = Stream({"lo w"}, {"Hel", "lo wor", "ld"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"He", "l", ""}));  // "l" of "Hel" waited
  EXPECT_EQ(r.text, "Hel");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 0);
}

TEST(StopMatcherTest, StopStringSpreadOverManyPieces) {
  const Streamed r = Stream({"<END>"}, {"ok <", "E", "N", "D", ">", " more"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"ok ", "", "", "", "", ""}));
  EXPECT_EQ(r.text, "ok ");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, NearMissIsNotAStopAndIsReleased) {
  const Streamed r = Stream({"lo w"}, {"Hel", "lo", "-wo", "rld"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"He", "l", "lo-wo", "rld"}));
  EXPECT_EQ(r.text, "Hello-world");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.stop_index, -1);
}

TEST(StopMatcherTest, HeldBackTextIsReleasedByFlush) {
  StopMatcher m({"STOP"});
  const StopResult s = m.Push("abc ST");
  EXPECT_EQ(s.emit, "abc ");
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(m.Flush(), "ST");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, ShorterStopCompletingFirstWins) {
  // "bc" completes at the 3rd byte, "abcd" only at the 4th.
  for (const auto& pieces : std::vector<std::vector<std::string>>{{"a", "b", "c", "d"}, {"abcd"}}) {
    const Streamed r = Stream({"abcd", "bc"}, pieces);
    EXPECT_EQ(r.text, "a");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.stop_index, 1);
  }
}

TEST(StopMatcherTest, LongerStopCompletingFirstWins) {
  const Streamed r = Stream({"bar baz", "foo bar"}, {"foo bar baz"});
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.stop_index, 1);
}

TEST(StopMatcherTest, StopsEndingTogetherCutAtTheEarlierStart) {
  const Streamed r = Stream({"bc", "abc"}, {"xa", "bc"});
  EXPECT_EQ(r.text, "x");
  EXPECT_EQ(r.stop_index, 1);
}

TEST(StopMatcherTest, OverlappingCandidatesAreFound) {
  // "aaa" could start a match at each position: the hold-back keeps the longest candidate.
  const Streamed r = Stream({"aab"}, {"a", "a", "a", "b"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(r.text, "a");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, StopAtTheVeryStartEmitsNothing) {
  const Streamed r = Stream({"Hi"}, {"Hi there"});
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, NothingAfterAStop) {
  StopMatcher m({"."});
  EXPECT_EQ(m.Push("One. Two").emit, "One");
  const StopResult later = m.Push("three");
  EXPECT_EQ(later.emit, "");
  EXPECT_TRUE(later.stopped);
  EXPECT_EQ(later.stop_index, 0);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, NoStopStringsPassesTextThrough) {
  const Streamed r = Stream({}, {"a", "bc", ""});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  const Streamed r = Stream({"", "z"}, {"ab", "cz"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(r.stop_index, 1);
}

TEST(StopMatcherTest, NeverSplitsAMultibyteCharacter) {
  // "é" = C3 A9 split over two pieces; "日" = E6 97 A5 over three; "😀" = F0 9F 98 80 over four.
  EXPECT_EQ(Stream({}, {"caf\xC3", "\xA9 ok"}).emits,
            (std::vector<std::string>{"caf", "\xC3\xA9 ok"}));
  EXPECT_EQ(Stream({"!"}, {"\xE6", "\x97", "\xA5x"}).emits,
            (std::vector<std::string>{"", "", "\xE6\x97\xA5x"}));
  EXPECT_EQ(Stream({}, {"\xF0", "\x9F", "\x98", "\x80"}).emits,
            (std::vector<std::string>{"", "", "", "\xF0\x9F\x98\x80"}));
}

TEST(StopMatcherTest, MultibyteStopStringSplitMidCharacter) {
  // Stop "本当" (E6 9C AC E5 BD 93) fed one byte at a time after "日".
  const std::string text = "\xE6\x97\xA5\xE6\x9C\xAC\xE5\xBD\x93\xE3\x81\xAB";
  std::vector<std::string> bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  const Streamed r = Stream({"\xE6\x9C\xAC\xE5\xBD\x93"}, bytes);
  EXPECT_EQ(r.text, "\xE6\x97\xA5");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcherTest, InvalidUtf8IsNotHeldForever) {
  const Streamed r = Stream({}, {"a\x80", "\xFFz"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"a\x80", "\xFFz"}));
}

// The text up to the first stop to complete, reading byte by byte: an independent reference.
std::string Reference(const std::vector<std::string>& stops, const std::string& text,
                      bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best = std::string::npos;
    for (const std::string& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        best = std::min(best, end - s.size());
      }
    }
    if (best != std::string::npos) {
      *stopped = true;
      return text.substr(0, best);
    }
  }
  *stopped = false;
  return text;
}

TEST(StopMatcherTest, ResultDoesNotDependOnHowTheTextIsSplit) {
  std::mt19937 gen(1234);
  const std::vector<std::string> alphabet = {"a", "b", " ", "\xC3\xA9", "\xE6\x97\xA5"};
  auto random_text = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += alphabet[gen() % alphabet.size()];
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    const int n_stops = static_cast<int>(gen() % 4);
    for (int i = 0; i < n_stops; ++i) stops.push_back(random_text(1 + gen() % 3));
    const std::string text = random_text(static_cast<int>(gen() % 12));
    std::vector<std::string> pieces;  // cut anywhere, even inside a character
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min<size_t>(text.size() - at, 1 + gen() % 4);
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    bool stopped = false;
    const std::string expected = Reference(stops, text, &stopped);
    const Streamed r = Stream(stops, pieces);
    ASSERT_EQ(r.text, expected) << "trial " << trial;
    ASSERT_EQ(r.stopped, stopped) << "trial " << trial;
    for (const std::string& e : r.emits) ASSERT_TRUE(EndsOnCharBoundary(e)) << "trial " << trial;
  }
}

TEST(StopMatcherTest, ValidateStopStrings) {
  EXPECT_TRUE(ValidateStopStrings(std::vector<std::string>{}).ok());
  EXPECT_TRUE(ValidateStopStrings(std::vector<std::string>{"a", "b", "c", "d"}).ok());
  const Status too_many = ValidateStopStrings(std::vector<std::string>{"a", "b", "c", "d", "e"});
  EXPECT_EQ(too_many.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(too_many.message(), "stop may hold at most 4 strings, got 5");
  const Status empty = ValidateStopStrings(std::vector<std::string>{"a", ""});
  EXPECT_EQ(empty.message(), "stop[1] is empty; remove it");
}

TEST(StopMatcherTest, ValidateStopTokenIds) {
  EXPECT_TRUE(ValidateStopTokenIds(std::vector<int32_t>{0, 99}, 100).ok());
  EXPECT_EQ(ValidateStopTokenIds(std::vector<int32_t>{5, 100}, 100).message(),
            "stop_token_ids[1] = 100 is not a token id of this model (0 to 99)");
  EXPECT_FALSE(ValidateStopTokenIds(std::vector<int32_t>{-1}, 100).ok());
}

TEST(StopMatcherTest, StopTokensMatchOnlyTheirIds) {
  const StopTokens stops{{1, 106}};
  EXPECT_TRUE(stops.IsStopToken(1));
  EXPECT_TRUE(stops.IsStopToken(106));
  EXPECT_FALSE(stops.IsStopToken(2));
  EXPECT_FALSE(StopTokens{}.IsStopToken(0));
}

}  // namespace
}  // namespace uniprefill
