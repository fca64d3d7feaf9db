// Runs RULER-style samples (eval/ruler_tasks.h) through an Engine, dense and with UniPrefill, and
// aggregates accuracy, keep ratios and prefill times per (task, length). Shared by
// `uniprefill eval ruler` and `uniprefill calibrate`.
//
// Non-goals: task generation (ruler_tasks), scoring definitions (ruler_scoring), printing.
// Invariants: a case's prompt ids are built once and reused for every configuration, so dense and
// each UniPrefill setting see identical inputs; decoding is greedy, so results are deterministic
// for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/ruler_tasks.h"
#include "uniprefill/engine.h"

namespace uniprefill::eval {

enum class ChatMode { kAuto, kOn, kOff };

// One prompt, ready to run: the generated sample and its token ids.
struct RulerCase {
  RulerSample sample;
  std::vector<int32_t> ids;  // chat template (when on) + input + answer prefix, with BOS
  int sample_index = 0;
};

// The seed of sample `index` of `task` at `length` (stable across task lists and lengths).
uint64_t RulerSampleSeed(uint64_t seed, std::string_view task, int length, int index);

// Builds `samples` cases per (task, length). Fails on an unknown task, a length the task cannot fit
// or one beyond the engine's context. `on_case` (optional) reports progress.
Result<std::vector<RulerCase>> BuildRulerCases(const Engine& engine,
                                               const std::vector<std::string>& tasks,
                                               const std::vector<int>& lengths, int samples,
                                               uint64_t seed, ChatMode chat,
                                               const std::function<void()>& on_case = nullptr);

// The outcome of one case under one setting.
struct RulerOutcome {
  double score = 0;       // 0..100 (RULER's metric of the task)
  double prefill_s = 0;   // time to first token
  double keep_ratio = 1;  // KeepRatio (uniprefill/engine.h): last drop's kept / prompt (1 = dense)
  std::vector<KeptTokensInfo> kept;
  std::string prediction;
};

// dense: `uniprefill` false; otherwise UniPrefill with the engine's settings, overridden by
// `options` when given.
Result<RulerOutcome> RunRulerCase(Engine& engine, const RulerCase& c, bool uniprefill,
                                  const std::optional<UniPrefillOptions>& options = std::nullopt);

// Means over the cases of one (task, length).
struct RulerCell {
  std::string task;
  int length = 0;
  int samples = 0;
  double accuracy = 0;    // mean score, 0..100
  double prefill_s = 0;   // mean time to first token
  double keep_ratio = 1;  // mean keep ratio
};

// Groups outcomes (parallel to cases) by (task, length) in the order they first appear.
std::vector<RulerCell> AggregateRuler(const std::vector<RulerCase>& cases,
                                      const std::vector<RulerOutcome>& outcomes);

}  // namespace uniprefill::eval
