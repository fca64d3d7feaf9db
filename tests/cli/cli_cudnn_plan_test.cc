// `--cudnn-plan fastest|first` through the command line: both are accepted (on the CPU there is no
// cuDNN, so they change nothing and the model generates), a bad name is one error line naming the
// choices; and the engine refuses a bad EngineOptions::gpu_cudnn_plan naming the option.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_runner.h"
#include "testing/tiny_gemma3.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

class CliCudnnPlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new std::string(
        testing::WriteTempFile("cli_cudnn_plan_tiny.gguf", testing::BuildTinyGemma3()));
  }
  static void TearDownTestSuite() { delete tiny_; }
  static std::string Tiny() { return *tiny_; }
  static std::string* tiny_;
};
std::string* CliCudnnPlanTest::tiny_ = nullptr;

TEST_F(CliCudnnPlanTest, BothChoicesAreAccepted) {
  for (const char* plan : {"fastest", "first"}) {
    const CliResult r = RunCli("run --model " + Tiny() +
                               " --prompt 'the theme of the' --max-tokens 4 --cudnn-plan " + plan);
    ASSERT_EQ(r.exit_code, 0) << plan << ": " << r.err;
    EXPECT_FALSE(r.crashed);
    EXPECT_FALSE(r.out.empty()) << plan;
  }
}

TEST_F(CliCudnnPlanTest, AnUnknownChoiceIsOneErrorLine) {
  const CliResult r =
      RunCli("run --model " + Tiny() + " --prompt x --max-tokens 1 --cudnn-plan best");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.crashed);
  EXPECT_NE(r.err.find("--cudnn-plan: best not in {fastest,first}"), std::string::npos) << r.err;
}

TEST_F(CliCudnnPlanTest, TheEngineRefusesAnUnknownChoice) {
  EngineOptions o;
  o.model_path = Tiny();
  o.gpu_cudnn_plan = "best";
  auto engine = Engine::Load(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("gpu_cudnn_plan 'best'"), std::string::npos)
      << engine.status().message();
  EXPECT_NE(engine.status().message().find("--cudnn-plan"), std::string::npos);
}

}  // namespace
}  // namespace uniprefill
