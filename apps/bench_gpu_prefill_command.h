// `uniprefill bench gpu-prefill`: time-to-first-token of dense vs UniPrefill (fixed keep ratios)
// prefill on the GPU, measured on the product: a random-weight model of a named preset shape
// (model/model_presets.h: vLLM's dummy weights, made on the device, no files) built by MakeModel
// and run by Model::ForwardBatch, the model and layer walk that `serve` and `run` use, with device
// caches per request. Drop layers are the model's own UniPrefill defaults. At several context
// lengths and batch sizes: medians of --repeats runs after a warm-up (host wall clock around each
// forward, which ends with a device sync); effective TFLOP/s and share of peak; UniPrefill's own
// overhead (scoring, selection, compaction: ForwardStats). JSON + a table.
// --chunk-tokens adds chunked prefills (serve's cuts); --phases the walk's time per step.
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
  int layers = 0;             // 0: the preset's depth
  int experts = 0;            // 0: the preset's experts per MoE layer
  bool compare_sync = false;  // also run each ratio with a host sync per drop (exact layout)
  int chunk_tokens = 0;       // > 0: also chunked prefills of this many rows per request
  int kv_block_tokens = 16;   // the device KV pool's block size (serve's default)
  bool phases = false;        // one more run per row, the walk timed step by step
  bool serving_graphs = false;  // Model::PrepareServing(chunk or longest context, longest)
  std::string attention = "auto";  // prefill attention kernel: ours or cudnn (LoadOptions)
  std::string moe_gemm = "ours";   // MoE expert GEMMs: ours, mma-sync or library
  std::string delta_rule = "auto";  // Gated DeltaNet kernel: auto, tensor-core, chunked
  int prefix_split = 2048;  // LoadOptions::gpu_prefix_split_min_keys (0: never split)
  std::string commit;         // recorded in the JSON
  std::string json_out;
};

CLI::App* AddBenchGpuPrefillCommand(CLI::App& bench_group, BenchGpuPrefillOptions& options);
int BenchGpuPrefillCommand(const BenchGpuPrefillOptions& options);

}  // namespace uniprefill::cli
