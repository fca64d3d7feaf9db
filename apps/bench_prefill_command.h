// `uniprefill bench-prefill`: time-to-first-token of dense vs UniPrefill prefill on one loaded
// model, at several prompt lengths cut from one long text, alternating the two so both see the
// same machine state; medians of --repeats runs, kept tokens per drop layer, and UniPrefill's own
// overhead (scoring, selection, compaction) as a share of the UniPrefill prefill. JSON + a table.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct BenchPrefillOptions {
  std::string model;
  std::string prompt_file;
  bool random_tokens = false;  // random ids instead of a text (checkpoints without a tokenizer)
  std::string lengths = "4096,8192,16384,32768";
  int repeats = 3;
  int threads = 0;
  DeviceFlags device;  // --device, --gpu-attention
  std::string json_out;
  UniPrefillFlags uniprefill;
};

void AddBenchPrefillCommand(CLI::App& app, BenchPrefillOptions& options);
int BenchPrefillCommand(const BenchPrefillOptions& options);

}  // namespace uniprefill::cli
