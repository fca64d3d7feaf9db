// `uniprefill info`: print a model file's architecture, metadata and tensor summary.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace uniprefill::cli {

struct InfoOptions {
  std::string model;
  bool tensors = false;
};

void AddInfoCommand(CLI::App& app, InfoOptions& options);
int InfoCommand(const InfoOptions& options);

}  // namespace uniprefill::cli
