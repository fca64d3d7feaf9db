// The comparison helpers every test relies on: exact figures on small vectors, and a NaN or an
// infinity anywhere (output or reference) or a length mismatch is an infinite error, never 0.
#include "testing/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace uniprefill::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CompareTest, FiguresOnFiniteVectors) {
  const std::vector<float> ref = {3, -4, 0, 0};  // rms 2.5, max |x| 4, ||x|| 5
  const std::vector<float> out = {3, -4, 0.5f, -1};
  EXPECT_DOUBLE_EQ(MaxAbsDiff(out, ref), 1.0);
  EXPECT_DOUBLE_EQ(MaxAbs(ref), 4.0);
  EXPECT_DOUBLE_EQ(MaxErrorOverMaxAbs(out, ref), 0.25);
  EXPECT_DOUBLE_EQ(MaxErrorOverRms(out, ref), 0.4);
  EXPECT_DOUBLE_EQ(RelativeL2Error(out, ref), std::sqrt(1.25) / 5);
  EXPECT_TRUE(AllCloseToScale(ref, out, 0.25));
  EXPECT_FALSE(AllCloseToScale(ref, out, 0.24));
}

TEST(CompareTest, IdenticalVectorsHaveZeroError) {
  const std::vector<float> v = {1, -2, 3.5f};
  EXPECT_EQ(MaxAbsDiff(v, v), 0.0);
  EXPECT_EQ(MaxErrorOverRms(v, v), 0.0);
  EXPECT_EQ(RelativeL2Error(v, v), 0.0);
  EXPECT_TRUE(AllCloseToScale(v, v, 0.0));
}

TEST(CompareTest, AllNaNOutputIsAnInfiniteError) {
  const std::vector<float> ref = {1, 2, 3};
  const std::vector<float> nan(3, kNaN);
  EXPECT_EQ(MaxAbsDiff(nan, ref), kInfiniteError);
  EXPECT_EQ(MaxErrorOverMaxAbs(nan, ref), kInfiniteError);
  EXPECT_EQ(MaxErrorOverRms(nan, ref), kInfiniteError);
  EXPECT_EQ(RelativeL2Error(nan, ref), kInfiniteError);
  EXPECT_FALSE(AllCloseToScale(ref, nan, 1e30));
}

TEST(CompareTest, OneNonFiniteElementAnywhereIsAnInfiniteError) {
  const std::vector<float> ref = {1, 2, 3, 4};
  for (float bad : {kNaN, kInf, -kInf}) {
    for (size_t at = 0; at < ref.size(); ++at) {
      std::vector<float> out = ref;
      out[at] = bad;
      EXPECT_EQ(MaxAbsDiff(out, ref), kInfiniteError) << at;
      EXPECT_EQ(MaxErrorOverRms(out, ref), kInfiniteError) << at;
      EXPECT_EQ(RelativeL2Error(out, ref), kInfiniteError) << at;
      EXPECT_FALSE(AllCloseToScale(ref, out, 1e30)) << at;
      // A broken reference is as wrong as a broken output.
      EXPECT_EQ(MaxAbsDiff(ref, out), kInfiniteError) << at;
      EXPECT_EQ(RelativeL2Error(ref, out), kInfiniteError) << at;
      EXPECT_EQ(MaxErrorOverMaxAbs(ref, out), kInfiniteError) << at;
      EXPECT_FALSE(AllCloseToScale(out, ref, 1e30)) << at;
    }
  }
}

TEST(CompareTest, LengthMismatchIsAnInfiniteError) {
  const std::vector<float> a = {1, 2, 3}, b = {1, 2};
  EXPECT_EQ(MaxAbsDiff(a, b), kInfiniteError);
  EXPECT_EQ(RelativeL2Error(a, b), kInfiniteError);
  EXPECT_FALSE(AllCloseToScale(a, b, 1e30));
}

TEST(CompareTest, AllZeroReferenceFallsBackToAbsoluteError) {
  const std::vector<float> zeros(4, 0.0f), out = {0, 0, 3, 4};
  EXPECT_DOUBLE_EQ(RelativeL2Error(out, zeros), 5.0);
  EXPECT_DOUBLE_EQ(MaxErrorOverMaxAbs(out, zeros), 4.0);
  EXPECT_DOUBLE_EQ(MaxErrorOverRms(out, zeros, 1.0), 4.0);
}

}  // namespace
}  // namespace uniprefill::testing
