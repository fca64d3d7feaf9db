#include "core/openblas_core.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace uniprefill {
namespace {

CpuFeatures Avx2() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}

CpuFeatures Avx512(bool bf16) {
  CpuFeatures f = Avx2();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = true;
  f.avx512bf16 = bf16;
  return f;
}

TEST(OpenBlasCoreTest, CoreForEachInstructionSet) {
  EXPECT_EQ(OpenBlasCoreFor(Avx512(true)), "Cooperlake");
  EXPECT_EQ(OpenBlasCoreFor(Avx512(false)), "SkylakeX");
  EXPECT_EQ(OpenBlasCoreFor(Avx2()), "Haswell");
  CpuFeatures partial = Avx2();
  partial.avx512f = true;  // F alone is not SkylakeX's set
  EXPECT_EQ(OpenBlasCoreFor(partial), "Haswell");
  EXPECT_EQ(OpenBlasCoreFor(CpuFeatures{}), "");
}

// On a CPU with AVX2 the GEMMs never run OpenBLAS's generic SSE3 kernels, whether OpenBLAS
// recognised the CPU itself or the test program restarted itself with OPENBLAS_CORETYPE set
// (tests/testing/test_main.cc; this session's Emerald Rapids VM needs it). Under CTest this
// process was started without OPENBLAS_CORETYPE, so the restart ran for real.
TEST(OpenBlasCoreTest, KernelsAreNotTheGenericOnesOnAnAvx2Cpu) {
  const CpuFeatures& f = DetectCpuFeatures();
  if (!(f.avx2 && f.fma)) GTEST_SKIP() << "this CPU lacks AVX2 + FMA";
  const bool restarted = std::getenv("UNIPREFILL_OPENBLAS_CHOSE") != nullptr;
  if (!restarted && std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    GTEST_SKIP() << "OPENBLAS_CORETYPE is set by the user";
  }
  const OpenBlasCore core = DescribeOpenBlasCore(f);
  EXPECT_NE(core.running, "Prescott") << core.note;
  EXPECT_EQ(core.running, std::string(openblas_get_corename()));
  if (restarted) {
    EXPECT_EQ(core.chosen, "Prescott");
    EXPECT_EQ(core.running, OpenBlasCoreFor(f));
    EXPECT_EQ(std::string(std::getenv("OPENBLAS_CORETYPE")), OpenBlasCoreFor(f));
    EXPECT_NE(core.note.find("restarted with OPENBLAS_CORETYPE=" + core.running),
              std::string::npos)
        << core.note;
  } else {
    EXPECT_EQ(core.chosen, core.running);
    EXPECT_EQ(core.note, "");
  }
  // A GEMM on the kernels now in place: 3 x 4 times 4 x 2.
  const float a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const float b[8] = {1, 0, 0, 1, 1, 0, 0, 1};
  float c[6] = {};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 3, 2, 4, 1.0f, a, 4, b, 2, 0.0f, c, 2);
  const float want[6] = {4, 6, 12, 14, 20, 22};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], want[i]) << i;
}

}  // namespace
}  // namespace uniprefill
