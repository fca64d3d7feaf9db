// The OpenBLAS core repair as a user meets it: `uniprefill info` started without (and with)
// OPENBLAS_CORETYPE. The info line comes before the model is opened, so no model is needed.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_runner.h"
#include "core/cpu_isa.h"
#include "core/openblas_core.h"

namespace uniprefill {
namespace {

constexpr const char* kNoModel = "info -m /nonexistent/uniprefill-openblas-test.gguf";

std::string OpenBlasLine(const std::string& out) {
  const size_t at = out.find("openblas: ");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

TEST(CliOpenBlasCoreTest, GenericKernelsAreReplacedOnAnAvx2Cpu) {
  const CpuFeatures& f = DetectCpuFeatures();
  if (OpenBlasCoreFor(f).empty()) GTEST_SKIP() << "this CPU lacks AVX2 + FMA";
  CliResult r = RunCliWithEnv("env -u OPENBLAS_CORETYPE -u UNIPREFILL_OPENBLAS_CHOSE", kNoModel);
  EXPECT_FALSE(r.crashed) << r.err;
  const std::string line = OpenBlasLine(r.out);
  ASSERT_FALSE(line.empty()) << r.out;
  EXPECT_EQ(line.find("kernels Prescott"), std::string::npos) << line;
  if (line.find("restarted") != std::string::npos) {
    EXPECT_NE(line.find("kernels " + OpenBlasCoreFor(f) + " (OpenBLAS did not recognise"),
              std::string::npos)
        << line;
  }
}

TEST(CliOpenBlasCoreTest, UsersCoreTypeIsKept) {
  const CpuFeatures& f = DetectCpuFeatures();
  if (OpenBlasCoreFor(f).empty()) GTEST_SKIP() << "this CPU lacks AVX2 + FMA";
  CliResult r =
      RunCliWithEnv("env -u UNIPREFILL_OPENBLAS_CHOSE OPENBLAS_CORETYPE=Prescott", kNoModel);
  EXPECT_FALSE(r.crashed) << r.err;
  const std::string line = OpenBlasLine(r.out);
  EXPECT_NE(line.find("kernels Prescott (OPENBLAS_CORETYPE is set: left as the user chose)"),
            std::string::npos)
      << line;
}

}  // namespace
}  // namespace uniprefill
