// `uniprefill run`: load a model, answer one prompt, stream the text, print timings.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

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
  int threads = 0;
  int ctx_size = 0;
  bool ignore_eos = false;
  bool f32_decode = false;
  bool quiet = false;        // no progress bars, no streaming echo of the prompt stats
  std::string json_out;      // write timings and output as JSON here
  UniPrefillFlags uniprefill;
};

void AddRunCommand(CLI::App& app, RunOptions& options);
// The default model path: next to the source tree's models/ folder, or ./models/.
std::string DefaultModelPath();
int RunCommand(const RunOptions& options);

}  // namespace uniprefill::cli
