// `uniprefill eval qa` end to end on the real SmolLM2-135M-Instruct (the family needs a model
// that answers questions; a random tiny model would only test plumbing): a short run reports sane
// fields in its table and JSON, and bad flags are clean errors. Accuracy itself is a benchmark
// (docs/accuracy.md), not asserted here. Three samples at 768 tokens: ~15 s on 2 cores.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_runner.h"
#include "testing/required_asset.h"

namespace uniprefill {
namespace {

const std::string kSmolLm2 =
    std::string(UP_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";

TEST(CliEvalQa, ShortRunOnSmolLm2ReportsDenseAndUniPrefillPerLengthAndDepth) {
  UP_REQUIRE_ASSET(kSmolLm2, "SmolLM2-135M-Instruct");
  UP_REQUIRE_ASSET("/usr/share/common-licenses/GPL-3", "The license corpus (Debian base-files)");
  const std::string out = testing::TempPath("qa.json");
  CliResult r = RunCli("eval qa --model " + kSmolLm2 +
                       " --lengths 768 --samples 3 --depths 0.2,0.8 -t 2 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dense EM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("qa: 100%"), std::string::npos) << r.err;  // the progress bar finished
  const nlohmann::json j = nlohmann::json::parse(ReadAll(out));
  EXPECT_EQ(j["command"], "eval qa");
  EXPECT_EQ(j["corpus"], "licenses");
  ASSERT_EQ(j["per_length"].size(), 1u);
  ASSERT_EQ(j["cells"].size(), 2u);  // depths 0.2 (samples 0, 2) and 0.8 (sample 1)
  EXPECT_EQ(j["cells"][0]["samples"].get<int>(), 2);
  EXPECT_EQ(j["cells"][1]["samples"].get<int>(), 1);
  ASSERT_EQ(j["samples"].size(), 3u);
  for (const auto& s : j["samples"]) {
    SCOPED_TRACE(s.dump());
    EXPECT_LE(s["prompt_tokens"].get<int>() + 16, 768);
    EXPECT_GE(s["prompt_tokens"].get<int>() + 16, 0.9 * 768);
    EXPECT_NEAR(s["depth"].get<double>(), s["depth_asked"].get<double>(), 0.15);
    EXPECT_NE(s["fact"].get<std::string>().find(s["answer"].get<std::string>()),
              std::string::npos);
    for (const char* mode : {"dense", "uniprefill"}) {
      EXPECT_GT(s[mode]["prefill_s"].get<double>(), 0);
      // An exact match always contains the answer.
      if (s[mode]["exact_match"].get<bool>()) {
        EXPECT_TRUE(s[mode]["contains"].get<bool>());
      }
    }
    const double keep = s["uniprefill"]["keep_ratio"].get<double>();
    EXPECT_GT(keep, 0);
    EXPECT_LE(keep, 1);
    EXPECT_FALSE(s["uniprefill"]["kept"].empty());  // 768 tokens is enough to select
  }
  const auto& len = j["per_length"][0];
  EXPECT_EQ(len["length"].get<int>(), 768);
  EXPECT_EQ(len["samples"].get<int>(), 3);
  for (const char* mode : {"dense", "uniprefill"}) {
    EXPECT_GE(len[mode]["exact_match"].get<double>(), 0);
    EXPECT_LE(len[mode]["exact_match"].get<double>(), 100);
  }
  EXPECT_GT(len["prefill_speedup"].get<double>(), 0);
}

TEST(CliEvalQa, BadInputIsACleanError) {
  UP_REQUIRE_ASSET(kSmolLm2, "SmolLM2-135M-Instruct");
  const std::string m = "eval qa --model " + kSmolLm2 + " --samples 1";
  ExpectCleanError(m + " --lengths 9000", "exceeds the context of 8192");
  ExpectCleanError(m + " --lengths 40", "at least");
  ExpectCleanError(m + " --lengths x", "--lengths");
  ExpectCleanError(m + " --lengths -5", "--lengths");
  ExpectCleanError(m + " --depths 0.5,1.5", "1.5");
  ExpectCleanError(m + " --depths ,", "--depths");
  ExpectCleanError(m + " --corpus /nonexistent/text.txt", "/nonexistent/text.txt");
  ExpectCleanError(m + " --chat maybe", "--chat");
  ExpectCleanError(m + " -o /nonexistent/dir/qa.json", "/nonexistent/dir/qa.json");
  ExpectCleanError("eval qa --model /nonexistent/model.gguf", "/nonexistent/model.gguf");
}

}  // namespace
}  // namespace uniprefill
