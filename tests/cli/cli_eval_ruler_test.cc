// `uniprefill eval ruler` and `uniprefill calibrate` end to end on a tiny random Gemma 3 (byte
// vocabulary, so prompts of ~1,500 tokens hold a RULER instance): the plumbing (JSON, plot,
// determinism, config files) and bad input. The tiny model's answers are noise; accuracy on the
// real model is a benchmark (docs/accuracy.md), not a test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_runner.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill {
namespace {

class CliEvalRulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TinyGemma3Options o;
    o.layers = 12;
    o.context_length = 4096;
    model_ = new std::string(
        testing::WriteTempFile("cli_ruler_tiny12.gguf", testing::BuildTinyGemma3(o)));
  }
  static void TearDownTestSuite() { delete model_; }
  static std::string Model() { return *model_; }
  static std::string* model_;
};
std::string* CliEvalRulerTest::model_ = nullptr;

const std::string kSmall =
    " --tasks niah_single_1,vt --lengths 1500 --samples 2 --drop-layers 5,11";

TEST_F(CliEvalRulerTest, POneGivesDenseResultsAndWritesJsonAndPlot) {
  const std::string out = testing::TempPath("ruler.json");
  const std::string plot = testing::TempPath("ruler.svg");
  CliResult r = RunCli("eval ruler --model " + Model() + kSmall + " --uniprefill-p 1.0 -o " + out +
                       " --plot " + plot);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("niah_single_1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("average"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(out));
  ASSERT_EQ(j["cells"].size(), 2u);
  ASSERT_EQ(j["samples"].size(), 4u);
  for (const auto& s : j["samples"]) {
    // p = 1 keeps every block: the same tokens as dense, so the same answer and score.
    EXPECT_EQ(s["dense"]["prediction"], s["uniprefill"]["prediction"]);
    EXPECT_EQ(s["dense"]["score"], s["uniprefill"]["score"]);
    EXPECT_EQ(s["uniprefill"]["keep_ratio"].get<double>(), 1.0);
    EXPECT_LE(s["prompt_tokens"].get<int>() + (s["task"] == "vt" ? 30 : 128), 1500);
    // With the tiny byte vocabulary one haystack unit is ~6% of 1,500 tokens, so the fit is looser
    // than the 2% the real-tokenizer tests (tests/eval) check.
    EXPECT_GE(s["prompt_tokens"].get<int>() + (s["task"] == "vt" ? 30 : 128), 1425);
    EXPECT_FALSE(s["references"].empty());
  }
  for (const auto& c : j["cells"]) {
    EXPECT_EQ(c["samples"].get<int>(), 2);
    EXPECT_EQ(c["dense"]["accuracy"], c["uniprefill"]["accuracy"]);
  }
  EXPECT_TRUE(j["per_length"][0]["within_bar"].get<bool>());
  const std::string svg = ReadAll(plot);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("niah_single_1"), std::string::npos);
}

TEST_F(CliEvalRulerTest, DeterministicForASeedAndDroppingIsRecorded) {
  const std::string a = testing::TempPath("ruler_a.json"), b = testing::TempPath("ruler_b.json"),
                    c = testing::TempPath("ruler_c.json");
  const std::string args = "eval ruler --model " + Model() + kSmall + " --keep-ratio 0.3";
  ASSERT_EQ(RunCli(args + " -o " + a).exit_code, 0);
  ASSERT_EQ(RunCli(args + " -o " + b).exit_code, 0);
  ASSERT_EQ(RunCli(args + " --seed 2 -o " + c).exit_code, 0);
  const nlohmann::json ja = nlohmann::json::parse(ReadAll(a)),
                       jb = nlohmann::json::parse(ReadAll(b)),
                       jc = nlohmann::json::parse(ReadAll(c));
  for (size_t i = 0; i < ja["samples"].size(); ++i) {
    EXPECT_EQ(ja["samples"][i]["references"], jb["samples"][i]["references"]);
    EXPECT_EQ(ja["samples"][i]["dense"]["prediction"], jb["samples"][i]["dense"]["prediction"]);
    EXPECT_EQ(ja["samples"][i]["uniprefill"]["prediction"],
              jb["samples"][i]["uniprefill"]["prediction"]);
    EXPECT_NE(ja["samples"][i]["references"], jc["samples"][i]["references"]);
    EXPECT_LT(ja["samples"][i]["uniprefill"]["keep_ratio"].get<double>(), 0.6);
    EXPECT_EQ(ja["samples"][i]["uniprefill"]["kept"].size(), 2u);
  }
}

// --keep-ratios adds fixed-ratio settings beside dense and the default ones, on the same prompts,
// each its own column; the existing keys keep their meaning. Keep 1.0 keeps every block, so it
// answers as dense does; keep 0.3 drops.
TEST_F(CliEvalRulerTest, KeepRatiosAddFixedRatioColumnsBesideTheDefault) {
  const std::string out = testing::TempPath("ruler_keeps.json");
  const std::string base = testing::TempPath("ruler_keeps_base.json");
  const std::string args = "eval ruler --model " + Model() + kSmall;
  CliResult r = RunCli(args + " --keep-ratios 1.0,0.3 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("keep 0.3"), std::string::npos) << r.out;
  ASSERT_EQ(RunCli(args + " -o " + base).exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(out));
  const nlohmann::json b = nlohmann::json::parse(ReadAll(base));
  ASSERT_EQ(j["fixed_ratio_settings"].size(), 2u);
  EXPECT_EQ(j["fixed_ratio_settings"][1]["name"], "keep 0.3");
  EXPECT_TRUE(j["prefill_timed"].get<bool>());
  ASSERT_EQ(j["samples"].size(), b["samples"].size());
  for (size_t i = 0; i < j["samples"].size(); ++i) {
    const auto& s = j["samples"][i];
    // The dense and default columns are those of a run without --keep-ratios.
    EXPECT_EQ(s["dense"]["prediction"], b["samples"][i]["dense"]["prediction"]);
    EXPECT_EQ(s["uniprefill"]["prediction"], b["samples"][i]["uniprefill"]["prediction"]);
    ASSERT_EQ(s["fixed_ratio"].size(), 2u);
    EXPECT_EQ(s["fixed_ratio"][0]["target_keep_ratio"].get<double>(), 1.0);
    EXPECT_EQ(s["fixed_ratio"][0]["prediction"], s["dense"]["prediction"]);
    EXPECT_EQ(s["fixed_ratio"][0]["keep_ratio"].get<double>(), 1.0);
    EXPECT_LT(s["fixed_ratio"][1]["keep_ratio"].get<double>(), 0.6);
    EXPECT_EQ(s["fixed_ratio"][1]["kept"].size(), 2u);
  }
  for (const auto& c : j["cells"]) {
    ASSERT_EQ(c["fixed_ratio"].size(), 2u);
    EXPECT_EQ(c["fixed_ratio"][0]["accuracy"], c["dense"]["accuracy"]);
  }
  ASSERT_EQ(j["per_length"][0]["fixed_ratio"].size(), 2u);
  EXPECT_TRUE(j["per_length"][0]["fixed_ratio"][0]["within_bar"].get<bool>());
  EXPECT_FALSE(b.contains("fixed_ratio_settings") && !b["fixed_ratio_settings"].empty());
  ExpectCleanError(args + " --keep-ratios 0.5,2", "--keep-ratios");
}

// --batch runs the same requests through the batch engine: the same answers, scores and kept
// counts as one by one, without prefill times.
TEST_F(CliEvalRulerTest, BatchedRunGivesTheSameAnswersAsOneByOne) {
  const std::string one = testing::TempPath("ruler_one.json");
  const std::string many = testing::TempPath("ruler_batch.json");
  const std::string args = "eval ruler --model " + Model() + kSmall + " --keep-ratios 0.3";
  ASSERT_EQ(RunCli(args + " -o " + one).exit_code, 0);
  CliResult r = RunCli(args + " --batch 5 --kv-cache-memory 256MiB -o " + many);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = nlohmann::json::parse(ReadAll(one));
  const nlohmann::json b = nlohmann::json::parse(ReadAll(many));
  EXPECT_FALSE(b["prefill_timed"].get<bool>());
  EXPECT_EQ(b["batch"].get<int>(), 5);
  EXPECT_EQ(b["preemptions"].get<int>(), 0);
  ASSERT_EQ(a["samples"].size(), b["samples"].size());
  for (size_t i = 0; i < a["samples"].size(); ++i) {
    const auto &x = a["samples"][i], &y = b["samples"][i];
    EXPECT_EQ(x["dense"]["prediction"], y["dense"]["prediction"]) << i;
    EXPECT_EQ(x["uniprefill"]["prediction"], y["uniprefill"]["prediction"]) << i;
    EXPECT_EQ(x["uniprefill"]["kept"], y["uniprefill"]["kept"]) << i;
    EXPECT_EQ(x["fixed_ratio"][0]["prediction"], y["fixed_ratio"][0]["prediction"]) << i;
    EXPECT_EQ(x["fixed_ratio"][0]["kept"], y["fixed_ratio"][0]["kept"]) << i;
    EXPECT_EQ(y["dense"]["prefill_s"].get<double>(), 0.0);
  }
  ExpectCleanError(args + " --batch 2 --kv-cache-memory lots", "--kv-cache-memory");
}

TEST_F(CliEvalRulerTest, BadInputIsACleanError) {
  const std::string m = "eval ruler --model " + Model();
  ExpectCleanError(m + " --tasks niah_single_1,nope", "niah_multikey_2");
  ExpectCleanError(m + " --tasks niah_single_1 --lengths 100", "at least");
  ExpectCleanError(m + " --tasks niah_single_1 --lengths 9000", "context");
  ExpectCleanError(m + " --tasks niah_single_1 --lengths x", "--lengths");
  ExpectCleanError(m + " --tasks niah_single_1 --lengths 1500 --plot /nonexistent/dir/r.svg",
                   "/nonexistent/dir/r.svg");
  ExpectCleanError(m + " --uniprefill-config /nonexistent/c.json", "/nonexistent/c.json");
}

TEST_F(CliEvalRulerTest, CalibrateRecommendsAConfigThatOtherCommandsRead) {
  const std::string cfg = testing::TempPath("calibrated.json");
  const std::string out = testing::TempPath("calibrate.json");
  CliResult r = RunCli("calibrate --model " + Model() +
                       " --tasks niah_single_1 --lengths 1500 --samples 1 --p-values 1.0 "
                       "--keep-ratios 0.3 --drop-layer-sets '5,11;11' "
                       "--window-modes alive,position -o " +
                       out + " --write-config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("recommended"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(ReadAll(out));
  ASSERT_EQ(j["settings"].size(), 8u);  // 2 layer sets x 2 window modes x (1 p + 1 keep ratio)
  for (const auto& s : j["settings"]) {
    if (s["options"]["mode"] == "top-p") {
      // p = 1 is dense: same accuracy, within the bar.
      EXPECT_EQ(s["mean_accuracy"].get<double>(), j["dense_mean_accuracy"].get<double>());
      EXPECT_TRUE(s["meets_bar"].get<bool>());
    } else {
      EXPECT_LT(s["keep_ratio"].get<double>(), 0.6);
    }
  }
  const nlohmann::json c = nlohmann::json::parse(ReadAll(cfg));
  EXPECT_EQ(c, j["recommended"]);
  EXPECT_TRUE(c["enabled"].get<bool>());
  ASSERT_TRUE(c.contains("drop_layers"));
  // The file drives the other commands.
  CliResult run = RunCli("run --model " + Model() + " -p hello -n 2 --uniprefill-config " + cfg);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE((run.out + run.err).find("config " + cfg), std::string::npos) << run.err;
}

TEST_F(CliEvalRulerTest, CalibrateBadInputIsACleanError) {
  const std::string m = "calibrate --model " + Model() + " --tasks niah_single_1 --lengths 1500";
  ExpectCleanError(m + " --p-values 1.5", "--p-values");
  ExpectCleanError(m + " --p-values '' --keep-ratios ''", "nothing to sweep");
  ExpectCleanError(m + " --drop-layer-sets '3'", "full-attention");
  ExpectCleanError(m + " --window-modes diagonal", "diagonal");
  const std::string bad = testing::TempPath("bad_cfg.json");
  std::ofstream(bad) << "{\"top_p\": \"high\"}";
  ExpectCleanError("run --model " + Model() + " -p hi --uniprefill-config " + bad, "top_p");
  std::ofstream(bad) << "{\"topp\": 0.9}";
  ExpectCleanError("run --model " + Model() + " -p hi --uniprefill-config " + bad, "topp");
}

}  // namespace
}  // namespace uniprefill
