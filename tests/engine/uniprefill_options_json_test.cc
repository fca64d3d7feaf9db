// UniPrefillOptions from JSON (config files and the HTTP extension share the parser): a keep ratio
// without a mode means fixed-ratio, as on the command line; errors name the key and list the
// schema's keys; out-of-range values are refused by the engine's own ranges.
#include "engine/uniprefill_options_json.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "testing/tiny_gemma3.h"

namespace uniprefill {
namespace {

TEST(UniPrefillOptionsJsonTest, KeepRatioWithoutModeMeansFixedRatio) {
  Result<UniPrefillOptions> o = UniPrefillOptionsFromJson({{"keep_ratio", 0.5}});
  ASSERT_TRUE(o.ok()) << o.status().message();
  ASSERT_TRUE(o->mode.has_value());
  EXPECT_EQ(*o->mode, SelectionMode::kFixedRatio);
  EXPECT_FLOAT_EQ(*o->keep_ratio, 0.5f);
  o = UniPrefillOptionsFromJson({{"keep_ratio", 0.5}, {"mode", "top-p"}});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o->mode, SelectionMode::kTopP);  // an explicit mode wins
  o = UniPrefillOptionsFromJson({{"top_p", 0.9}});
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->mode.has_value());  // the model's default mode
}

TEST(UniPrefillOptionsJsonTest, ConfigFileWithOnlyAKeepRatioIsFixedRatio) {
  const std::string path = testing::TempPath("keep_ratio_only.json");
  std::ofstream(path) << R"({"keep_ratio": 0.4})";
  Result<UniPrefillOptions> o = LoadUniPrefillOptionsFile(path);
  ASSERT_TRUE(o.ok()) << o.status().message();
  ASSERT_TRUE(o->mode.has_value());
  EXPECT_EQ(*o->mode, SelectionMode::kFixedRatio);
  EXPECT_EQ(o->source, "config " + path);
}

TEST(UniPrefillOptionsJsonTest, UnknownKeyListsEveryKey) {
  Result<UniPrefillOptions> o = UniPrefillOptionsFromJson({{"keep_ration", 0.5}});
  ASSERT_FALSE(o.ok());
  const std::string& m = o.status().message();
  EXPECT_NE(m.find("'keep_ration'"), std::string::npos) << m;
  EXPECT_EQ(UniPrefillOptionKeys(),
            "enabled, drop_layers, mode, top_p, keep_ratio, block_size, sink, last_n, window");
  EXPECT_NE(m.find(UniPrefillOptionKeys()), std::string::npos) << m;
}

TEST(UniPrefillOptionsJsonTest, OutOfRangeValuesNameTheirKey) {
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"keep_ratio", 0}}, "keep_ratio"},  {{{"keep_ratio", 1.5}}, "keep_ratio"},
      {{{"top_p", 0}}, "top_p"},            {{{"top_p", 1.01}}, "top_p"},
      {{{"block_size", 0}}, "block_size"},  {{{"sink", -1}}, "sink"},
      {{{"last_n", 0}}, "last_n"},          {{{"mode", "topp"}}, "mode"},
      {{{"window", "diagonal"}}, "window"},
  };
  for (const auto& [j, key] : cases) {
    Result<UniPrefillOptions> o = UniPrefillOptionsFromJson(j);
    ASSERT_FALSE(o.ok()) << j.dump();
    EXPECT_NE(o.status().message().find("'" + key + "'"), std::string::npos)
        << j.dump() << ": " << o.status().message();
  }
  // The edges of the ranges are valid.
  for (const nlohmann::json& j :
       {nlohmann::json{{"keep_ratio", 1}}, nlohmann::json{{"top_p", 1}},
        nlohmann::json{{"sink", 0}}, nlohmann::json{{"block_size", 1}, {"last_n", 1}}}) {
    EXPECT_TRUE(UniPrefillOptionsFromJson(j).ok()) << j.dump();
  }
}

// Integers beyond 32 bits are refused, not wrapped (4294967360 would read as 64).
TEST(UniPrefillOptionsJsonTest, IntegersBeyondAnIntAreRefusedNotWrapped) {
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"block_size", 4294967360ULL}}, "block_size"},
      {{{"last_n", 4294967297LL}}, "last_n"},
      {{{"sink", 4294967295LL}}, "sink"},
      {{{"sink", -4294967296LL}}, "sink"},
      {{{"drop_layers", {3, 4294967301LL}}}, "drop_layers"},
  };
  for (const auto& [j, key] : cases) {
    Result<UniPrefillOptions> o = UniPrefillOptionsFromJson(j);
    ASSERT_FALSE(o.ok()) << j.dump();
    EXPECT_NE(o.status().message().find("'" + key + "'"), std::string::npos) << j.dump();
    EXPECT_NE(o.status().message().find("32-bit"), std::string::npos)
        << j.dump() << ": " << o.status().message();
  }
}

TEST(UniPrefillOptionsJsonTest, EveryFieldRoundTrips) {
  UniPrefillOptions o;
  o.enabled = false;
  o.drop_layers = std::vector<int>{3, 7};
  o.mode = SelectionMode::kTopP;
  o.top_p = 0.875f;
  o.keep_ratio = 0.25f;
  o.block_size = 32;
  o.sink = 16;
  o.last_n = 48;
  o.window = WindowMode::kPosition;
  const nlohmann::json j = UniPrefillOptionsToJson(o);
  EXPECT_EQ(j.size(), UniPrefillFields().size()) << j.dump();
  Result<UniPrefillOptions> back = UniPrefillOptionsFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(UniPrefillOptionsToJson(*back), j);
  // Unset fields stay unset (the model's defaults apply); `enabled` is always written.
  EXPECT_EQ(UniPrefillOptionsToJson(UniPrefillOptions{}), (nlohmann::json{{"enabled", true}}));
}

// Every field's flag text goes through the same reader as its JSON value.
TEST(UniPrefillOptionsJsonTest, FlagTextsBecomeTheJsonValues) {
  const std::pair<std::string_view, std::string_view> texts[] = {
      {"enabled", "off"}, {"drop_layers", "3,7"}, {"mode", "fixed-ratio"}, {"top_p", "0.875"},
      {"keep_ratio", "0.25"}, {"block_size", "32"}, {"sink", "16"}, {"last_n", "48"},
      {"window", "position"}};
  UniPrefillOptions o;
  for (const auto& [key, text] : texts) {
    bool found = false;
    for (const UniPrefillField& f : UniPrefillFields()) {
      if (f.key != key) continue;
      found = true;
      Result<nlohmann::json> v = f.parse_text(text);
      ASSERT_TRUE(v.ok()) << key << ": " << v.status().message();
      ASSERT_TRUE(f.read(*v, o).ok()) << key;
    }
    EXPECT_TRUE(found) << key;
  }
  EXPECT_EQ(UniPrefillOptionsToJson(o),
            (nlohmann::json{{"enabled", false}, {"drop_layers", {3, 7}}, {"mode", "fixed-ratio"},
                            {"top_p", 0.875}, {"keep_ratio", 0.25}, {"block_size", 32},
                            {"sink", 16}, {"last_n", 48}, {"window", "position"}}));
  for (const UniPrefillField& f : UniPrefillFields()) {
    if (f.key == "mode" || f.key == "window") continue;  // strings: the reader refuses them
    EXPECT_FALSE(f.parse_text("x1").ok()) << f.key;
  }
}

}  // namespace
}  // namespace uniprefill
