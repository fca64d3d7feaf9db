#include "ops/gemm_tune_plan.h"

#include <cmath>

namespace uniprefill::ops {

int64_t GemmTuneBucket(int64_t rows, const GemmTuneRows& tune) {
  if (rows <= 0 || tune.step <= 0 || rows > tune.max_rows) return 0;
  return (rows + tune.step - 1) / tune.step * tune.step;
}

std::vector<int64_t> GemmTuneBuckets(const GemmTuneRows& tune) {
  std::vector<int64_t> buckets;
  if (tune.step <= 0 || tune.max_rows <= 0) return buckets;
  for (int64_t top = tune.step; top < tune.max_rows + tune.step; top += tune.step) {
    buckets.push_back(top);
  }
  return buckets;
}

int PickGemmCandidate(const std::vector<double>& ms, double min_gain) {
  const auto usable = [](double t) { return std::isfinite(t) && t > 0; };
  int best = -1;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (usable(ms[i]) && (best < 0 || ms[i] < ms[static_cast<size_t>(best)])) {
      best = static_cast<int>(i);
    }
  }
  if (best <= 0 || !usable(ms[0])) return best < 0 ? 0 : best;
  return ms[static_cast<size_t>(best)] * (1 + min_gain) < ms[0] ? best : 0;
}

}  // namespace uniprefill::ops
