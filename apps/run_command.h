// `uniprefill run`: load a model, answer one prompt, stream the text, print timings.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct RunOptions {
  std::string model;         // GGUF path (default: the model installed by scripts/setup.sh)
  std::string prompt;
  std::string prompt_file;
  std::string prompt_tokens_file;  // JSON array of token ids (benchmarks, tests)
  bool chat = false;
  std::string system;        // optional system message with --chat
  int max_tokens = 128;
  float temperature = 0.0f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;  // llama.cpp's name for repetition_penalty
  int repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::string> stop;        // stop strings (repeatable flag)
  std::vector<int32_t> stop_token_ids;  // repeatable flag
  int threads = 0;
  DeviceFlags device;  // --device, --gpu-attention
  int ctx_size = 0;
  bool ignore_eos = false;
  bool f32_decode = false;
  int prefill_chunk = 0;               // EngineOptions::dense_prefill_chunk
  bool quiet = false;        // no progress bars, no streaming echo of the prompt stats
  std::string json_out;      // write timings and output as JSON here
  UniPrefillFlags uniprefill;
};

void AddRunCommand(CLI::App& app, RunOptions& options);
// The default model path: next to the source tree's models/ folder, or ./models/.
std::string DefaultModelPath();
int RunCommand(const RunOptions& options);

}  // namespace uniprefill::cli
