// `uniprefill bench gpu-decode`: the inter-token latency of batched decode on the GPU, measured on
// the product (a random-weight model of a named preset shape built by MakeModel and run by
// Model::ForwardBatch, the walk `serve` uses). B requests are prefilled with L random tokens, then
// decoded together step by step; each step's wall clock covers the forward and choosing the next
// tokens, either from host logits (what `serve --host-sampling` does: logits [B, vocab] copied back
// and an argmax per row on the host) or on the device (SequenceStep::sampling: only ids travel).
// Reports medians and p90 per (L, B, mode), tokens/s, and the HBM floor of a step (weights + the
// KV cache read once at the datasheet bandwidth), with decode steps as CUDA graphs and without
// (LoadOptions::gpu_decode_graphs: one model load each). JSON + a table.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace uniprefill::cli {

struct BenchGpuDecodeOptions {
  std::string shape = "llama-3.1-8b";
  std::string contexts = "1024,32768";  // prompt tokens per request before decoding
  std::string batch_sizes = "1,4,32";
  std::string sampling = "host,device";  // modes to time
  std::string graphs = "on,off";         // decode steps as CUDA graphs, or kernel by kernel
  int steps = 32;                        // timed decode steps per point (after 4 warm-up steps)
  int layers = 0;                        // 0: the preset's depth
  int experts = 0;                       // 0: the preset's experts per MoE layer
  std::string attention = "auto";        // prefill attention kernel (LoadOptions)
  std::string commit;                    // recorded in the JSON
  std::string json_out;
};

CLI::App* AddBenchGpuDecodeCommand(CLI::App& bench_group, BenchGpuDecodeOptions& options);
int BenchGpuDecodeCommand(const BenchGpuDecodeOptions& options);

}  // namespace uniprefill::cli
