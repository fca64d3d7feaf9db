// The UniPrefill flags shared by every command that runs a model (run, serve, bench-prefill, eval):
// one per field of the options' table (engine/uniprefill_options_json.h: --uniprefill on|off,
// --drop-layers, --uniprefill-mode, --uniprefill-p, --keep-ratio, --block-size, --sink, --last-n,
// --window-mode) and --uniprefill-config FILE. Unset flags keep the config file's values, and
// those the model's defaults. Values are checked by the same readers as config files and HTTP.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>

#include "uniprefill/engine.h"

namespace uniprefill::cli {

struct UniPrefillFlags {
  std::string config_file;  // --uniprefill-config: JSON options (uniprefill calibrate writes one)
  // Each field's flag text by JSON key, and its CLI11 option (to tell whether it was given): one
  // flag per row of the options' table (engine/uniprefill_options_json.h).
  std::map<std::string, std::string, std::less<>> text;
  std::map<std::string, CLI::Option*, std::less<>> option;
};

void AddUniPrefillFlags(CLI::App& cmd, UniPrefillFlags& flags);
// The engine options the flags ask for; false with *error set on a malformed value.
bool ToUniPrefillOptions(const UniPrefillFlags& flags, UniPrefillOptions* out, std::string* error);

// For commands that compare dense with UniPrefill per request (bench-prefill, eval): loads the
// model with UniPrefill enabled and the flags applied; on failure prints one `error:` line and
// returns nullptr.
// Where the model runs: --device cpu|cuda and, on the GPU, --gpu-attention auto|ours|cudnn (the prefill
// attention kernel, EngineOptions::gpu_attention); on the CPU, --cpu-isa (the kernels' ISA level).
struct DeviceFlags {
  std::string device = "cpu";
  std::string gpu_attention = "auto";
  bool cuda_graphs = false;
  int prefix_split_min_keys = 2048;  // --gpu-prefix-split (EngineOptions)
  std::string cudnn_plan = "fastest";  // --cudnn-plan (EngineOptions::gpu_cudnn_plan)
  int tensor_parallel = 1;  // ranks under mpirun (EngineOptions::tensor_parallel)
  double tensor_parallel_timeout_s = 60;  // --tensor-parallel-timeout (EngineOptions)
  std::string cpu_isa = "auto";  // --cpu-isa or UNIPREFILL_CPU_ISA (EngineOptions::cpu_isa)
  std::string prefill_gemm = "sgemm";  // --prefill-gemm (EngineOptions::prefill_gemm)
  std::string kv_cache_dtype = "f16";  // --kv-cache-dtype (EngineOptions::kv_cache_dtype)
  void ApplyTo(EngineOptions& eo) const {
    eo.cpu_isa = cpu_isa;
    eo.prefill_gemm = prefill_gemm;
    eo.kv_cache_dtype = kv_cache_dtype;
    eo.device = device;
    eo.gpu_attention = gpu_attention;
    eo.gpu_decode_graphs = cuda_graphs;
    eo.gpu_prefix_split_min_keys = prefix_split_min_keys;
    eo.gpu_cudnn_plan = cudnn_plan;
    eo.tensor_parallel = tensor_parallel;
    eo.tensor_parallel_timeout_s = tensor_parallel_timeout_s;
  }
};
void AddDeviceFlags(CLI::App& cmd, DeviceFlags& flags);
// --cpu-isa, whose default comes from the environment variable UNIPREFILL_CPU_ISA when set.
void AddCpuIsaFlag(CLI::App& cmd, std::string& cpu_isa);

// Tensor parallel: stdout of ranks other than 0 goes to /dev/null; false after one `error:` line.
bool SilenceOtherRanks(const Engine& engine);

std::unique_ptr<Engine> LoadComparisonEngine(const std::string& model, int threads,
                                             const DeviceFlags& device,
                                             const UniPrefillFlags& flags);

// For commands that serve one configuration (run, serve): loads the model with `options` and the
// UniPrefill flags applied, with a progress bar unless quiet; on failure prints one `error:` line
// and returns nullptr.
std::unique_ptr<Engine> LoadEngineWithProgress(EngineOptions options, const UniPrefillFlags& flags,
                                               bool quiet);

}  // namespace uniprefill::cli
