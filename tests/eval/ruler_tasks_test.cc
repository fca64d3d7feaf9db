// RULER task generation: the task table, determinism, references and needle depths of every task,
// the word counts of cwe and fwe, and the length fit with a byte counter and with the real Gemma 3
// tokenizer and chat template.
#include "eval/ruler_tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "eval/haystacks.h"
#include "eval/ruler_words.h"
#include "io/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/spm_tokenizer.h"
#include "testing/required_asset.h"

namespace uniprefill::eval {
namespace {

constexpr const char* kModelPath = UP_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";

// A cheap stand-in for a tokenizer: about four bytes a token, plus a chat-template overhead.
int ByteCounter(const std::string& input, const std::string& answer_prefix) {
  return static_cast<int>((input.size() + answer_prefix.size()) / 4) + 10;
}

RulerSample MustMake(std::string_view task, int target, uint64_t seed,
                     const PromptTokenCounter& count = ByteCounter) {
  Result<RulerSample> s = MakeRulerSample(task, target, seed, count);
  EXPECT_TRUE(s.ok()) << task << " at " << target << ": " << s.status().message();
  return s.ok() ? std::move(s).value() : RulerSample{};
}

std::string Context(const RulerSample& s) {
  return s.input.substr(s.haystack_begin, s.haystack_end - s.haystack_begin);
}

std::vector<std::string> SplitWords(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// --- The task table ------------------------------------------------------------------------------

TEST(RulerTasks, ListsTheNineTasksInOrderWithTheirBudgets) {
  const std::vector<std::pair<std::string, int>> want = {
      {"niah_single_1", 128}, {"niah_single_2", 128},   {"niah_multikey_2", 128},
      {"niah_multikey_3", 128}, {"niah_multivalue", 128}, {"niah_multiquery", 128},
      {"vt", 30},             {"cwe", 120},             {"fwe", 50}};
  const std::vector<RulerTaskInfo>& tasks = RulerTasks();
  ASSERT_EQ(tasks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(tasks[i].name, want[i].first);
    EXPECT_EQ(tasks[i].max_new_tokens, want[i].second) << tasks[i].name;
    EXPECT_EQ(tasks[i].metric, RulerMetric::kStringMatchAll) << tasks[i].name;
    EXPECT_FALSE(tasks[i].description.empty()) << tasks[i].name;
  }
}

TEST(RulerTasks, FindsATaskByName) {
  Result<const RulerTaskInfo*> vt = FindRulerTask("vt");
  ASSERT_TRUE(vt.ok());
  EXPECT_EQ((*vt)->name, "vt");
  EXPECT_EQ((*vt)->max_new_tokens, 30);
}

TEST(RulerTasks, UnknownTaskNameIsAnErrorListingTheValidNames) {
  Result<const RulerTaskInfo*> r = FindRulerTask("niah_single_3");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("niah_single_3"), std::string::npos);
  for (const RulerTaskInfo& t : RulerTasks()) {
    EXPECT_NE(r.status().message().find(t.name), std::string::npos) << t.name;
  }
  EXPECT_FALSE(MakeRulerSample("qa_1", 4096, 1, ByteCounter).ok());
}

TEST(RulerTasks, TooSmallTargetIsAnErrorGivingTheMinimum) {
  for (const RulerTaskInfo& t : RulerTasks()) {
    Result<RulerSample> r = MakeRulerSample(t.name, 100, 1, ByteCounter);
    ASSERT_FALSE(r.ok()) << t.name;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("needs at least"), std::string::npos)
        << r.status().message();
  }
  // The minimum it names is enough.
  Result<RulerSample> r = MakeRulerSample("niah_single_1", 100, 1, ByteCounter);
  const std::string& m = r.status().message();
  const int minimum = std::stoi(m.substr(m.find("needs at least") + 15));
  EXPECT_TRUE(MakeRulerSample("niah_single_1", minimum, 1, ByteCounter).ok()) << m;
  EXPECT_FALSE(MakeRulerSample("niah_single_1", minimum - 1, 1, ByteCounter).ok()) << m;
}

// --- Every task ----------------------------------------------------------------------------------

class RulerEveryTask : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Ruler, RulerEveryTask,
                         ::testing::Values("niah_single_1", "niah_single_2", "niah_multikey_2",
                                           "niah_multikey_3", "niah_multivalue", "niah_multiquery",
                                           "vt", "cwe", "fwe"),
                         [](const auto& p) { return p.param; });

TEST_P(RulerEveryTask, IsDeterministicForASeed) {
  const RulerSample a = MustMake(GetParam(), 8192, 7);
  const RulerSample b = MustMake(GetParam(), 8192, 7);
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.answer_prefix, b.answer_prefix);
  EXPECT_EQ(a.references, b.references);
  EXPECT_EQ(a.needle_depths, b.needle_depths);
  EXPECT_EQ(a.needle_offsets, b.needle_offsets);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
}

TEST_P(RulerEveryTask, DiffersForAnotherSeed) {
  const RulerSample a = MustMake(GetParam(), 8192, 7);
  const RulerSample b = MustMake(GetParam(), 8192, 8);
  EXPECT_NE(a.input, b.input);
  EXPECT_NE(a.references, b.references);
}

TEST_P(RulerEveryTask, FillsTheTargetWithFewCounts) {
  for (int target : {4096, 16384, 131072}) {
    int calls = 0;
    const PromptTokenCounter counter = [&](const std::string& in, const std::string& prefix) {
      ++calls;
      return ByteCounter(in, prefix);
    };
    const RulerSample s = MustMake(GetParam(), target, 3, counter);
    EXPECT_EQ(s.task, GetParam());
    EXPECT_EQ(s.target_tokens, target);
    EXPECT_EQ(s.prompt_tokens, ByteCounter(s.input, s.answer_prefix));
    EXPECT_LE(s.prompt_tokens + s.max_new_tokens, target);
    EXPECT_GE(s.prompt_tokens + s.max_new_tokens, 0.98 * target);
    EXPECT_LE(calls, 15) << "at " << target;
  }
}

TEST_P(RulerEveryTask, ReferencesAppearInTheContext) {
  for (uint64_t seed : {1, 2, 3}) {
    const RulerSample s = MustMake(GetParam(), 4096, seed);
    const std::string context = Context(s);
    ASSERT_FALSE(s.references.empty());
    for (const std::string& r : s.references) {
      EXPECT_NE(context.find(r), std::string::npos) << r << " seed " << seed;
    }
    EXPECT_LT(s.haystack_begin, s.haystack_end);
    EXPECT_LE(s.haystack_end, s.input.size());
  }
}

TEST_P(RulerEveryTask, NeedlesSitAtTheirIntendedDepths) {
  const bool has_needles = GetParam() != "cwe" && GetParam() != "fwe";
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const RulerSample s = MustMake(GetParam(), 8192, seed);
    ASSERT_EQ(s.needle_depths.size(), s.needle_offsets.size());
    if (!has_needles) {
      EXPECT_TRUE(s.needle_depths.empty());
      continue;
    }
    ASSERT_FALSE(s.needle_depths.empty());
    const double length = static_cast<double>(s.haystack_end - s.haystack_begin);
    for (size_t i = 0; i < s.needle_offsets.size(); ++i) {
      const size_t off = s.needle_offsets[i];
      ASSERT_GE(off, s.haystack_begin);
      ASSERT_LT(off, s.haystack_end);
      const std::string_view needle = std::string_view(s.input).substr(off);
      EXPECT_TRUE(needle.starts_with(GetParam() == "vt" ? "VAR " : "One of the special magic "))
          << needle.substr(0, 40);
      const double depth = static_cast<double>(off - s.haystack_begin) / length;
      EXPECT_NEAR(depth, s.needle_depths[i], 0.02) << "needle " << i << " seed " << seed;
      EXPECT_GE(s.needle_depths[i], 0.0);
      EXPECT_LE(s.needle_depths[i], 1.0);
      if (i > 0) {
        EXPECT_LT(s.needle_depths[i - 1], s.needle_depths[i]);
      }
    }
  }
}

TEST(RulerTasks, TasksOfOneSeedDrawDifferentNeedles) {
  const RulerSample a = MustMake("niah_single_1", 4096, 5);
  const RulerSample b = MustMake("niah_single_2", 4096, 5);
  const RulerSample c = MustMake("niah_multikey_2", 4096, 5);
  EXPECT_NE(a.references, b.references);
  EXPECT_NE(a.references, c.references);
  EXPECT_NE(a.needle_depths, b.needle_depths);
}

// --- Task-specific structure ---------------------------------------------------------------------

// The "for {key} is: {value}." needles of a niah context, key -> values.
std::map<std::string, std::vector<std::string>> ParseNeedles(const std::string& context) {
  std::map<std::string, std::vector<std::string>> out;
  const std::string lead = "One of the special magic ";
  for (size_t at = context.find(lead); at != std::string::npos; at = context.find(lead, at + 1)) {
    const size_t key_at = context.find(" for ", at) + 5;
    const size_t sep = context.find(" is: ", key_at);
    const size_t end = context.find('.', sep);
    out[context.substr(key_at, sep - key_at)].push_back(context.substr(sep + 5, end - sep - 5));
  }
  return out;
}

TEST(RulerNiah, SingleNeedleHoldsTheQueriedKeyAndValue) {
  const RulerSample s = MustMake("niah_single_1", 4096, 11);
  ASSERT_EQ(s.references.size(), 1u);
  ASSERT_EQ(s.needle_offsets.size(), 1u);
  const auto needles = ParseNeedles(Context(s));
  ASSERT_EQ(needles.size(), 1u);
  const std::string& key = needles.begin()->first;
  EXPECT_EQ(needles.begin()->second, s.references);
  EXPECT_EQ(s.references[0].size(), 7u);
  EXPECT_NE(key.find('-'), std::string::npos);
  // RULER's singular form of the template for one expected value; the needle keeps the plural.
  EXPECT_TRUE(s.input.starts_with("A special magic number is hidden within the following text. "
                                  "Make sure to memorize it. I will quiz you about the number "
                                  "afterwards.\n"));
  EXPECT_TRUE(s.input.ends_with("\nWhat is the special magic number for " + key +
                                " mentioned in the provided text?"));
  EXPECT_EQ(s.answer_prefix,
            " The special magic number for " + key + " mentioned in the provided text is");
  EXPECT_NE(Context(s).find("One of the special magic numbers for " + key + " is: "),
            std::string::npos);
  EXPECT_NE(Context(s).find(std::string(NoiseFiller()) + "\n"), std::string::npos);
}

TEST(RulerNiah, MultikeyHaystackIsDistinctDistractorNeedles) {
  for (const char* task : {"niah_multikey_2", "niah_multikey_3"}) {
    const RulerSample s = MustMake(task, 8192, 5);
    const std::string context = Context(s);
    const auto needles = ParseNeedles(context);
    const size_t lines = std::count(context.begin(), context.end(), '\n') + 1;
    EXPECT_EQ(needles.size(), lines) << task << ": every line a needle with its own key";
    std::set<std::string> values;
    for (const auto& [key, v] : needles) {
      ASSERT_EQ(v.size(), 1u) << task;
      values.insert(v[0]);
    }
    EXPECT_EQ(values.size(), lines) << task << ": values distinct";
    ASSERT_EQ(s.references.size(), 1u);
    EXPECT_TRUE(values.count(s.references[0]));
  }
}

TEST(RulerNiah, MultikeyThreeUsesUuidKeysAndValues) {
  const RulerSample s = MustMake("niah_multikey_3", 4096, 2);
  ASSERT_EQ(s.references.size(), 1u);
  const std::string& v = s.references[0];
  ASSERT_EQ(v.size(), 36u);
  EXPECT_EQ(v[14], '4');
  EXPECT_NE(std::string("89ab").find(v[19]), std::string::npos);
  EXPECT_TRUE(s.answer_prefix.starts_with(" The special magic uuid for "));
  EXPECT_TRUE(s.input.starts_with("A special magic uuid is hidden"));
  EXPECT_NE(Context(s).find("One of the special magic uuids for "), std::string::npos);
}

TEST(RulerNiah, MultivalueHidesFourValuesOfOneKey) {
  const RulerSample s = MustMake("niah_multivalue", 8192, 4);
  ASSERT_EQ(s.references.size(), 4u);
  EXPECT_EQ(s.needle_offsets.size(), 4u);
  const auto needles = ParseNeedles(Context(s));
  ASSERT_EQ(needles.size(), 1u);
  std::vector<std::string> found = needles.begin()->second, want = s.references;
  std::sort(found.begin(), found.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(found, want);
  EXPECT_EQ(std::set<std::string>(want.begin(), want.end()).size(), 4u);
  const std::string& key = needles.begin()->first;
  EXPECT_TRUE(s.input.starts_with("Some special magic numbers are hidden within the following "
                                  "text. Make sure to memorize it. I will quiz you about the "
                                  "numbers afterwards.\n"));
  EXPECT_TRUE(s.input.ends_with("\nWhat are all the special magic numbers for " + key +
                                " mentioned in the provided text?"));
  EXPECT_EQ(s.answer_prefix,
            " The special magic numbers for " + key + " mentioned in the provided text are");
}

TEST(RulerNiah, MultiqueryAsksForAllFourKeysInTheOrderOfTheReferences) {
  const RulerSample s = MustMake("niah_multiquery", 8192, 4);
  ASSERT_EQ(s.references.size(), 4u);
  const auto needles = ParseNeedles(Context(s));
  ASSERT_EQ(needles.size(), 4u);
  std::vector<std::string> keys;  // the key of each reference
  for (const std::string& ref : s.references) {
    for (const auto& [key, values] : needles) {
      ASSERT_EQ(values.size(), 1u);
      if (values[0] == ref) keys.push_back(key);
    }
  }
  ASSERT_EQ(keys.size(), 4u);
  // RULER: ', '.join(queries[:-1]) + ', and ' + queries[-1]
  const std::string query = keys[0] + ", " + keys[1] + ", " + keys[2] + ", and " + keys[3];
  EXPECT_EQ(s.answer_prefix,
            " The special magic numbers for " + query + " mentioned in the provided text are");
  EXPECT_TRUE(s.input.ends_with("\nWhat are all the special magic numbers for " + query +
                                " mentioned in the provided text?"));
}

TEST(RulerVt, ChainLinesAppearInOrder) {
  const RulerSample s = MustMake("vt", 4096, 9);
  ASSERT_EQ(s.references.size(), 5u);
  ASSERT_EQ(s.needle_offsets.size(), 5u);
  const std::string value_line = s.input.substr(
      s.needle_offsets[0], s.input.find('\n', s.needle_offsets[0]) - s.needle_offsets[0]);
  ASSERT_TRUE(value_line.starts_with("VAR " + s.references[0] + " = ")) << value_line;
  const std::string value = value_line.substr(value_line.rfind(' ') + 1);
  EXPECT_EQ(value.size(), 5u);
  for (size_t i = 1; i < 5; ++i) {
    const std::string line = "VAR " + s.references[i] + " = VAR " + s.references[i - 1];
    EXPECT_EQ(s.input.compare(s.needle_offsets[i], line.size(), line), 0) << line;
    EXPECT_LT(s.needle_offsets[i - 1], s.needle_offsets[i]);
  }
  for (const std::string& name : s.references) {
    EXPECT_EQ(name.size(), 5u);
    EXPECT_TRUE(std::all_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }));
  }
  EXPECT_TRUE(s.input.ends_with("Question: Find all variables that are assigned the value " +
                                value + " in the text above."));
  EXPECT_EQ(s.answer_prefix,
            " Answer: According to the chain(s) of variable assignment in the text above, 5 "
            "variables are assgined the value " + value + ", they are: ");
}

TEST(RulerCwe, CommonWordsAppearThirtyTimesAndTheOthersThree) {
  for (int target : {4096, 16384}) {
    const RulerSample s = MustMake("cwe", target, 6);
    ASSERT_EQ(s.references.size(), 10u);
    // "1. word 2. word ..."
    const std::vector<std::string> tokens = SplitWords(Context(s));
    ASSERT_EQ(tokens.size() % 2, 0u);
    std::map<std::string, int> counts;
    for (size_t i = 0; i < tokens.size(); i += 2) {
      ASSERT_EQ(tokens[i], std::to_string(i / 2 + 1) + ".");
      ++counts[tokens[i + 1]];
    }
    const std::set<std::string> refs(s.references.begin(), s.references.end());
    EXPECT_EQ(refs.size(), 10u);
    for (const auto& [word, n] : counts) {
      EXPECT_EQ(n, refs.count(word) ? 30 : 3) << word;
    }
    for (const std::string& r : s.references) EXPECT_EQ(counts[r], 30) << r;
    EXPECT_GT(counts.size(), 10u);
  }
}

TEST(RulerFwe, ReferencesAreRanksTwoToFourByCount) {
  for (uint64_t seed : {1, 2, 3, 4}) {
    const RulerSample s = MustMake("fwe", 4096, seed);
    ASSERT_EQ(s.references.size(), 3u);
    std::map<std::string, int> counts;
    for (const std::string& w : SplitWords(Context(s))) ++counts[w];
    std::vector<std::pair<int, std::string>> ranked;
    for (const auto& [w, n] : counts) ranked.push_back({n, w});
    std::sort(ranked.rbegin(), ranked.rend());
    ASSERT_GE(ranked.size(), 5u);
    EXPECT_EQ(ranked[0].second, "...");  // RULER's noise word
    for (int r = 1; r < 5; ++r) EXPECT_GT(ranked[r - 1].first, ranked[r].first) << "rank " << r;
    for (int r = 0; r < 3; ++r) EXPECT_EQ(ranked[r + 1].second, s.references[r]);
    for (const auto& [n, w] : ranked) {
      if (w == "...") continue;
      EXPECT_EQ(w.size(), 6u);
      EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; }));
    }
  }
}

// --- Words and haystacks -------------------------------------------------------------------------

TEST(RulerWords, EmbeddedListsAreDistinctLowercaseWords) {
  std::set<std::string_view> all;
  size_t total = 0;
  for (auto list : {Adjectives(), Nouns(), CommonWords()}) {
    EXPECT_GE(list.size(), 150u);
    for (std::string_view w : list) {
      EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
          << w;
      all.insert(w);
      ++total;
    }
  }
  EXPECT_EQ(all.size(), total);
}

TEST(RulerWords, Uuid4HasVersionAndVariantBits) {
  Rng rng = MakeRng(1, 1);
  for (int i = 0; i < 200; ++i) {
    const std::string u = RandomUuid4(rng);
    ASSERT_EQ(u.size(), 36u);
    for (size_t j = 0; j < u.size(); ++j) {
      if (j == 8 || j == 13 || j == 18 || j == 23) {
        EXPECT_EQ(u[j], '-');
      } else {
        EXPECT_NE(std::string("0123456789abcdef").find(u[j]), std::string::npos) << u;
      }
    }
    EXPECT_EQ(u[14], '4') << u;
    EXPECT_NE(std::string("89ab").find(u[19]), std::string::npos) << u;
  }
}

TEST(RulerWords, NumbersHaveSevenDigits) {
  Rng rng = MakeRng(2, 1);
  for (int i = 0; i < 1000; ++i) {
    const int n = std::stoi(RandomNumber7(rng));
    EXPECT_GE(n, 1000000);
    EXPECT_LE(n, 9999999);
  }
}

TEST(RulerWords, CweWordPoolIsDistinctAndGrowsByPrefix) {
  const std::vector<std::string> small = CweWordPool(3, 100);
  const std::vector<std::string> large = CweWordPool(3, 10000);
  ASSERT_EQ(small.size(), 100u);
  ASSERT_EQ(large.size(), 10000u);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), large.begin()));
  EXPECT_EQ(std::set<std::string>(large.begin(), large.end()).size(), large.size());
  for (const std::string& w : large) {
    EXPECT_GE(w.size(), 4u) << w;
    EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
        << w;
  }
  EXPECT_NE(CweWordPool(4, 100), small);
}

TEST(RulerHaystacks, NeedlesGoToTheNearestBoundaryInBytes) {
  const std::vector<std::string> units = {"aaaa", "bbbb", "cccc", "dddd"};
  HaystackWithNeedles h = InsertNeedles(units, " ", {"XX"}, {0.5});
  EXPECT_EQ(h.text, "aaaa bbbb XX cccc dddd");
  EXPECT_EQ(h.needle_offsets, std::vector<size_t>({10}));
  h = InsertNeedles(units, "\n", {"N1", "N2"}, {0.0, 1.0});
  EXPECT_EQ(h.text, "N1\naaaa\nbbbb\ncccc\ndddd\nN2");
  EXPECT_EQ(h.needle_offsets, std::vector<size_t>({0, 23}));
  h = InsertNeedles(units, " ", {"P", "Q"},
                    {0.3, 0.31});  // close depths share a boundary, in order
  EXPECT_EQ(h.text, "aaaa P Q bbbb cccc dddd");
}

TEST(RulerHaystacks, ReportTextMatchesTheFidelityGenerator) {
  const std::string text = GenerateReportText(42, 200);
  EXPECT_TRUE(text.starts_with("Annual report of the town of Westmere.\nSection 1. ")) << text;
  EXPECT_TRUE(GenerateReportText(42, 400).starts_with(text));
  EXPECT_NE(GenerateReportText(43, 200), text);
  const std::vector<std::string> sentences = ReportSentences(42, 50);
  ASSERT_EQ(sentences.size(), 50u);
  EXPECT_EQ(sentences[0], "Annual report of the town of Westmere.");
  EXPECT_EQ(sentences[1], "Section 1.");
  for (const std::string& s : sentences) EXPECT_TRUE(s.ends_with('.')) << s;
  const std::vector<std::string> more = ReportSentences(42, 500);
  EXPECT_TRUE(std::equal(sentences.begin(), sentences.end(), more.begin()));
}

// --- Length fit with the real tokenizer ----------------------------------------------------------

class RulerRealTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModelPath)) return;
    Result<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(kModelPath);
    ASSERT_TRUE(file.ok()) << file.status().message();
    Result<tokenizer::SpmTokenizer> tok = tokenizer::SpmTokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tokenizer_ = new tokenizer::SpmTokenizer(std::move(tok).value());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) {
      UP_REQUIRE_ASSET(kModelPath, "the default model (its tokenizer)");
      FAIL() << "the tokenizer of " << kModelPath << " did not load (see the suite set-up failure)";
    }
  }

  // The prompt as the engine builds it: Gemma chat template, answer prefix, <bos>.
  static int CountTokens(const std::string& input, const std::string& answer_prefix) {
    const std::string text = tokenizer::ApplyChatTemplate({{"user", input}}, true) + answer_prefix;
    return static_cast<int>(tokenizer_->Encode(text, /*add_special=*/true,
                                               /*parse_special=*/true)
                                .size());
  }

  static void ExpectFits(const std::string& task, int target, uint64_t seed) {
    int calls = 0;
    const PromptTokenCounter counter = [&](const std::string& in, const std::string& prefix) {
      ++calls;
      return CountTokens(in, prefix);
    };
    const RulerSample s = MustMake(task, target, seed, counter);
    EXPECT_EQ(s.prompt_tokens, CountTokens(s.input, s.answer_prefix)) << task << " " << target;
    EXPECT_LE(s.prompt_tokens + s.max_new_tokens, target) << task;
    EXPECT_GE(s.prompt_tokens + s.max_new_tokens, 0.98 * target) << task;
    EXPECT_LE(calls, 15) << task << " " << target;
  }

  static tokenizer::SpmTokenizer* tokenizer_;
};
tokenizer::SpmTokenizer* RulerRealTokenizer::tokenizer_ = nullptr;

TEST_F(RulerRealTokenizer, EveryTaskFits4KAnd8K) {
  for (const RulerTaskInfo& t : RulerTasks()) {
    for (int target : {4096, 8192}) ExpectFits(t.name, target, 1);
  }
}

TEST_F(RulerRealTokenizer, SomeTasksFit16K) {
  ExpectFits("niah_multikey_3", 16384, 2);
  ExpectFits("cwe", 16384, 2);
}

}  // namespace
}  // namespace uniprefill::eval
