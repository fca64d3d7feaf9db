// `uniprefill eval ruler`: RULER-style long-context tasks generated in C++ (no external data), run
// dense, with UniPrefill's default settings and (--keep-ratios) at fixed keep ratios, in one
// invocation on the same prompts, scored with RULER's metrics; one by one or (--batch) through the
// batch engine.
// Prints a table per (task, length), writes JSON (--output) and an SVG plot (--plot) of accuracy vs
// context length, dense and UniPrefill side by side, annotated with keep ratio and prefill speedup.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "eval/ruler_runner.h"
#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct EvalRulerOptions {
  std::string model;
  std::string tasks = "all";
  std::string lengths = "4096,8192,16384";
  int samples = 50;
  uint64_t seed = 1;
  std::string chat = "auto";
  int threads = 0;
  DeviceFlags device;  // --device, --gpu-attention
  std::string output;
  std::string plot;
  UniPrefillFlags uniprefill;
  std::string keep_ratios;  // fixed-ratio settings run beside the default ones ("0.5,0.3")
  int batch = 1;            // requests in flight (> 1: BatchEngine, prefill times not measured)
  std::string kv_cache_memory = "16GiB";  // the BatchEngine's KV memory with batch > 1
};

CLI::App* AddEvalRulerCommand(CLI::App& eval, EvalRulerOptions& options);
int EvalRulerCommand(const EvalRulerOptions& options);

// "all" -> every task; otherwise a comma list, each a known task. Shared with calibrate.
bool ParseRulerTaskList(const std::string& text, std::vector<std::string>* tasks,
                        std::string* error);
// "0.5,0.3" -> {0.5, 0.3}; each value in (0, 1], empty items ignored. Shared with calibrate.
Result<std::vector<float>> ParseUnitFloats(const std::string& text, const std::string& flag);
// --chat auto|on|off (CLI11 has checked the value).
eval::ChatMode ParseChatMode(const std::string& text);
// "4K" for 4096, "1500" otherwise: the length column of the eval tables.
std::string LengthLabel(int tokens);
// The current time as ISO 8601 UTC, for the "date" field of the eval JSON files.
std::string UtcNow();

}  // namespace uniprefill::cli
