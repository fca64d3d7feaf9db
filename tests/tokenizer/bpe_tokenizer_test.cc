// BpeTokenizer, its pre-tokenizer and NFC on tiny hand-made tokenizer.json files: one behaviour
// per test. The real vocabularies are checked in bpe_golden_test.cc.
#include "tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace uniprefill::tokenizer {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte alphabet character for `byte`, UTF-8 encoded.
std::string ByteChar(int byte) {
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (b == byte) {
      std::string s;
      unicode::AppendUtf8(printable ? b : 256 + n, &s);
      return s;
    }
    if (!printable) ++n;
  }
  return {};
}

// A tokenizer.json whose vocab is the 256 byte characters (id = byte value) followed by `extra`
// (ids 256, 257, ...), with the Llama 3 pre-tokenizer and a ByteLevel decoder.
json MakeJson(const Strings& extra, const json& merges, bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + static_cast<int>(i);
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", kLlama3Regex}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                     {"trim_offsets", true}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
            {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
}

json Added(int id, const std::string& content, bool special, bool lstrip = false,
           bool rstrip = false) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", lstrip},
          {"rstrip", rstrip},  {"normalized", false}, {"special", special}};
}

BpeTokenizer Make(const json& j, const std::string& config = {}) {
  Result<BpeTokenizer> tok = BpeTokenizer::FromJsonString(j.dump(), config, "test.json");
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return std::move(tok).value();
}

Strings Texts(const BpeTokenizer& tok, const std::vector<int32_t>& ids) {
  Strings out;
  for (int32_t id : ids) out.push_back(tok.TokenText(id));
  return out;
}

Strings Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> views;
  PreTokenize(kind, text, &views);
  return Strings(views.begin(), views.end());
}

Status LoadError(const json& j) {
  Result<BpeTokenizer> tok = BpeTokenizer::FromJsonString(j.dump(), {}, "bad.json");
  EXPECT_FALSE(tok.ok());
  return tok.ok() ? OkStatus() : tok.status();
}

// ---- byte alphabet, merges ----

TEST(BpeTokenizer, EveryByteMapsToItsOwnAlphabetCharacter) {
  BpeTokenizer tok = Make(MakeJson({}, json::array()));
  EXPECT_EQ(tok.TokenText(' '), "\xC4\xA0");  // U+0120 'Ġ'
  EXPECT_EQ(tok.TokenText('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(tok.TokenText('a'), "a");
  std::string all_bytes;
  std::vector<int32_t> want;
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(tok.TokenToPiece(b), std::string(1, static_cast<char>(b))) << b;
    if (b != '\'' && b != ' ') {  // keep the text free of contractions and space runs
      all_bytes += static_cast<char>(b);
      want.push_back(b);
    }
  }
  EXPECT_EQ(tok.Encode(all_bytes, false, true), want);
}

TEST(BpeTokenizer, MergesTheLowestRankedPairFirst) {
  BpeTokenizer bc_first = Make(MakeJson({"ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(Texts(bc_first, bc_first.Encode("abc", false, true)), (Strings{"a", "bc"}));
  BpeTokenizer ab_first = Make(MakeJson({"ab", "bc"}, {"a b", "b c"}));
  EXPECT_EQ(Texts(ab_first, ab_first.Encode("abc", false, true)), (Strings{"ab", "c"}));
}

TEST(BpeTokenizer, EqualPairsMergeLeftmostFirst) {
  BpeTokenizer tok = Make(MakeJson({"aa"}, {"a a"}));
  EXPECT_EQ(Texts(tok, tok.Encode("aaa", false, true)), (Strings{"aa", "a"}));
  EXPECT_EQ(Texts(tok, tok.Encode("aaaa", false, true)), (Strings{"aa", "aa"}));
}

TEST(BpeTokenizer, MergedSymbolsMergeAgain) {
  BpeTokenizer tok = Make(MakeJson({"ab", "abc", "\xC4\xA0" "abc"}, {"a b", "ab c", "Ġ abc"}));
  EXPECT_EQ(Texts(tok, tok.Encode("abc abc", false, true)), (Strings{"abc", "Ġabc"}));
}

TEST(BpeTokenizer, MergesAcceptPairArrays) {
  BpeTokenizer tok = Make(MakeJson({"ab"}, json::array({json::array({"a", "b"})})));
  EXPECT_EQ(Texts(tok, tok.Encode("ab", false, true)), (Strings{"ab"}));
}

TEST(BpeTokenizer, IgnoreMergesEmitsAWholeVocabWord) {
  // "abc" is in the vocab but no merge makes it.
  BpeTokenizer with = Make(MakeJson({"abc", "ab"}, {"a b"}, /*ignore_merges=*/true));
  EXPECT_EQ(Texts(with, with.Encode("abc", false, true)), (Strings{"abc"}));
  BpeTokenizer without = Make(MakeJson({"abc", "ab"}, {"a b"}, /*ignore_merges=*/false));
  EXPECT_EQ(Texts(without, without.Encode("abc", false, true)), (Strings{"ab", "c"}));
}

TEST(BpeTokenizer, MergesWorkOnTheBytesOfMultiByteCharacters) {
  // "é" is C3 A9 -> alphabet characters "Ã" (U+00C3) and "©" (U+00A9).
  BpeTokenizer tok = Make(MakeJson({"Ã©"}, {"Ã ©"}));
  EXPECT_EQ(Texts(tok, tok.Encode("\xC3\xA9", false, true)), (Strings{"Ã©"}));
  EXPECT_EQ(tok.Decode(tok.Encode("\xC3\xA9", false, true)), "\xC3\xA9");
}

// ---- added tokens ----

TEST(BpeTokenizer, SpecialTokensAreSplitOutBeforePreTokenizing) {
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<|eot_id|>", true)};
  BpeTokenizer tok = Make(j);
  EXPECT_EQ(tok.Encode("hi<|eot_id|>x", false, true), (std::vector<int32_t>{'h', 'i', 256, 'x'}));
  // parse_special = false: the same text is plain bytes ("<|" is one pre-token, etc.).
  const std::vector<int32_t> plain = tok.Encode("<|eot_id|>", false, false);
  EXPECT_EQ(plain.size(), 10u);
  EXPECT_EQ(tok.Decode(plain), "<|eot_id|>");
}

TEST(BpeTokenizer, NonSpecialAddedTokensAreSplitEvenWithoutParseSpecial) {
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<think>", false)};
  BpeTokenizer tok = Make(j);
  EXPECT_EQ(tok.Encode("a<think>", false, false), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(tok.Decode({std::vector<int32_t>{256}}), "<think>");  // not special: always shown
}

TEST(BpeTokenizer, TheLongestAddedTokenAtTheLeftmostPositionWins) {
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<a>", true), Added(257, "<a><b>", true),
                       Added(258, "a><b", true)};
  BpeTokenizer tok = Make(j);
  EXPECT_EQ(tok.Encode("<a><b>", false, true), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.Encode("<a><c>", false, true), (std::vector<int32_t>{256, '<', 'c', '>'}));
}

TEST(BpeTokenizer, LstripAndRstripAbsorbNeighbouringWhitespace) {
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<mask>", true, /*lstrip=*/true, /*rstrip=*/true)};
  BpeTokenizer tok = Make(j);
  EXPECT_EQ(tok.Encode("a  <mask>  b", false, true), (std::vector<int32_t>{'a', 256, 'b'}));
}

TEST(BpeTokenizer, TemplateProcessingAddsBosAndDecodeCanDropIt) {
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<|begin_of_text|>", true), Added(257, "<|eot_id|>", true)};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false},
         {"use_regex", true}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"pair", json::array()},
         {"special_tokens",
          {{"<|begin_of_text|>",
            {{"id", "<|begin_of_text|>"}, {"ids", {256}}, {"tokens", {"<|begin_of_text|>"}}}}}}}}}};
  BpeTokenizer tok = Make(j);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.bos_id(), 256);
  const std::vector<int32_t> ids = tok.Encode("hi<|eot_id|>", true, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'h', 'i', 257}));
  EXPECT_EQ(tok.Encode("hi", false, true), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(tok.Decode(ids), "hi");
  EXPECT_EQ(tok.Decode(ids, {.render_special = true}), "<|begin_of_text|>hi<|eot_id|>");
  EXPECT_EQ(tok.Decode(ids, {.remove_special = true, .render_special = true}), "hi<|eot_id|>");
  EXPECT_EQ(tok.TokenToPiece(257), "");
  EXPECT_EQ(tok.TokenToPiece(257, /*render_special=*/true), "<|eot_id|>");
}

TEST(BpeTokenizer, EndOfGenerationComesFromTheConfigAndKnownNames) {
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<|end_of_text|>", true), Added(257, "<|eot_id|>", true),
                       Added(258, "<|im_start|>", true)};
  BpeTokenizer no_config = Make(j);
  EXPECT_EQ(no_config.eos_id(), -1);
  EXPECT_EQ(no_config.bos_id(), -1);
  EXPECT_TRUE(no_config.IsEndOfGeneration(256));
  EXPECT_TRUE(no_config.IsEndOfGeneration(257));
  EXPECT_FALSE(no_config.IsEndOfGeneration(258));
  BpeTokenizer with_config =
      Make(j, R"({"eos_token": {"content": "<|im_start|>"}, "bos_token": "<|end_of_text|>"})");
  EXPECT_EQ(with_config.eos_id(), 258);
  EXPECT_EQ(with_config.bos_id(), 256);
  EXPECT_FALSE(with_config.add_bos());  // no template: add_special adds nothing
  EXPECT_TRUE(with_config.IsEndOfGeneration(258));
}

TEST(BpeTokenizer, FromJsonFileReadsTheConfigNextToIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("bpe_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  json j = MakeJson({}, json::array());
  j["added_tokens"] = {Added(256, "<|im_end|>", true)};
  std::ofstream(dir / "tokenizer.json") << j.dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  Result<BpeTokenizer> tok = BpeTokenizer::FromJsonFile((dir / "tokenizer.json").string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->eos_id(), 256);
}

// ---- decode ----

TEST(BpeTokenizer, DecodeOfEncodeGivesAnyBytesBack) {
  BpeTokenizer tok = Make(MakeJson({"ab", "\xC4\xA0" "a"}, {"a b", "Ġ a"}));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 40, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 4 == 0 ? 'a' + rng() % 3 : rng() % 256);
    EXPECT_EQ(tok.Decode(tok.Encode(text, true, true)), text);
  }
}

TEST(BpeTokenizer, DecodeSkipsUnknownIds) {
  BpeTokenizer tok = Make(MakeJson({}, json::array()));
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{'a', -1, 999999, 'b'}), "ab");
  EXPECT_EQ(tok.TokenToPiece(-5), "");
}

// ---- bad tokenizer.json files: a Status naming the file and the problem, never a crash ----

TEST(BpeTokenizer, RejectsTextThatIsNotJson) {
  Result<BpeTokenizer> tok = BpeTokenizer::FromJsonString("{\"model\": ", {}, "broken.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(tok.status().message().find("broken.json"), std::string::npos);
  EXPECT_NE(tok.status().message().find("not valid JSON"), std::string::npos);
}

TEST(BpeTokenizer, RejectsAMissingFile) {
  Result<BpeTokenizer> tok = BpeTokenizer::FromJsonFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(tok.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(BpeTokenizer, RejectsAMissingModel) {
  json j = MakeJson({}, json::array());
  j.erase("model");
  const Status s = LoadError(j);
  EXPECT_NE(s.message().find("bad.json"), std::string::npos);
  EXPECT_NE(s.message().find("no 'model'"), std::string::npos) << s.message();
}

TEST(BpeTokenizer, RejectsAnUnknownModelType) {
  json j = MakeJson({}, json::array());
  j["model"]["type"] = "WordPiece";
  const Status s = LoadError(j);
  EXPECT_EQ(s.code(), ErrorCode::kUnimplemented);
  EXPECT_NE(s.message().find("WordPiece"), std::string::npos) << s.message();
}

TEST(BpeTokenizer, RejectsMergesOfUnknownTokens) {
  const Status s = LoadError(MakeJson({"ab"}, {"a b", "a zz"}));
  EXPECT_EQ(s.code(), ErrorCode::kDataLoss);
  EXPECT_NE(s.message().find("model.merges[1]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'zz', which is not in model.vocab"), std::string::npos)
      << s.message();
}

TEST(BpeTokenizer, RejectsMergesWhoseResultIsNotInTheVocab) {
  const Status s = LoadError(MakeJson({}, {"a b"}));
  EXPECT_NE(s.message().find("makes 'ab'"), std::string::npos) << s.message();
}

TEST(BpeTokenizer, RejectsMalformedMerges) {
  EXPECT_NE(LoadError(MakeJson({}, {"ab"})).message().find("not \"left right\""),
            std::string::npos);
  EXPECT_NE(LoadError(MakeJson({}, {42})).message().find("model.merges[0]"), std::string::npos);
}

TEST(BpeTokenizer, RejectsAnUnknownPreTokenizerRegex) {
  json j = MakeJson({}, json::array());
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  const Status s = LoadError(j);
  EXPECT_EQ(s.code(), ErrorCode::kUnimplemented);
  EXPECT_NE(s.message().find("\\\\w+"), std::string::npos) << s.message();
}

TEST(BpeTokenizer, RejectsWrongTypesWithoutCrashing) {
  const std::vector<std::pair<json::json_pointer, json>> edits = {
      {json::json_pointer("/model/vocab"), json::array()},
      {json::json_pointer("/model/vocab/a"), "x"},
      {json::json_pointer("/model/vocab/a"), -3},
      {json::json_pointer("/model/vocab/a"), 1},  // duplicate id
      {json::json_pointer("/model/merges"), "a b"},
      {json::json_pointer("/model/ignore_merges"), "yes"},
      {json::json_pointer("/added_tokens"), json{{"id", 1}}},
      {json::json_pointer("/added_tokens"), json::array({json{{"id", "x"}, {"content", "<s>"}}})},
      {json::json_pointer("/added_tokens"), json::array({json{{"id", 97}, {"content", "<s>"}}})},
      {json::json_pointer("/pre_tokenizer"), 7},
      {json::json_pointer("/decoder"), json{{"type", "WordPiece"}}},
      {json::json_pointer("/normalizer"), json{{"type", "Lowercase"}}},
      {json::json_pointer("/post_processor"), json{{"type", "BertProcessing"}}},
      {json::json_pointer("/post_processor"), json{{"type", "TemplateProcessing"}}},
      {json::json_pointer("/post_processor"),
       json{{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {999}}}}}}}},
      {json::json_pointer("/model/dropout"), 0.1},
      {json::json_pointer("/model/continuing_subword_prefix"), "##"},
      {json::json_pointer("/model/unk_token"), "<unk>"},
  };
  for (const auto& [pointer, value] : edits) {
    json j = MakeJson({}, json::array());
    j[pointer] = value;
    const Status s = LoadError(j);
    EXPECT_NE(s.message().find("bad.json"), std::string::npos) << pointer << ": " << s.message();
  }
  EXPECT_FALSE(BpeTokenizer::FromJsonString("[1, 2]").ok());
  EXPECT_FALSE(BpeTokenizer::FromJsonString("").ok());
}

// ---- pre-tokenizer ----

TEST(BpePreTokenizer, RecognisesTheLlama3AndQwen2Patterns) {
  EXPECT_EQ(RecognisePattern(kLlama3Regex), PreTokenizerKind::kLlama3);
  EXPECT_EQ(RecognisePattern(kQwen2Regex), PreTokenizerKind::kQwen2);
  EXPECT_EQ(RecognisePattern("\\s+"), std::nullopt);
}

TEST(BpePreTokenizer, Llama3GroupsDigitsInThreesQwen2OneByOne) {
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "1234567"), (Strings{"123", "456", "7"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "1234"), (Strings{"1", "2", "3", "4"}));
  // Any \p{N}: Arabic-Indic digits and superscripts too.
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "x\u00b2\u00b3"), (Strings{"x", "\u00b2\u00b3"}));
}

TEST(BpePreTokenizer, ContractionsInEitherCase) {
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "don'T it's WE'VE"),
            (Strings{"don", "'T", " it", "'s", " WE", "'VE"}));
  // Oniguruma folds U+017F (long s) to 's'.
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "x'\u017ft"), (Strings{"x", "'\u017f", "t"}));
  // Not a contraction: the apostrophe leads the word.
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "'twas"), (Strings{"'t", "was"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "'hello"), (Strings{"'hello"}));
}

TEST(BpePreTokenizer, WhitespaceRunsLeaveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "a  b"), (Strings{"a", " ", " b"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "a\t\t1"), (Strings{"a", "\t", "\t", "1"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "x  "), (Strings{"x", "  "}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "a\u00a0b"), (Strings{"a", "\u00a0b"}));
}

TEST(BpePreTokenizer, NewlinesEndTheirWhitespaceRun) {
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "a \n\n b"), (Strings{"a", " \n\n", " b"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "  \r\n x"), (Strings{"  \r\n", " x"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, " !!!\n\nabc"), (Strings{" !!!\n\n", "abc"}));
}

TEST(BpePreTokenizer, CoversAnyBytesExactly) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text(rng() % 30, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 256);
    std::string joined;
    for (const std::string& piece : Split(PreTokenizerKind::kQwen2, text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

// ---- NFC ----

TEST(BpeNfc, ComposesDecomposedCharacters) {
  EXPECT_EQ(unicode::Nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(unicode::Nfc("A\u030a"), "\u00c5");
  EXPECT_EQ(unicode::Nfc("\u212b"), "\u00c5");  // ANGSTROM SIGN is a singleton decomposition
  EXPECT_EQ(unicode::Nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul jamo -> syllable
}

TEST(BpeNfc, ReordersCombiningMarksByClass) {
  // dot below (220) sorts before dot above (230); q has no precomposed forms.
  EXPECT_EQ(unicode::Nfc("q\u0307\u0323"), "q\u0323\u0307");
  EXPECT_EQ(unicode::Nfc("\u1e0b\u0323"), "\u1e0d\u0307");  // d + dot above + dot below
}

TEST(BpeNfc, LeavesAsciiComposedAndInvalidTextAlone) {
  EXPECT_EQ(unicode::Nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(unicode::Nfc("\u00e9\u4e2d"), "\u00e9\u4e2d");
  EXPECT_EQ(unicode::Nfc("e\xff\xcc\x81"), "e\xff\xcc\x81");  // an invalid byte blocks composing
}

}  // namespace
}  // namespace uniprefill::tokenizer
