// The UniPrefill flags shared by every command that runs a model (run, and later serve, bench,
// eval): --uniprefill on|off, --drop-layers, --uniprefill-p, --uniprefill-mode, --keep-ratio,
// --block-size, --sink, --last-n, --window-mode, --uniprefill-config FILE. Unset flags keep the
// config file's values, and those the model's defaults.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "uniprefill/engine.h"

namespace uniprefill::cli {

struct UniPrefillFlags {
  std::string config_file;  // --uniprefill-config: JSON options (uniprefill calibrate writes one)
  std::string enabled = "on";
  std::string drop_layers;
  float top_p = 0;
  std::string mode;
  float keep_ratio = 0;
  int block_size = 0, sink = 0, last_n = 0;
  std::string window;
  // Which options the user gave (CLI11 options, set by AddUniPrefillFlags).
  CLI::Option *enabled_opt = nullptr, *drop_layers_opt = nullptr, *top_p_opt = nullptr, *keep_ratio_opt = nullptr,
              *block_size_opt = nullptr, *sink_opt = nullptr, *last_n_opt = nullptr;
};

void AddUniPrefillFlags(CLI::App& cmd, UniPrefillFlags& flags);
// The engine options the flags ask for; false with *error set on a malformed value.
bool ToUniPrefillOptions(const UniPrefillFlags& flags, UniPrefillOptions* out, std::string* error);

// For commands that compare dense with UniPrefill per request (bench-prefill, eval): loads the
// model with UniPrefill enabled and the flags applied; on failure prints one `error:` line and
// returns nullptr.
// --device cpu|cuda (where the model runs).
void AddDeviceFlag(CLI::App& cmd, std::string& device);

std::unique_ptr<Engine> LoadComparisonEngine(const std::string& model, int threads,
                                             const std::string& device,
                                             const UniPrefillFlags& flags);

// For commands that serve one configuration (run, serve): loads the model with `options` and the
// UniPrefill flags applied, with a progress bar unless quiet; on failure prints one `error:` line
// and returns nullptr.
std::unique_ptr<Engine> LoadEngineWithProgress(EngineOptions options, const UniPrefillFlags& flags,
                                               bool quiet);

}  // namespace uniprefill::cli
