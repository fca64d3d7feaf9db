// SpmTokenizer and Vocab on tiny hand-made vocabularies: one behaviour per test.
#include "tokenizer/spm_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace uniprefill::tokenizer {
namespace {

constexpr int32_t kNormal = static_cast<int32_t>(TokenType::kNormal);
constexpr int32_t kControl = static_cast<int32_t>(TokenType::kControl);
constexpr int32_t kUserDefined = static_cast<int32_t>(TokenType::kUserDefined);
constexpr int32_t kByte = static_cast<int32_t>(TokenType::kByte);

struct Tok {
  std::string text;
  float score = 0.0f;
  int32_t type = kNormal;
};

// Ids: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, then `extra` in order, then (optionally) the 256 byte
// tokens <0x00>..<0xFF>.
VocabSpec MakeSpec(const std::vector<Tok>& extra, bool with_bytes = true) {
  VocabSpec spec;
  const std::vector<Tok> base = {
      {"<pad>", 0, kControl}, {"<eos>", 0, kControl}, {"<bos>", 0, kControl},
      {"<unk>", 0, static_cast<int32_t>(TokenType::kUnknown)}};
  for (const auto* list : {&base, &extra}) {
    for (const Tok& t : *list) {
      spec.tokens.push_back(t.text);
      spec.scores.push_back(t.score);
      spec.types.push_back(t.type);
    }
  }
  if (with_bytes) {
    static const char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      spec.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
      spec.scores.push_back(0.0f);
      spec.types.push_back(kByte);
    }
  }
  spec.pad = 0;
  spec.eos = 1;
  spec.bos = 2;
  spec.unk = 3;
  spec.add_bos = true;
  return spec;
}

SpmTokenizer MakeTokenizer(VocabSpec spec) {
  Result<Vocab> vocab = Vocab::Create(std::move(spec));
  EXPECT_TRUE(vocab.ok()) << vocab.status().message();
  Result<SpmTokenizer> tok = SpmTokenizer::FromVocab(std::move(vocab).value());
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return std::move(tok).value();
}

// Ids -> texts, so that expectations read as tokens.
std::vector<std::string> Texts(const SpmTokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.vocab().text(id));
  return out;
}

using Strings = std::vector<std::string>;

TEST(SpmTokenizer, MergesTheHighestScoringPairFirst) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"b"}, {"c"}, {"ab", -2}, {"bc", -1}}));
  EXPECT_EQ(Texts(tok, tok.Encode("abc", false, true)), (Strings{"a", "bc"}));
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"b"}, {"c"}, {"ab", -1}, {"bc", -1}}));
  EXPECT_EQ(Texts(tok, tok.Encode("abc", false, true)), (Strings{"ab", "c"}));
}

TEST(SpmTokenizer, MergesChainThroughIntermediateTokens) {
  SpmTokenizer tok =
      MakeTokenizer(MakeSpec({{"a"}, {"b"}, {"c"}, {"ab", -3}, {"abc", -5}, {"bc", -4}}));
  EXPECT_EQ(Texts(tok, tok.Encode("abcab", false, true)), (Strings{"abc", "ab"}));
}

TEST(SpmTokenizer, TokenWithoutMergePathIsNotReached) {
  // "abc" is in the vocab but neither "ab" nor "bc" is, so SPM never forms it.
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"b"}, {"c"}, {"abc", 0}}));
  EXPECT_EQ(Texts(tok, tok.Encode("abc", false, true)), (Strings{"a", "b", "c"}));
}

TEST(SpmTokenizer, SpacesBecomeTheU2581Marker) {
  SpmTokenizer tok =
      MakeTokenizer(MakeSpec({{"a"}, {"b"}, {"\xE2\x96\x81"}, {"\xE2\x96\x81" "b", -1}}));
  EXPECT_EQ(Texts(tok, tok.Encode("a b", false, true)), (Strings{"a", "\xE2\x96\x81" "b"}));
}

TEST(SpmTokenizer, UnknownCharactersFallBackToByteTokens) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}}));
  EXPECT_EQ(Texts(tok, tok.Encode("a\xC3\xA9", false, true)), (Strings{"a", "<0xC3>", "<0xA9>"}));
}

TEST(SpmTokenizer, InvalidLeadByteSwallowsTheNextByteLikeLlamaCpp) {
  // 0xC3 announces a 2-byte character, so "\xC3" "a" is one (unknown) character: both bytes fall
  // back to byte tokens even though "a" is in the vocab.
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}}));
  EXPECT_EQ(Texts(tok, tok.Encode("\xC3" "aa", false, true)), (Strings{"<0xC3>", "<0x61>", "a"}));
  // A stray continuation byte is a 1-byte character.
  EXPECT_EQ(Texts(tok, tok.Encode("\x80" "a", false, true)), (Strings{"<0x80>", "a"}));
  // A truncated sequence at the end is shortened to what is left.
  EXPECT_EQ(Texts(tok, tok.Encode("a\xE2\x96", false, true)), (Strings{"a", "<0xE2>", "<0x96>"}));
}

TEST(SpmTokenizer, AddSpecialPrependsBos) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}}));
  EXPECT_EQ(Texts(tok, tok.Encode("a", true, true)), (Strings{"<bos>", "a"}));
  EXPECT_EQ(Texts(tok, tok.Encode("", true, true)), (Strings{"<bos>"}));
  EXPECT_TRUE(tok.Encode("", false, true).empty());
}

TEST(SpmTokenizer, AddSpecialAppendsEosWhenTheVocabSaysSo) {
  VocabSpec spec = MakeSpec({{"a"}});
  spec.add_bos = false;
  spec.add_eos = true;
  SpmTokenizer tok = MakeTokenizer(std::move(spec));
  EXPECT_EQ(Texts(tok, tok.Encode("a", true, true)), (Strings{"a", "<eos>"}));
}

TEST(SpmTokenizer, ControlTokensAreSplitOnlyWithParseSpecial) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"<t>", 0, kControl}}));
  EXPECT_EQ(Texts(tok, tok.Encode("a<t>a", false, true)), (Strings{"a", "<t>", "a"}));
  EXPECT_EQ(Texts(tok, tok.Encode("a<t>a", false, false)),
            (Strings{"a", "<0x3C>", "<0x74>", "<0x3E>", "a"}));
}

TEST(SpmTokenizer, UserDefinedTokensAreSplitEvenWithoutParseSpecial) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"\xE2\x96\x81"}, {"  ", 0, kUserDefined}}));
  for (bool parse_special : {true, false}) {
    EXPECT_EQ(Texts(tok, tok.Encode("a  a a", false, parse_special)),
              (Strings{"a", "  ", "a", "\xE2\x96\x81", "a"}));
  }
}

TEST(SpmTokenizer, LongerSpecialTokensClaimTextFirst) {
  // llama.cpp splits the longest special tokens out first, not left to right.
  SpmTokenizer tok = MakeTokenizer(
      MakeSpec({{"a"}, {"d"}, {"ab", 0, kUserDefined}, {"bcd", 0, kUserDefined}}));
  EXPECT_EQ(Texts(tok, tok.Encode("abcd", false, true)), (Strings{"a", "bcd"}));
  EXPECT_EQ(Texts(tok, tok.Encode("abab", false, true)), (Strings{"ab", "ab"}));
}

TEST(SpmTokenizer, SpecialTokenMatchesDoNotOverlap) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"aa", 0, kUserDefined}}));
  EXPECT_EQ(Texts(tok, tok.Encode("aaaaa", false, true)), (Strings{"aa", "aa", "a"}));
}

TEST(SpmTokenizer, SpacePrefixGoesOnFirstFragmentAndAfterSpecials) {
  VocabSpec spec = MakeSpec({{"a"}, {"\xE2\x96\x81" "a", -1}, {"\xE2\x96\x81"}, {"<t>", 0, kControl}});
  spec.add_space_prefix = true;
  SpmTokenizer tok = MakeTokenizer(std::move(spec));
  EXPECT_EQ(Texts(tok, tok.Encode("a<t>a", true, true)),
            (Strings{"<bos>", "\xE2\x96\x81" "a", "<t>", "\xE2\x96\x81" "a"}));
}

TEST(SpmTokenizer, LongInputWithoutSpacesIsFast) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}, {"aa", -1}, {"aaaa", -2}, {"b"}}));
  std::string text(200000, 'a');
  text += "b";
  const std::vector<int32_t> ids = tok.Encode(text, false, true);
  ASSERT_EQ(ids.size(), 50001u);
  EXPECT_EQ(tok.vocab().text(ids.front()), "aaaa");
  EXPECT_EQ(tok.vocab().text(ids.back()), "b");
}

TEST(SpmTokenizerDecode, RendersPiecesBytesAndUserDefinedTokens) {
  SpmTokenizer tok = MakeTokenizer(
      MakeSpec({{"a"}, {"\xE2\x96\x81" "b"}, {"  ", 0, kUserDefined}, {"<t>", 0, kControl}}));
  const std::vector<int32_t> ids = tok.Encode("a b  <t>\xC3\xA9", true, true);
  EXPECT_EQ(tok.Decode(ids), "a b  \xC3\xA9");
  EXPECT_EQ(tok.Decode(ids, {.remove_special = false, .render_special = true}),
            "<bos>a b  <t>\xC3\xA9");
  EXPECT_EQ(tok.Decode(ids, {.remove_special = true, .render_special = true}),
            "a b  <t>\xC3\xA9");
}

TEST(SpmTokenizerDecode, TokenToPieceKeepsTheLeadingSpace) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"\xE2\x96\x81" "b"}}));
  const int32_t id = tok.vocab().Find("\xE2\x96\x81" "b");
  EXPECT_EQ(tok.TokenToPiece(id), " b");
  EXPECT_EQ(tok.TokenToPiece(2), "");
  EXPECT_EQ(tok.TokenToPiece(2, /*render_special=*/true), "<bos>");
  EXPECT_EQ(tok.TokenToPiece(-5), "");
  EXPECT_EQ(tok.TokenToPiece(1 << 20), "");
}

TEST(SpmTokenizerDecode, SpacePrefixVocabStripsTheFirstSpace) {
  VocabSpec spec = MakeSpec({{"\xE2\x96\x81" "a"}});
  spec.add_space_prefix = true;
  SpmTokenizer tok = MakeTokenizer(std::move(spec));
  const std::vector<int32_t> ids = tok.Encode("a a", false, true);
  EXPECT_EQ(tok.Decode(ids), "a a");
}

TEST(StreamDecoder, HoldsBackIncompleteCharacters) {
  SpmTokenizer tok = MakeTokenizer(MakeSpec({{"a"}}));
  const std::vector<int32_t> ids = tok.Encode("a\xE2\x82\xAC" "a", false, true);  // a, 3 bytes, a
  ASSERT_EQ(ids.size(), 5u);
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.Push(ids[0]), "a");
  EXPECT_EQ(stream.Push(ids[1]), "");
  EXPECT_EQ(stream.Push(ids[2]), "");
  EXPECT_EQ(stream.Push(ids[3]), "\xE2\x82\xAC");
  EXPECT_EQ(stream.Push(ids[4]), "a");
  EXPECT_EQ(stream.Push(ids[1]), "");
  EXPECT_EQ(stream.Finish(), "\xE2");
}

TEST(Vocab, RejectsMismatchedArrayLengths) {
  VocabSpec spec = MakeSpec({{"a"}});
  spec.scores.pop_back();
  Result<Vocab> v = Vocab::Create(spec);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("scores has 260 entries but there are 261 tokens"),
            std::string::npos)
      << v.status().message();
  spec = MakeSpec({{"a"}});
  spec.types.push_back(kNormal);
  EXPECT_FALSE(Vocab::Create(spec).ok());
}

TEST(Vocab, RejectsSpecialIdsOutOfRange) {
  VocabSpec spec = MakeSpec({{"a"}});
  spec.bos = 9999;
  Result<Vocab> v = Vocab::Create(spec);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("bos token id 9999 is out of range"), std::string::npos)
      << v.status().message();
}

TEST(Vocab, RejectsDuplicateTexts) {
  Result<Vocab> v = Vocab::Create(MakeSpec({{"a"}, {"a"}}));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("appears twice"), std::string::npos);
}

TEST(Vocab, RejectsMalformedByteTokens) {
  Result<Vocab> v = Vocab::Create(MakeSpec({{"<0xZZ>", 0, kByte}}, /*with_bytes=*/false));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("<0xXX>"), std::string::npos);
}

TEST(Vocab, RenamesEmptyTokensLikeLlamaCpp) {
  Result<Vocab> v = Vocab::Create(MakeSpec({{""}}));
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->text(4), "[EMPTY_4]");
}

TEST(Vocab, EndOfTurnNamesBecomeControlAndEndGeneration) {
  Result<Vocab> v =
      Vocab::Create(MakeSpec({{"<end_of_turn>", 0, kControl}, {"</s>", 0, kUserDefined}}));
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->eot(), 4);
  EXPECT_TRUE(v->IsEndOfGeneration(1));  // eos
  EXPECT_TRUE(v->IsEndOfGeneration(4));
  EXPECT_TRUE(v->IsEndOfGeneration(5));  // llama.cpp lists "</s>" as an end-of-generation name
  EXPECT_FALSE(v->IsEndOfGeneration(2));
  EXPECT_TRUE(v->attr(5) & kAttrControl);
}

}  // namespace
}  // namespace uniprefill::tokenizer
