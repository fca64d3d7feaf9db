#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace uniprefill {

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (config_.temperature <= 0.0f) return ArgMax(logits);
  const int n = static_cast<int>(logits.size());
  const int k = config_.top_k > 0 ? std::min(config_.top_k, n) : n;
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(k);
  std::vector<double> probs(k);
  const double max_logit = logits[ids[0]];
  double total = 0;
  for (int i = 0; i < k; ++i) {
    probs[i] = std::exp((logits[ids[i]] - max_logit) / config_.temperature);
    total += probs[i];
  }
  int keep = k;
  if (config_.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < k; ++i) {
      cum += probs[i] / total;
      if (cum >= config_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<int> dist(probs.begin(), probs.begin() + keep);
  return ids[dist(rng_)];
}

}  // namespace uniprefill
