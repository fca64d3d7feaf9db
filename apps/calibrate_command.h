// `uniprefill calibrate`: sweeps UniPrefill settings (p, selection mode / keep ratio, drop-layer
// sets) on the user's model over RULER-style tasks with a small sample budget, prints the
// speed/accuracy frontier, and writes the recommended setting as a JSON file that every command
// accepts through --uniprefill-config.
//
// Recommended = the fastest setting whose mean accuracy is within --max-mean-drop points of dense
// and whose accuracy on every task where dense scores above 20 is within --max-task-drop points
// (the rule of docs/uniprefill.md); when none qualifies, UniPrefill off.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "uniprefill_flags.h"

namespace uniprefill::cli {

struct CalibrateOptions {
  std::string model;
  std::string tasks = "all";
  std::string lengths = "4096";
  int samples = 2;
  uint64_t seed = 7;  // not eval ruler's default, so calibration and evaluation use other samples
  std::string chat = "auto";
  std::string p_values = "0.9,0.95,0.975,0.99";
  std::string keep_ratios = "0.5";
  std::string drop_layer_sets = "auto";
  std::string window_modes = "alive,position";
  double max_mean_drop = 1.0, max_task_drop = 3.0;
  int threads = 0;
  DeviceFlags device;  // --device, --gpu-attention
  std::string output;
  std::string write_config;
};

void AddCalibrateCommand(CLI::App& app, CalibrateOptions& options);
int CalibrateCommand(const CalibrateOptions& options);

}  // namespace uniprefill::cli
