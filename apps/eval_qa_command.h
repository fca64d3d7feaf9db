// `uniprefill eval qa`: long-document question answering on natural text. A fact sentence with a
// made-up answer ("The code name of the Oslo project is Bluefinch.") is placed at a chosen depth
// of an excerpt of a real corpus (the license texts or the repository's docs), the question is
// asked after it (in the chat template when the model has one) and the greedy answer is scored by
// exact match after normalisation; dense and UniPrefill run the same prompts in one invocation.
// Prints a table per (length, depth) and per length with keep ratio and prefill speedup, and
// writes JSON (--output).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct EvalQaOptions {
  std::string model;
  std::string corpus = "licenses";
  std::string lengths = "1024,2048,4096";
  std::string depths = "0.1,0.3,0.5,0.7,0.9";
  int samples = 10;
  uint64_t seed = 1;
  std::string chat = "auto";
  int threads = 0;
  DeviceFlags device;  // --device, --gpu-attention
  std::string output;
  UniPrefillFlags uniprefill;
};

CLI::App* AddEvalQaCommand(CLI::App& eval, EvalQaOptions& options);
int EvalQaCommand(const EvalQaOptions& options);

// A comma list of depths in [0, 1]; false with *error set otherwise.
bool ParseDepthList(const std::string& text, std::vector<double>* depths, std::string* error);

}  // namespace uniprefill::cli
