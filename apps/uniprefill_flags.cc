#include "uniprefill_flags.h"

#include "progress_bar.h"

#include <cstdio>

#include "engine/uniprefill_options_json.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill::cli {

void AddUniPrefillFlags(CLI::App& cmd, UniPrefillFlags& f) {
  const std::string group = "UniPrefill";
  f.enabled_opt = cmd.add_option("--uniprefill", f.enabled, "Token dropping in prefill: on or off")
                      ->check(CLI::IsMember({"on", "off"}))
                      ->capture_default_str()
                      ->group(group);
  cmd.add_option("--uniprefill-config", f.config_file,
                 "JSON file of UniPrefill settings (as `uniprefill calibrate` writes); flags given "
                 "beside it override its fields")
      ->group(group);
  f.drop_layers_opt = cmd.add_option("--drop-layers", f.drop_layers,
                                     "Full-attention layers that select tokens, e.g. 7,11,15 "
                                     "(default: the model's)")
                          ->group(group);
  f.top_p_opt = cmd.add_option("--uniprefill-p", f.top_p,
                               "Keep blocks holding this share of attention (top-p mode)")
                    ->group(group);
  cmd.add_option("--uniprefill-mode", f.mode, "Selection: top-p or fixed-ratio")
      ->check(CLI::IsMember({"top-p", "fixed-ratio"}))
      ->group(group);
  f.keep_ratio_opt = cmd.add_option("--keep-ratio", f.keep_ratio,
                                    "Fraction of blocks kept per drop layer (fixed-ratio mode)")
                         ->group(group);
  f.block_size_opt =
      cmd.add_option("--block-size", f.block_size, "Tokens per scored block (G)")->group(group);
  f.sink_opt = cmd.add_option("--sink", f.sink, "First tokens always kept (S)")->group(group);
  f.last_n_opt = cmd.add_option("--last-n", f.last_n,
                                "Observation window: last tokens that score, always kept (n)")
                     ->group(group);
  cmd.add_option("--window-mode", f.window,
                 "Sliding windows after a drop count alive tokens (alive, the reference) or "
                 "positions (position)")
      ->check(CLI::IsMember({"alive", "position"}))
      ->group(group);
}

bool ToUniPrefillOptions(const UniPrefillFlags& f, UniPrefillOptions* out, std::string* error) {
  if (!f.config_file.empty()) {
    auto file = LoadUniPrefillOptionsFile(f.config_file);
    if (!file.ok()) {
      *error = file.status().message();
      return false;
    }
    *out = *file;
    if (f.enabled_opt && f.enabled_opt->count()) out->enabled = f.enabled != "off";
  } else {
    out->enabled = f.enabled != "off";
  }
  if (f.drop_layers_opt && f.drop_layers_opt->count()) {
    auto layers = ParseLayerList(f.drop_layers);
    if (!layers.ok()) {
      *error = "--drop-layers: " + layers.status().message();
      return false;
    }
    out->drop_layers = *layers;
  }
  if (!f.mode.empty()) out->mode = f.mode;
  if (!f.window.empty()) out->window = f.window == "alive" ? "alive" : "position";
  if (f.top_p_opt && f.top_p_opt->count()) out->top_p = f.top_p;
  if (f.keep_ratio_opt && f.keep_ratio_opt->count()) out->keep_ratio = f.keep_ratio;
  ApplyKeepRatioImpliesFixedRatio(*out);
  if (f.block_size_opt && f.block_size_opt->count()) out->block_size = f.block_size;
  if (f.sink_opt && f.sink_opt->count()) out->sink = f.sink;
  if (f.last_n_opt && f.last_n_opt->count()) out->last_n = f.last_n;
  return true;
}

void AddDeviceFlag(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device,
                 "Where the model runs: cpu, or cuda (GPU 0, bf16 weights and KV cache)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

std::unique_ptr<Engine> LoadComparisonEngine(const std::string& model, int threads,
                                             const std::string& device,
                                             const UniPrefillFlags& flags) {
  EngineOptions eo;
  eo.model_path = model;
  eo.threads = threads;
  eo.device = device;
  std::string error;
  if (!ToUniPrefillOptions(flags, &eo.uniprefill, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return nullptr;
  }
  eo.uniprefill.enabled = true;
  auto engine = Engine::Load(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
    return nullptr;
  }
  return std::move(*engine);
}

std::unique_ptr<Engine> LoadEngineWithProgress(EngineOptions options, const UniPrefillFlags& flags,
                                               bool quiet) {
  std::string error;
  if (!ToUniPrefillOptions(flags, &options.uniprefill, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return nullptr;
  }
  ProgressBar load_bar("loading", "layers", !quiet);
  auto engine = Engine::Load(options, [&](int64_t d, int64_t t) { load_bar.Update(d, t); });
  load_bar.Finish();
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
    return nullptr;
  }
  return std::move(*engine);
}

}  // namespace uniprefill::cli
