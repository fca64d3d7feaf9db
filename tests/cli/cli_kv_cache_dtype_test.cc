// `--kv-cache-dtype f16|f32` through the command line: both run and generate (f16 is the
// default), a bad name is one error line naming the choices; and the engine refuses a bad
// EngineOptions::kv_cache_dtype with an InvalidArgument that names the option.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_runner.h"
#include "testing/tiny_gemma3.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

class CliKvCacheDtypeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new std::string(testing::WriteTempFile("cli_kv_dtype_tiny.gguf",
                                                   testing::BuildTinyGemma3()));
  }
  static void TearDownTestSuite() { delete tiny_; }
  static std::string Tiny() { return *tiny_; }
  static std::string* tiny_;
};
std::string* CliKvCacheDtypeTest::tiny_ = nullptr;

TEST_F(CliKvCacheDtypeTest, BothTypesGenerate) {
  for (const char* dtype : {"f16", "f32"}) {
    const CliResult r = RunCli("run --model " + Tiny() +
                               " --prompt 'the theme of the' --max-tokens 6 --kv-cache-dtype " +
                               dtype);
    ASSERT_EQ(r.exit_code, 0) << dtype << ": " << r.err;
    EXPECT_FALSE(r.crashed);
    EXPECT_FALSE(r.out.empty()) << dtype;
  }
}

TEST_F(CliKvCacheDtypeTest, AnUnknownTypeIsOneErrorLine) {
  const CliResult r =
      RunCli("run --model " + Tiny() + " --prompt x --max-tokens 1 --kv-cache-dtype q8_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.crashed);
  EXPECT_NE(r.err.find("--kv-cache-dtype: q8_0 not in {f16,f32}"), std::string::npos) << r.err;
}

TEST_F(CliKvCacheDtypeTest, TheEngineRefusesAnUnknownType) {
  EngineOptions o;
  o.model_path = Tiny();
  o.kv_cache_dtype = "bf16";
  auto engine = Engine::Load(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("kv_cache_dtype 'bf16'"), std::string::npos)
      << engine.status().message();
}

}  // namespace
}  // namespace uniprefill
