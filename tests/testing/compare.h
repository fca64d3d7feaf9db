// Comparison helpers for every CPU and GPU test: errors between an output and its reference.
//
// Invariant: a NaN or an infinity anywhere in either vector, or vectors of different lengths,
// is an infinite error. (`std::max(m, NaN)` keeps `m`, so a hand-written max loop reports 0 for an
// all-NaN output; these helpers are the one place that gets it right.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace uniprefill::testing {

inline constexpr double kInfiniteError = std::numeric_limits<double>::infinity();

// True when both have the same length and every element of both is finite.
inline bool ComparableFinite(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return false;
  }
  return true;
}

// max_i |a_i - b_i|.
inline double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  if (!ComparableFinite(a, b)) return kInfiniteError;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// max_i |v_i| (infinite if any element is not finite).
inline double MaxAbs(std::span<const float> v) {
  double m = 0;
  for (float x : v) {
    if (!std::isfinite(x)) return kInfiniteError;
    m = std::max(m, std::fabs(static_cast<double>(x)));
  }
  return m;
}

// max |out - ref| / max |ref|: the largest difference at the reference's scale (logits tests).
inline double MaxErrorOverMaxAbs(std::span<const float> out, std::span<const float> ref) {
  const double diff = MaxAbsDiff(out, ref);
  if (!std::isfinite(diff)) return kInfiniteError;
  const double scale = MaxAbs(ref);
  return scale > 0 ? diff / scale : diff;
}

// max |out - ref| / max(rms(ref), floor): errors relative to the typical magnitude (op tests).
inline double MaxErrorOverRms(std::span<const float> out, std::span<const float> ref,
                              double floor = 1e-6) {
  const double diff = MaxAbsDiff(out, ref);
  if (!std::isfinite(diff)) return kInfiniteError;
  double ss = 0;
  for (float x : ref) ss += static_cast<double>(x) * x;
  const double rms = ref.empty() ? 0 : std::sqrt(ss / ref.size());
  return diff / std::max(rms, floor);
}

// ||out - ref|| / ||ref|| (||out - ref|| when ref is all zeros): the GPU tests' normalised error.
inline double RelativeL2Error(std::span<const float> out, std::span<const float> ref) {
  if (!ComparableFinite(out, ref)) return kInfiniteError;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// gtest predicate: max |got - ref| <= tol * max |ref|, with both figures (and the first non-finite
// element, if any) in the failure message. Use as EXPECT_TRUE(AllCloseToScale(ref, got, 1e-4)).
inline ::testing::AssertionResult AllCloseToScale(std::span<const float> ref,
                                                  std::span<const float> got, double tol) {
  if (ref.size() != got.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: reference " << ref.size() << ", output " << got.size();
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) {
      return ::testing::AssertionFailure() << "non-finite value at " << i << ": reference "
                                           << ref[i] << ", output " << got[i];
    }
  }
  const double diff = MaxAbsDiff(ref, got), scale = MaxAbs(ref);
  if (diff <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |diff| " << diff << " > " << tol
                                       << " x reference scale " << scale;
}

}  // namespace uniprefill::testing
