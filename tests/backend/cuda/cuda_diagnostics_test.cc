// DiagnosticsFromEnvironment (backend/cuda/cuda_diagnostics.h): the Hopper attention kernel's
// launch choices as the environment asks for them, their defaults, and a clear error naming the
// variable for a value it does not know. Reads only the environment: runs without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_diagnostics.h"

namespace uniprefill::cuda_backend {
namespace {

using ops::cuda::WgmmaAttentionSchedule;

constexpr const char* kOrder = "UNIPREFILL_CUDA_WGMMA_GROUP_ORDER";
constexpr const char* kSkip = "UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE";
constexpr const char* kSchedule = "UNIPREFILL_CUDA_WGMMA_SCHEDULE";

// Sets variables for the test's scope and unsets them after.
class ScopedVariables {
 public:
  explicit ScopedVariables(std::vector<std::pair<const char*, const char*>> values)
      : values_(std::move(values)) {
    for (const auto& [name, value] : values_) setenv(name, value, 1);
  }
  ~ScopedVariables() {
    for (const auto& [name, value] : values_) unsetenv(name);
  }

 private:
  std::vector<std::pair<const char*, const char*>> values_;
};

// Defaults since the 32nd session's H200 call measured all three faster together.
TEST(CudaDiagnosticsTest, TheKernelsLaunchChoicesDefaultToGroupOrderSkippedRescaleAndPvBesideExp) {
  unsetenv(kOrder);
  unsetenv(kSkip);
  unsetenv(kSchedule);
  const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->wgmma_group_order);
  EXPECT_TRUE(d->wgmma_skip_unit_rescale);
  EXPECT_EQ(d->wgmma_schedule, WgmmaAttentionSchedule::kIntraOverlapPvBesideExp);
}

TEST(CudaDiagnosticsTest, TheKernelsLaunchChoicesAreReadFromTheEnvironment) {
  {
    ScopedVariables v({{kOrder, "1"}, {kSkip, "1"}, {kSchedule, "pv_beside_exp"}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_TRUE(d->wgmma_group_order);
    EXPECT_TRUE(d->wgmma_skip_unit_rescale);
    EXPECT_EQ(d->wgmma_schedule, WgmmaAttentionSchedule::kIntraOverlapPvBesideExp);
  }
  for (const auto& [name, want] :
       {std::pair{"overlap", WgmmaAttentionSchedule::kIntraOverlap},
        std::pair{"serial", WgmmaAttentionSchedule::kSerial},
        std::pair{"pv_beside_exp", WgmmaAttentionSchedule::kIntraOverlapPvBesideExp}}) {
    ScopedVariables v({{kOrder, "0"}, {kSkip, "0"}, {kSchedule, name}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_FALSE(d->wgmma_group_order);
    EXPECT_FALSE(d->wgmma_skip_unit_rescale);
    EXPECT_EQ(d->wgmma_schedule, want) << name;
  }
}

TEST(CudaDiagnosticsTest, AnUnknownLaunchChoiceIsAnErrorNamingTheVariableAndItsValues) {
  for (const auto& [name, value, says] :
       {std::tuple{kOrder, "yes", "must be 0 or 1"}, std::tuple{kSkip, "2", "must be 0 or 1"},
        std::tuple{kSchedule, "pingpong", "overlap, pv_beside_exp or serial"}}) {
    ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{name, value}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_FALSE(d.ok()) << name << "=" << value;
    EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
    const std::string& m = d.status().message();
    EXPECT_NE(m.find(name), std::string::npos) << m;
    EXPECT_NE(m.find(says), std::string::npos) << m;
    EXPECT_NE(m.find(value), std::string::npos) << m;
  }
}

// The FFN's fused gated GEMM: off unless asked for (measured no faster), then from 256 rows; a bad
// value of any of its variables is an error naming it.
TEST(CudaDiagnosticsTest, TheGatedGemmIsOptInFrom256Rows) {
  constexpr const char* kOn = "UNIPREFILL_CUDA_GATED_GEMM";
  constexpr const char* kMin = "UNIPREFILL_CUDA_GATED_GEMM_MIN_ROWS";
  constexpr const char* kVariant = "UNIPREFILL_CUDA_GATED_GEMM_VARIANT";
  unsetenv(kOn);
  unsetenv(kMin);
  unsetenv(kVariant);
  {
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_FALSE(d->gated_gemm);
    EXPECT_EQ(d->gated_gemm_min_rows, 256);
    EXPECT_EQ(d->gated_gemm_variant, 0);
  }
  {
    ScopedVariables v({{kOn, "1"}, {kMin, "1"}, {kVariant, "2"}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_TRUE(d->gated_gemm);
    EXPECT_EQ(d->gated_gemm_min_rows, 1);
    EXPECT_EQ(d->gated_gemm_variant, 2);
  }
  for (const auto& [name, value] :
       {std::pair{kOn, "yes"}, std::pair{kMin, "0"}, std::pair{kMin, "12rows"},
        std::pair{kMin, "-5"}, std::pair{kVariant, "-1"}, std::pair{kVariant, "fast"}}) {
    ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{name, value}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_FALSE(d.ok()) << name << "=" << value;
    EXPECT_NE(d.status().message().find(name), std::string::npos) << d.status().message();
  }
}

// UNIPREFILL_CUDA_GEMM_MAX_ROWS: whole GEMMs unless set; a row count or an error naming it.
// Kept queries run on the Hopper kernel unless the old path is asked for by name.
TEST(CudaDiagnosticsTest, KeptQueriesRunOnTheHopperKernelUnlessAsked) {
  constexpr const char* kFlash = "UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH";
  unsetenv(kFlash);
  {
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_FALSE(d->kept_queries_on_flash);
  }
  {
    ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{kFlash, "1"}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_TRUE(d->kept_queries_on_flash);
  }
  ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{kFlash, "yes please"}});
  EXPECT_FALSE(DiagnosticsFromEnvironment().ok());
}

// The output projections add into the residual only when asked (unmeasured: opt-in).
TEST(CudaDiagnosticsTest, TheResidualInTheGemmIsOptIn) {
  constexpr const char* kFused = "UNIPREFILL_CUDA_RESIDUAL_IN_GEMM";
  unsetenv(kFused);
  {
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_FALSE(d->residual_in_gemm);
  }
  {
    ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{kFused, "1"}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_TRUE(d->residual_in_gemm);
  }
  ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{kFused, "on"}});
  EXPECT_FALSE(DiagnosticsFromEnvironment().ok());
}

TEST(CudaDiagnosticsTest, GemmRowBlocksAreOffUnlessAsked) {
  constexpr const char* kMax = "UNIPREFILL_CUDA_GEMM_MAX_ROWS";
  unsetenv(kMax);
  {
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(d->gemm_max_rows, 0);
  }
  {
    ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{kMax, "4096"}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(d->gemm_max_rows, 4096);
  }
  for (const char* bad : {"-1", "4k", "99999999999"}) {
    ScopedVariables v(std::vector<std::pair<const char*, const char*>>{{kMax, bad}});
    const Result<CudaDiagnostics> d = DiagnosticsFromEnvironment();
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find(kMax), std::string::npos) << d.status().message();
  }
}

}  // namespace
}  // namespace uniprefill::cuda_backend
