// `uniprefill eval fidelity`: how close UniPrefill's output is to dense on the same model and
// prompts: top-1 agreement and KL(dense || UniPrefill) of the first generated token's distribution,
// and how many of the first 32 greedy tokens agree. Prompts come from a built-in generator (seeded
// report-style English, cut to --lengths tokens) or from text files the user gives.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct EvalFidelityOptions {
  std::string model;
  std::vector<std::string> prompt_files;
  std::string lengths = "4096";
  int samples = 3;
  int greedy_tokens = 32;
  uint64_t seed = 1;
  int threads = 0;
  DeviceFlags device;  // --device, --gpu-attention
  std::string output;
  UniPrefillFlags uniprefill;
};

CLI::App* AddEvalFidelityCommand(CLI::App& eval, EvalFidelityOptions& options);
int EvalFidelityCommand(const EvalFidelityOptions& options);

}  // namespace uniprefill::cli
