// `uniprefill bench step`: the time of one forward of a given mix of work (decodes, dense chunks
// over cached prefixes, a prompt's last chunk, UniPrefill segment-0 chunks: loadgen/step_mix.h),
// repeated and reported as medians, on a random-weight model of a preset shape (as bench
// gpu-prefill builds it) on the CPU or the GPU. Mixes that differ in one part measure that part's
// cost in a served step: a decode beside a chunk, a second prompt's chunk, the layers only the
// decodes run beside a segment-wise chunk, the LM head. With --budget the device model is prepared
// as serve prepares it (Model::PrepareServing: the step-budget graphs and measured prices). JSON +
// a table.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace uniprefill::cli {

struct BenchStepOptions {
  std::string device = "cpu";
  int threads = 0;  // CPU workers (0: every core)
  std::string shape = "llama-3.1-8b";
  int layers = 0;   // 0: the preset's depth
  int experts = 0;  // 0: the preset's experts per MoE layer
  std::string mixes;
  int warmup = 2;
  int repeats = 7;
  double keep_ratio = 0.5;  // s items: fixed-ratio selection at the model's default drop layers
  int budget = 0;           // > 0: Model::PrepareServing(budget, longest context), as serve
  int kv_block_tokens = 16;
  std::string sampling = "device";  // decodes and last chunks: device (as serve) or host logits
  std::string attention = "auto";   // GPU prefill attention kernels (LoadOptions)
  int prefix_split = 2048;          // as serve's --gpu-prefix-split
  std::string commit;
  std::string json_out;
};

CLI::App* AddBenchStepCommand(CLI::App& bench_group, BenchStepOptions& options);
int BenchStepCommand(const BenchStepOptions& options);

}  // namespace uniprefill::cli
