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

// One configuration of a comparison: dense, the engine's UniPrefill settings, or an override.
struct RulerSetting {
  std::string name;  // "dense", "default", "keep 0.5"
  bool uniprefill = false;
  std::optional<UniPrefillOptions> options;  // with uniprefill: fields that override the engine's
};

// How RunRulerSettings runs its requests. batch <= 1: one at a time through Engine::Generate, so
// prefill_s is each request's own time to first token (comparable across settings). batch > 1:
// through a BatchEngine (continuous batching, whole prefills, up to `batch` requests in flight,
// `kv_cache_memory` bytes of KV), which decodes many requests per step; prefill_s is then 0 (not
// measured: the TTFT of a request that shares its steps with others is not its prefill time).
// Drop layers and window mode are shared by a batch, so settings may override only the selection.
struct RulerRunOptions {
  int batch = 1;
  int64_t kv_cache_memory = int64_t{16} << 30;
};

// What a batched run reports beside the outcomes.
struct RulerRunReport {
  // Requests preempted and recomputed for want of KV memory (their prefill then covers prompt +
  // output so far, which can change a UniPrefill selection): 0 expected; > 0 calls for more memory.
  int64_t preemptions = 0;
};

// Runs every case under every setting: the result's [s][i] is setting s on case i. `progress`
// (optional) gets (runs done, runs total).
Result<std::vector<std::vector<RulerOutcome>>> RunRulerSettings(
    Engine& engine, const std::vector<RulerCase>& cases, const std::vector<RulerSetting>& settings,
    const RulerRunOptions& run, RulerRunReport* report = nullptr,
    const std::function<void(int64_t done, int64_t total)>& progress = nullptr);

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
