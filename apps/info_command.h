// `uniprefill info`: print this CPU's features and the kernel paths chosen for it, then a model
// file's architecture, metadata and tensor summary.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace uniprefill::cli {

struct InfoOptions {
  std::string model;
  bool tensors = false;
  std::string cpu_isa = "auto";  // --cpu-isa / UNIPREFILL_CPU_ISA: the level to describe
};

void AddInfoCommand(CLI::App& app, InfoOptions& options);
int InfoCommand(const InfoOptions& options);

}  // namespace uniprefill::cli
