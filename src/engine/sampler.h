// Sampler: picks the next token from logits. Greedy at temperature 0; otherwise temperature,
// then top-k, then top-p (nucleus), then a draw from a seeded generator, so a seed reproduces a run.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace uniprefill {

struct SamplerConfig {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 40;            // <= 0: no top-k
  float top_p = 0.95f;       // >= 1: no top-p
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {}
  int32_t Sample(std::span<const float> logits);

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
};

int32_t ArgMax(std::span<const float> logits);

}  // namespace uniprefill
