#include "engine/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace uniprefill {
namespace {

struct Candidate {
  int32_t id;
  float logit;
};

// Descending logit, ascending id on ties: a strict total order, so results never depend on the
// sort algorithm.
bool ByLogitDesc(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

std::string Num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// `lo <= v <= hi`, false for NaN.
bool InClosed(double v, double lo, double hi) { return v >= lo && v <= hi; }

std::vector<Candidate> AllCandidates(std::span<const float> logits) {
  std::vector<Candidate> c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    // NaN would break the sort's ordering; it never wins.
    const float l = std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
    c[i] = {static_cast<int32_t>(i), l};
  }
  return c;
}

// Step 3. Sorts the kept prefix when it cuts.
void TopK(int k, std::vector<Candidate>& c, bool& sorted) {
  if (k <= 0 || k >= static_cast<int>(c.size())) return;
  std::partial_sort(c.begin(), c.begin() + k, c.end(), ByLogitDesc);
  c.resize(k);
  sorted = true;
}

// Step 4: the smallest descending prefix whose softmax mass (temperature 1) reaches p.
void TopP(float p, std::vector<Candidate>& c, bool& sorted) {
  if (p >= 1.0f || c.size() <= 1) return;
  if (!sorted) std::sort(c.begin(), c.end(), ByLogitDesc);
  sorted = true;
  const double max_logit = c[0].logit;
  std::vector<double> w(c.size());
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) total += w[i] = std::exp(c[i].logit - max_logit);
  double cum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += w[i] / total;
    if (cum >= p) {
      c.resize(i + 1);
      return;
    }
  }
}

// Step 5: p_i >= min_p * p_max  <=>  logit_i - max_logit >= log(min_p). Keeps the order.
void MinP(float min_p, std::vector<Candidate>& c) {
  if (min_p <= 0.0f || c.size() <= 1) return;
  float max_logit = c[0].logit;
  for (const Candidate& x : c) max_logit = std::max(max_logit, x.logit);
  const double threshold = max_logit + std::log(static_cast<double>(min_p));
  std::erase_if(c, [&](const Candidate& x) { return x.logit < threshold; });
}

// Steps 6 and 7's softmax. When nothing has weight (every logit -inf) the first candidate with the
// largest logit takes it all.
std::vector<TokenProb> TemperatureSoftmax(float temperature, const std::vector<Candidate>& c) {
  const auto top = std::min_element(c.begin(), c.end(), ByLogitDesc);
  const double max_logit = top->logit;
  std::vector<TokenProb> out(c.size());
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double w = std::exp((c[i].logit - max_logit) / temperature);
    out[i] = {c[i].id, std::isnan(w) ? 0.0 : w};
    total += out[i].prob;
  }
  if (!(total > 0) || !std::isfinite(total)) return {{top->id, 1.0}};
  for (TokenProb& t : out) t.prob /= total;
  return out;
}

}  // namespace

Status ValidateSamplerConfig(const SamplerConfig& c) {
  if (!InClosed(c.temperature, 0, 2)) {
    return InvalidArgument("temperature must be in [0, 2] (0 = greedy), got " + Num(c.temperature));
  }
  if (!(c.top_p > 0 && c.top_p <= 1)) {
    return InvalidArgument("top_p must be in (0, 1] (1 = off), got " + Num(c.top_p));
  }
  if (!InClosed(c.min_p, 0, 1)) {
    return InvalidArgument("min_p must be in [0, 1] (0 = off), got " + Num(c.min_p));
  }
  if (c.top_k < -1) {
    return InvalidArgument("top_k must be >= 0 (0 or -1 = off), got " + std::to_string(c.top_k));
  }
  if (!InClosed(c.presence_penalty, -2, 2)) {
    return InvalidArgument("presence_penalty must be in [-2, 2] (0 = off), got " +
                           Num(c.presence_penalty));
  }
  if (!InClosed(c.frequency_penalty, -2, 2)) {
    return InvalidArgument("frequency_penalty must be in [-2, 2] (0 = off), got " +
                           Num(c.frequency_penalty));
  }
  if (!(c.repetition_penalty > 0) || !std::isfinite(c.repetition_penalty)) {
    return InvalidArgument("repetition_penalty must be a finite number > 0 (1 = off), got " +
                           Num(c.repetition_penalty));
  }
  if (c.penalty_last_n < -1) {
    return InvalidArgument("penalty_last_n must be >= -1 (0 = no window, -1 = all tokens), got " +
                           std::to_string(c.penalty_last_n));
  }
  return OkStatus();
}

// std::max_element's answer (the first index of the largest logit), 8 lanes at a time: greedy
// decoding scans the whole vocabulary per request and step (16 x 262144 logits a step of 16
// Gemma 3 requests, on one thread). With a NaN anywhere the scalar search decides (its answer
// depends on where the NaN is).
int32_t ArgMax(std::span<const float> logits) {
  const float* x = logits.data();
  const int64_t n = std::ssize(logits);
  const auto scalar = [&] {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  __m256 best8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 nan8 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    best8 = _mm256_max_ps(v, best8);
  }
  if (_mm256_movemask_ps(nan8) != 0) return scalar();
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, best8);
  float best = *std::max_element(lanes, lanes + 8);
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return scalar();
    best = std::max(best, x[i]);
  }
  // The first element equal to the maximum (-0 and +0 compare equal, as they do for "<").
  const __m256 b = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_EQ_OQ));
    if (hit != 0) return static_cast<int32_t>(i + __builtin_ctz(static_cast<unsigned>(hit)));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return static_cast<int32_t>(i);
  }
  return scalar();  // n == 0
}

bool Sampler::PenaltiesActive() const {
  const bool repetition = config_.repetition_penalty != 1.0f && !window_counts_.empty();
  const bool openai = (config_.presence_penalty != 0.0f || config_.frequency_penalty != 0.0f) &&
                      !generated_counts_.empty();
  return repetition || openai;
}

void Sampler::ApplyPenalties(std::span<float> logits) const {
  const auto in_range = [&](int32_t id) { return id >= 0 && id < std::ssize(logits); };
  if (config_.repetition_penalty != 1.0f) {
    for (const auto& [id, count] : window_counts_) {
      if (!in_range(id)) continue;
      float& l = logits[id];
      l = l > 0 ? l / config_.repetition_penalty : l * config_.repetition_penalty;
    }
  }
  if (config_.presence_penalty != 0.0f || config_.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : generated_counts_) {
      if (!in_range(id)) continue;
      logits[id] -= config_.presence_penalty + config_.frequency_penalty * count;
    }
  }
}

void Sampler::PushToWindow(int32_t token) {
  if (config_.penalty_last_n == 0) return;
  window_.push_back(token);
  ++window_counts_[token];
  if (config_.penalty_last_n > 0 && std::ssize(window_) > config_.penalty_last_n) {
    const int32_t old = window_.front();
    window_.pop_front();
    if (--window_counts_[old] == 0) window_counts_.erase(old);
  }
}

void Sampler::SetPrompt(std::span<const int32_t> prompt) {
  window_.clear();
  window_counts_.clear();
  generated_counts_.clear();
  // Only the window's tokens: the earlier ones would be pushed and dropped again (a 130K-token
  // prompt took 5.6 ms of the engine thread, the GPU idle meanwhile).
  if (config_.penalty_last_n > 0 && std::ssize(prompt) > config_.penalty_last_n) {
    prompt = prompt.last(static_cast<size_t>(config_.penalty_last_n));
  }
  for (int32_t t : prompt) PushToWindow(t);
}

void Sampler::Accept(int32_t token) {
  PushToWindow(token);
  ++generated_counts_[token];
}

std::vector<TokenProb> Sampler::Distribution(std::span<const float> raw) const {
  if (raw.empty()) return {};
  std::vector<float> penalized;
  std::span<const float> logits = raw;
  if (PenaltiesActive()) {
    penalized.assign(raw.begin(), raw.end());
    ApplyPenalties(penalized);
    logits = penalized;
  }
  if (config_.temperature <= 0.0f) return {{ArgMax(logits), 1.0}};
  std::vector<Candidate> c = AllCandidates(logits);
  bool sorted = false;
  TopK(config_.top_k, c, sorted);
  TopP(config_.top_p, c, sorted);
  MinP(config_.min_p, c);
  return TemperatureSoftmax(config_.temperature, c);
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(std::span<const float> logits) {
  const std::vector<TokenProb> dist = Distribution(logits);
  if (dist.empty()) return -1;
  if (dist.size() == 1) return dist[0].id;  // greedy or a single survivor: no draw
  // A uniform in [0, 1) from the top 53 bits, then the inverse CDF: portable, unlike
  // std::discrete_distribution whose algorithm each standard library picks.
  const double u = NextUniform();
  double cum = 0;
  for (const TokenProb& t : dist) {
    cum += t.prob;
    if (u < cum) return t.id;
  }
  // Rounding left cum a hair below 1: the last token with any weight.
  for (auto it = dist.rbegin(); it != dist.rend(); ++it) {
    if (it->prob > 0) return it->id;
  }
  return dist[0].id;
}

}  // namespace uniprefill
