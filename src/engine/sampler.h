// Sampler: picks the next token of one sequence from its logits, with the sampling parameters of an
// OpenAI-compatible server (plus the usual vLLM / llama.cpp extensions top_k, min_p and
// repetition_penalty).
//
// Order of operations in Sample() (llama.cpp's default chain, without its DRY/typical/XTC steps):
//   1. penalties on the raw logits: repetition, then presence and frequency (see below);
//   2. temperature == 0: greedy, the argmax of the penalised logits (lowest id on ties); stop here;
//   3. top-k: keep the k largest logits (ties: lowest ids first);
//   4. top-p: keep the smallest prefix, in descending order, whose softmax mass reaches top_p;
//   5. min-p: keep tokens with p >= min_p * p_max, both taken from the softmax of what is left;
//   6. temperature: divide the kept logits by it;
//   7. softmax over the kept tokens and one draw from the seeded generator.
// Steps 3-5 look at the distribution at temperature 1, so top_p and min_p mean the same set of
// tokens at every temperature; the temperature only reshapes the probabilities inside that set.
//
// Penalties (token history comes from SetPrompt() and Accept(); Sample() does not record anything):
//   - repetition_penalty r (HF / llama.cpp): every distinct token among the last penalty_last_n
//     tokens of prompt + generated text gets logit / r if its logit is > 0, logit * r otherwise.
//   - presence_penalty a, frequency_penalty f (OpenAI): a token generated c times so far gets
//     logit - a * (c > 0) - f * c. Only generated tokens count, never the prompt (OpenAI's rule).
//
// Determinism: the generator is std::mt19937_64 seeded with `seed` (0 is an ordinary seed, not
// "random"), and the draw is our own inverse-CDF over a 53-bit uniform (the algorithm of
// std::discrete_distribution differs between standard libraries), so a seed and the same logits
// give the same tokens with any compiler (barring last-bit differences of exp at a boundary).
//
// Not for: stop strings, stop token ids or max_tokens (stop_matcher.h and the engine), logit bias,
// logprobs, batching over sequences (one Sampler per sequence).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace uniprefill {

struct SamplerConfig {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties); request range [0, 2]
  int top_k = 40;            // <= 0: no top-k
  float top_p = 0.95f;       // >= 1: no top-p
  uint64_t seed = 0;
  // Fields below were added after the four above so `SamplerConfig{t, k, p, seed}` keeps working;
  // their defaults switch the feature off.
  float min_p = 0.0f;               // 0: no min-p; keep p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; > 1 discourages repeats of the window's tokens
  int penalty_last_n = 64;          // repetition window over prompt + generated; 0: none, -1: all
  float presence_penalty = 0.0f;    // OpenAI, [-2, 2]; subtracted once from generated tokens
  float frequency_penalty = 0.0f;   // OpenAI, [-2, 2]; subtracted once per generated occurrence
};

// Checks a request's sampling parameters; the message names the OpenAI / vLLM field and the value.
// Ranges: temperature [0, 2], top_p (0, 1], min_p [0, 1], top_k >= -1 (0 and vLLM's -1 both
// mean off), presence_penalty and frequency_penalty [-2, 2], repetition_penalty > 0,
// penalty_last_n >= -1. NaN fails every range.
Status ValidateSamplerConfig(const SamplerConfig& config);

// One candidate of the final distribution.
struct TokenProb {
  int32_t id = 0;
  double prob = 0.0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {}

  // Draws the next token (steps 1-7 above). Returns -1 only for empty logits.
  int32_t Sample(std::span<const float> logits);

  // The distribution Sample() draws from (steps 1-6 and the softmax): the kept tokens and their
  // probabilities, summing to 1. Greedy gives the argmax with probability 1. The order is
  // descending logit when top-k or top-p is on, otherwise ascending id. Empty for empty logits.
  std::vector<TokenProb> Distribution(std::span<const float> logits) const;

  // Step 1 alone, in place: what the penalties do to `logits` given the recorded history.
  // Ids in the history outside `logits` are ignored.
  void ApplyPenalties(std::span<float> logits) const;

  // Starts a new sequence: forgets all history and seeds the repetition window with the last
  // penalty_last_n prompt tokens. The prompt never counts for presence or frequency.
  void SetPrompt(std::span<const int32_t> prompt);
  // Records a generated token (call it with every token emitted, after Sample()).
  void Accept(int32_t token);

  const SamplerConfig& config() const { return config_; }
  // Whether step 1 changes anything (penalties need the host logits and this sampler's history).
  bool has_penalties() const { return PenaltiesActive(); }
  // The uniform of the next draw from this sampler's generator (53 bits, what Sample() draws), for
  // a draw made elsewhere: on-device sampling (SequenceStep::sampling) walks steps 2-7 with it.
  double NextUniform();

 private:
  bool PenaltiesActive() const;
  void PushToWindow(int32_t token);

  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::deque<int32_t> window_;                         // last penalty_last_n tokens, oldest first
  std::unordered_map<int32_t, int> window_counts_;     // token -> occurrences in window_
  std::unordered_map<int32_t, int> generated_counts_;  // token -> times generated
};

// Index of the largest logit, lowest id on ties.
int32_t ArgMax(std::span<const float> logits);

}  // namespace uniprefill
