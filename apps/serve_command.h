// `uniprefill serve`: load a model, start the continuous-batching BatchEngine and serve the
// OpenAI-compatible HTTP API (server/http_server.h) until SIGINT or SIGTERM.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";  // loopback: nothing outside this machine can connect
  int port = 8000;                 // 0: any free port (printed)
  std::string api_key;
  std::vector<std::string> served_model_names;  // default: the model file's stem
  int64_t kv_cache_memory = int64_t{4} << 30;   // --kv-cache-memory, parsed from "4GiB" etc.
  int kv_block_tokens = 16;
  int max_num_seqs = 256;
  int max_batched_tokens = 0;    // 0: the device's (uniprefill/batch_engine.h DefaultStepBudgets)
  int prefill_only_tokens = -1;  // --prefill-only-tokens (ServingOptions); -1: the device's
  // --target-step-ms: the CPU's budget when max_batched_tokens is not given, calibrated at start
  // (BatchEngine::CalibrateStepBudget); 0: the fixed default.
  int target_step_ms = 500;
  // --attention-slowdown (ServingOptions::attention_slowdown); 0: measured with the CPU's step
  // budget (CalibrateStepBudget), 1 where the budget is not measured.
  double attention_slowdown = 0;
  bool host_sampling = false;  // --host-sampling: CUDA models choose tokens from host logits
  bool no_chunked_prefill = false;  // --no-chunked-prefill: every prefill whole in one step
  std::string log_format = "text";  // --log-format: text or json access log lines
  bool budget_counts_rows = false;  // --budget-counts-rows: chunks not charged for attention
  bool dense_segment_chunks = false;  // --dense-segment-chunks: dense prefills segment-wise
  int max_tokens_default = 4096;  // chat requests without max_tokens
  int threads = 0;                // compute threads (0 = every core)
  DeviceFlags device;  // --device, --gpu-attention
  int ctx_size = 0;
  int http_threads = 64;
  bool f32_decode = false;
  bool quiet = false;  // no progress bar, no per-request log lines
  // The front door's limits (server::ServerConfig has the meaning of each; docs/serving.md).
  int64_t max_body_bytes = int64_t{8} << 20;
  int64_t max_prompt_bytes = int64_t{2} << 20;
  int64_t max_header_bytes = int64_t{32} << 10;
  int max_header_count = 100;
  int64_t max_request_line = int64_t{8} << 10;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double keep_alive_timeout_s = 5;
  int max_connections = 1024;
  double shutdown_timeout_s = 5;
  UniPrefillFlags uniprefill;
};

void AddServeCommand(CLI::App& app, ServeOptions& options);
// 0 after a clean shutdown (SIGINT / SIGTERM); 1 when the model cannot load or the port cannot
// be bound, or under --tensor-parallel when a rank died or hung (docs/serving.md). Ranks other
// than 0 of a tensor-parallel job follow rank 0's steps and end when it does.
int ServeCommand(const ServeOptions& options);

// "4GiB", "512M", "1.5G", "1048576" -> bytes (K/M/G/T and KiB/MiB/GiB/TiB are all powers of 1024;
// a trailing B is optional). False on anything else or a value below 1 byte.
bool ParseByteSize(const std::string& text, int64_t* bytes);

}  // namespace uniprefill::cli
