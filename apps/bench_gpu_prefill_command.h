// `uniprefill bench gpu-prefill`: time-to-first-token of dense vs UniPrefill (fixed keep ratios)
// prefill on the GPU with a synthetic model of a named shape (random bf16 weights made on the
// device, no files), at several context lengths and batch sizes. Medians of --repeats runs after a
// warm-up; effective TFLOP/s and share of peak; UniPrefill's own overhead (scoring, selection, the
// kept-count sync, compaction); optionally the flash-attention rate. JSON + a table.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace uniprefill::cli {

struct BenchGpuPrefillOptions {
  std::string shape = "llama-3.1-8b";
  std::string contexts = "8192,32768,131072";
  std::string batch_sizes = "1";
  std::string keep_ratios = "0.5,0.3";
  int repeats = 3;
  bool time_attention = false;
  bool compare_sync = false;  // also run each ratio with a host sync per drop (exact layout)
  std::string commit;  // recorded in the JSON
  std::string json_out;
};

CLI::App* AddBenchGpuPrefillCommand(CLI::App& bench_group, BenchGpuPrefillOptions& options);
int BenchGpuPrefillCommand(const BenchGpuPrefillOptions& options);

}  // namespace uniprefill::cli
