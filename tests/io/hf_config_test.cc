// HfConfig: typed getters over a Hugging Face config.json, nested objects (rope_scaling, Gemma 3's
// text_config), null-as-absent, defaults, and errors that name the file, the key path and the value.
#include "io/hf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace uniprefill {
namespace {

namespace fs = std::filesystem;

// A Llama-3.1-like config with the value types a config holds.
constexpr const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "num_hidden_layers": 32,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "max_position_embeddings": 131072.0,
  "tie_word_embeddings": false,
  "sliding_window": null,
  "eos_token_id": [128001, 128008, 128009],
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
  "attention_bias": 0
})";

// A multimodal Gemma 3 config: the language model's keys live under text_config.
constexpr const char* kGemmaMultimodal = R"({
  "architectures": ["Gemma3ForConditionalGeneration"],
  "model_type": "gemma3",
  "text_config": {"model_type": "gemma3_text", "hidden_size": 3840, "sliding_window": 1024,
                  "layer_types": ["sliding_attention", "full_attention"],
                  "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
  "vision_config": {"hidden_size": 1152}
})";

HfConfig MustParse(const char* text) {
  auto c = HfConfig::Parse(text, "config.json");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.value();
}

void ExpectError(const Status& st, ErrorCode code, const std::string& needle) {
  ASSERT_FALSE(st.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(st.code(), code) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << "message: " << st.message() << "\nexpected to contain: " << needle;
}

fs::path TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / "uniprefill_hf_config" / info->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(HfConfig, TypedGettersReadEachValueType) {
  const HfConfig c = MustParse(kLlama);
  EXPECT_EQ(*c.GetInt("hidden_size"), 4096);
  EXPECT_EQ(*c.GetString("model_type"), "llama");
  EXPECT_DOUBLE_EQ(*c.GetFloat("rms_norm_eps"), 1e-5);
  EXPECT_DOUBLE_EQ(*c.GetFloat("hidden_size"), 4096.0);  // an integer is a number too
  EXPECT_EQ(*c.GetBool("tie_word_embeddings"), false);
  EXPECT_EQ(*c.GetIntList("eos_token_id"), (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(*c.GetStringList("architectures"), (std::vector<std::string>{"LlamaForCausalLM"}));
  EXPECT_EQ(*c.GetFloatList("eos_token_id"), (std::vector<double>{128001, 128008, 128009}));
}

TEST(HfConfig, GetIntAcceptsIntegralFloatsOnly) {
  const HfConfig c = MustParse(kLlama);
  EXPECT_EQ(*c.GetInt("max_position_embeddings"), 131072);
  EXPECT_EQ(*c.GetInt("rope_theta"), 500000);
  ExpectError(c.GetInt("rms_norm_eps").status(), ErrorCode::kInvalidArgument,
              "key 'rms_norm_eps' is 1e-05 (a number), expected an integer");
}

TEST(HfConfig, WrongTypeNamesFileKeyAndValue) {
  const HfConfig c = MustParse(kLlama);
  ExpectError(c.GetString("hidden_size").status(), ErrorCode::kInvalidArgument,
              "config config.json: key 'hidden_size' is 4096 (an integer), expected a string");
  ExpectError(c.GetBool("attention_bias").status(), ErrorCode::kInvalidArgument,
              "key 'attention_bias' is 0 (an integer), expected true or false");
  ExpectError(c.GetInt("rope_scaling").status(), ErrorCode::kInvalidArgument,
              "(an object), expected an integer");
  ExpectError(c.GetIntList("model_type").status(), ErrorCode::kInvalidArgument,
              "expected a list of integers");
  ExpectError(c.GetStringList("eos_token_id").status(), ErrorCode::kInvalidArgument,
              "key 'eos_token_id[0]' is 128001 (an integer), expected a string");
}

TEST(HfConfig, MissingAndNullKeysAreNotFound) {
  const HfConfig c = MustParse(kLlama);
  EXPECT_FALSE(c.Has("num_experts"));
  EXPECT_FALSE(c.Has("sliding_window"));  // null means "not set"
  EXPECT_TRUE(c.Has("rope_scaling"));
  ExpectError(c.GetInt("num_experts").status(), ErrorCode::kNotFound,
              "config config.json: key 'num_experts' not found");
  ExpectError(c.GetInt("sliding_window").status(), ErrorCode::kNotFound,
              "key 'sliding_window' is null");
}

TEST(HfConfig, DefaultsApplyOnlyWhenAbsentOrNull) {
  const HfConfig c = MustParse(kLlama);
  EXPECT_EQ(*c.GetIntOr("num_experts", 0), 0);
  EXPECT_EQ(*c.GetIntOr("sliding_window", 4096), 4096);
  EXPECT_EQ(*c.GetIntOr("hidden_size", 1), 4096);
  EXPECT_DOUBLE_EQ(*c.GetFloatOr("partial_rotary_factor", 1.0), 1.0);
  EXPECT_EQ(*c.GetStringOr("hidden_act", "silu"), "silu");
  EXPECT_EQ(*c.GetBoolOr("tie_word_embeddings", true), false);
  // Present with the wrong type is still an error, not the default.
  ExpectError(c.GetIntOr("model_type", 3).status(), ErrorCode::kInvalidArgument,
              "key 'model_type' is \"llama\"");
  ExpectError(c.GetBoolOr("attention_bias", false).status(), ErrorCode::kInvalidArgument,
              "expected true or false");
}

TEST(HfConfig, SubReadsNestedObjectsWithTheirKeyPath) {
  const HfConfig c = MustParse(kLlama);
  auto rope = c.Sub("rope_scaling");
  ASSERT_TRUE(rope.ok()) << rope.status().message();
  EXPECT_EQ(*rope->GetString("rope_type"), "llama3");
  EXPECT_DOUBLE_EQ(*rope->GetFloat("factor"), 8.0);
  EXPECT_EQ(*rope->GetInt("original_max_position_embeddings"), 8192);
  EXPECT_EQ(rope->Where(), "config.json: rope_scaling");
  ExpectError(rope->GetFloat("beta_fast").status(), ErrorCode::kNotFound,
              "key 'rope_scaling.beta_fast' not found");
  ExpectError(c.Sub("sliding_window").status(), ErrorCode::kNotFound, "is null");
  ExpectError(c.Sub("hidden_size").status(), ErrorCode::kInvalidArgument, "expected an object");
}

TEST(HfConfig, TextConfigUnwrapsMultimodalGemma3) {
  const HfConfig mm = MustParse(kGemmaMultimodal);
  auto text = mm.TextConfig();
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text->GetString("model_type"), "gemma3_text");
  EXPECT_EQ(*text->GetInt("sliding_window"), 1024);
  EXPECT_EQ(*text->GetStringList("layer_types"),
            (std::vector<std::string>{"sliding_attention", "full_attention"}));
  auto rope = text->Sub("rope_scaling");
  ASSERT_TRUE(rope.ok());
  ExpectError(rope->GetInt("factor_x").status(), ErrorCode::kNotFound,
              "key 'text_config.rope_scaling.factor_x' not found");
  EXPECT_EQ(rope->Where(), "config.json: text_config.rope_scaling");
  // A text-only config is its own text config.
  const HfConfig plain = MustParse(kLlama);
  EXPECT_EQ(*plain.TextConfig()->GetString("model_type"), "llama");
}

TEST(HfConfig, SubOutlivesItsParent) {
  auto sub = [] { return MustParse(kGemmaMultimodal).Sub("vision_config"); }();
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(*sub->GetInt("hidden_size"), 1152);
}

TEST(HfConfig, KeysAreSorted) {
  const HfConfig c = MustParse(R"({"b": 1, "a": 2, "c": null})");
  EXPECT_EQ(c.Keys(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(HfConfig, BadJsonIsDataLoss) {
  ExpectError(HfConfig::Parse("{\"a\": 1,", "cfg.json").status(), ErrorCode::kDataLoss,
              "config cfg.json: invalid JSON (");
  ExpectError(HfConfig::Parse("[1, 2]", "cfg.json").status(), ErrorCode::kDataLoss,
              "top level is a list, expected a JSON object");
  ExpectError(HfConfig::Parse("", "cfg.json").status(), ErrorCode::kDataLoss, "invalid JSON");
}

TEST(HfConfig, LoadsFromFileAndReportsMissingFiles) {
  const fs::path dir = TestDir();
  WriteFile(dir / "config.json", kLlama);
  auto c = HfConfig::Load((dir / "config.json").string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c->GetInt("num_hidden_layers"), 32);
  EXPECT_EQ(c->Where(), (dir / "config.json").string());

  ExpectError(HfConfig::Load((dir / "absent.json").string()).status(), ErrorCode::kNotFound,
              "absent.json: no such file");
  ExpectError(HfConfig::Load(dir.string()).status(), ErrorCode::kNotFound, "not a regular file");
  WriteFile(dir / "bad.json", "{oops");
  ExpectError(HfConfig::Load((dir / "bad.json").string()).status(), ErrorCode::kDataLoss,
              "bad.json: invalid JSON");
}

TEST(HfConfig, IsHfCheckpointDirNeedsAConfigJsonFile) {
  const fs::path dir = TestDir();
  EXPECT_FALSE(IsHfCheckpointDir(dir.string()));
  EXPECT_FALSE(IsHfCheckpointDir((dir / "absent").string()));
  fs::create_directories(dir / "config.json" / "x");  // a directory named config.json
  EXPECT_FALSE(IsHfCheckpointDir(dir.string()));
  fs::remove_all(dir / "config.json");
  WriteFile(dir / "config.json", "{}");
  EXPECT_TRUE(IsHfCheckpointDir(dir.string()));
  EXPECT_FALSE(IsHfCheckpointDir((dir / "config.json").string()));  // a file, not a directory
}

// The committed tiny checkpoints (tests/goldens/hf_tiny, docs/hf_goldens.md) carry the keys the
// model loaders read.
TEST(HfConfig, TinyGoldenConfigsHaveTheirFamilyKeys) {
  const fs::path root = fs::path(UP_SOURCE_DIR) / "tests/goldens/hf_tiny";
  auto llama = HfConfig::Load((root / "llama/config.json").string());
  ASSERT_TRUE(llama.ok()) << llama.status().message();
  EXPECT_EQ(*llama->GetString("model_type"), "llama");
  EXPECT_EQ(*llama->Sub("rope_scaling")->GetString("rope_type"), "llama3");
  EXPECT_EQ(*llama->GetBool("tie_word_embeddings"), false);

  auto qwen = HfConfig::Load((root / "qwen3_next/config.json").string());
  ASSERT_TRUE(qwen.ok()) << qwen.status().message();
  EXPECT_EQ(*qwen->GetString("model_type"), "qwen3_next");
  EXPECT_EQ(*qwen->GetInt("full_attention_interval"), 4);
  EXPECT_GE(*qwen->GetInt("num_experts"), 2);
  EXPECT_EQ(*qwen->GetInt("num_experts_per_tok"), 2);
  EXPECT_TRUE(qwen->Has("linear_num_value_heads"));
  EXPECT_TRUE(qwen->Has("partial_rotary_factor"));

  auto gemma = HfConfig::Load((root / "gemma3/config.json").string());
  ASSERT_TRUE(gemma.ok()) << gemma.status().message();
  EXPECT_EQ(*gemma->GetString("model_type"), "gemma3_text");
  const std::vector<std::string> types = *gemma->GetStringList("layer_types");
  ASSERT_EQ(static_cast<int64_t>(types.size()), *gemma->GetInt("num_hidden_layers"));
  for (size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(types[i], (i + 1) % 6 == 0 ? "full_attention" : "sliding_attention") << i;
  }
  EXPECT_DOUBLE_EQ(*gemma->GetFloat("rope_local_base_freq"), 10000.0);
}

}  // namespace
}  // namespace uniprefill
