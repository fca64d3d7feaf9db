// `--cpu-isa` and UNIPREFILL_CPU_ISA through the command line: `uniprefill info` prints the CPU's
// features and the level's kernels, the variable sets the option's default, a bad name is one
// error line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli/cli_runner.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill {
namespace {

class CliCpuIsaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ =
        new std::string(testing::WriteTempFile("cli_isa_tiny.gguf", testing::BuildTinyGemma3()));
  }
  static void TearDownTestSuite() { delete tiny_; }
  static std::string Tiny() { return *tiny_; }
  static std::string* tiny_;
};
std::string* CliCpuIsaTest::tiny_ = nullptr;

TEST_F(CliCpuIsaTest, InfoPrintsTheFeaturesAndTheForcedLevelsKernels) {
  const CliResult r = RunCli("info --model " + Tiny() + " --cpu-isa avx2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu features: avx2 fma f16c"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu isa: avx2 (requested avx2;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  Q4_K   avx2 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  attention tiles: avx2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos) << "the model part follows";
}

TEST_F(CliCpuIsaTest, TheEnvironmentVariableSetsTheDefaultAndTheOptionWins) {
  ASSERT_EQ(setenv("UNIPREFILL_CPU_ISA", "avx2", 1), 0);
  const CliResult from_env = RunCli("info --model " + Tiny());
  const CliResult from_option = RunCli("info --model " + Tiny() + " --cpu-isa auto");
  unsetenv("UNIPREFILL_CPU_ISA");
  ASSERT_EQ(from_env.exit_code, 0) << from_env.err;
  EXPECT_NE(from_env.out.find("cpu isa: avx2 (requested avx2;"), std::string::npos) << from_env.out;
  ASSERT_EQ(from_option.exit_code, 0) << from_option.err;
  EXPECT_NE(from_option.out.find("(requested auto;"), std::string::npos) << from_option.out;
}

TEST_F(CliCpuIsaTest, AnUnknownLevelIsOneErrorLine) {
  const CliResult r = RunCli("run --model " + Tiny() + " --prompt x --max-tokens 1 --cpu-isa sse4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.crashed);
  EXPECT_NE(r.err.find("--cpu-isa: sse4 not in {auto,avx2,avx512,avx512-vnni,avx512-bf16,amx-bf16}"),
            std::string::npos)
      << r.err;
}

TEST_F(CliCpuIsaTest, RunAtTheBaselineLevelGeneratesText) {
  const CliResult r =
      RunCli("run --model " + Tiny() + " --prompt 'the theme' --max-tokens 4 --cpu-isa avx2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace
}  // namespace uniprefill
