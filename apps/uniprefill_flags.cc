#include "uniprefill_flags.h"

#include "model_names.h"
#include "progress_bar.h"

#include <cstdio>
#include <cstdlib>

#include "engine/uniprefill_options_json.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill::cli {

void AddUniPrefillFlags(CLI::App& cmd, UniPrefillFlags& f) {
  const std::string group = "UniPrefill";
  cmd.add_option("--uniprefill-config", f.config_file,
                 "JSON file of UniPrefill settings (as `uniprefill calibrate` writes); flags given "
                 "beside it override its fields")
      ->type_name("FILE")
      ->group(group);
  for (const UniPrefillField& field : UniPrefillFields()) {
    // std::map nodes are stable, so CLI11 may keep a reference to the string.
    std::string& text = f.text[std::string(field.key)];
    CLI::Option* opt = cmd.add_option(std::string(field.flag), text, std::string(field.help))
                           ->type_name(std::string(field.value))
                           ->group(group);
    if (field.key == "enabled") {
      text = "on";
      opt->capture_default_str();
    }
    f.option[std::string(field.key)] = opt;
  }
}

bool ToUniPrefillOptions(const UniPrefillFlags& f, UniPrefillOptions* out, std::string* error) {
  if (!f.config_file.empty()) {
    auto file = LoadUniPrefillOptionsFile(f.config_file);
    if (!file.ok()) {
      *error = file.status().message();
      return false;
    }
    *out = *file;
  }
  for (const UniPrefillField& field : UniPrefillFields()) {
    const auto opt = f.option.find(field.key);
    if (opt == f.option.end() || opt->second->count() == 0) continue;
    const std::string flag(field.flag);
    Result<nlohmann::json> value = field.parse_text(f.text.find(field.key)->second);
    if (!value.ok()) {
      *error = flag + ": " + value.status().message();
      return false;
    }
    if (Status s = field.read(*value, *out); !s.ok()) {
      *error = flag + ": " + s.message();
      return false;
    }
  }
  ApplyKeepRatioImpliesFixedRatio(*out);
  return true;
}

void AddDeviceFlags(CLI::App& cmd, DeviceFlags& flags) {
  cmd.add_option("--device", flags.device,
                 "Where the model runs: cpu, or cuda (GPU 0, bf16 weights and KV cache)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--gpu-attention", flags.gpu_attention,
                 "With --device cuda, the prefill attention kernels: auto (on Hopper GPUs our "
                 "wgmma kernel for causal attention of head dim 128 without a window: prefills "
                 "and chunks over their cached prefix; then cuDNN's "
                 "fused attention where its masks express the layer when libcudnn 9 loads, our "
                 "flash attention elsewhere), ours (our kernels alone), cudnn (cuDNN, then our "
                 "flash attention; no cuDNN is an error) or flash (our flash attention alone)")
      ->check(CLI::IsMember({"auto", "ours", "cudnn", "flash"}))
      ->capture_default_str();
  cmd.add_flag("--cuda-graphs", flags.cuda_graphs,
               "With --device cuda, run decode steps as CUDA graphs (captured each step, launched "
               "as one; measured slower than kernel-by-kernel launches on an H200, so off)");
  cmd.add_option("--gpu-prefix-split", flags.prefix_split_min_keys,
                 "With --device cuda, split-KV for prefill chunks over a cached prefix: a chunk "
                 "whose query tiles do not fill the GPU attends its prefix in 8 pieces (run side "
                 "by side, then merged) when each piece holds at least this many keys; 0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--cudnn-plan", flags.cudnn_plan,
                 "With --device cuda, which of cuDNN's attention plans each shape keeps: "
                 "fastest (its heuristics' plans each timed once at start-up; the pick can "
                 "follow the machine's load, and plans round differently) or first (the "
                 "heuristics' first plan: the same on every run, so logits repeat run to run)")
      ->check(CLI::IsMember({"fastest", "first"}))
      ->capture_default_str();
  cmd.add_option("--tensor-parallel", flags.tensor_parallel,
                 "Tensor-parallel ranks: run as `mpirun -np N uniprefill ... "
                 "--tensor-parallel N`; each rank holds 1/N of the heads and FFN columns (llama "
                 "and gemma3 models), rank 0 prints and writes the report files; run, serve (CPU: "
                 "rank 0 schedules, samples and answers HTTP; the others follow its steps), "
                 "bench-prefill, eval (ruler: --batch 1) and calibrate. With --device cuda "
                 "each rank drives its host-local GPU (Open MPI's local rank) through NCCL")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option("--tensor-parallel-timeout", flags.tensor_parallel_timeout_s,
                 "Seconds a rank waits for the others at a collective before it reports the job "
                 "broken (a rank died or hangs) and exits with an error")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  AddCpuIsaFlag(cmd, flags.cpu_isa);
  cmd.add_option("--prefill-gemm", flags.prefill_gemm,
                 "CPU prefill GEMMs: sgemm (OpenBLAS on f32 weights, dequantised per call on "
                 "AVX-512 CPUs, kept copies elsewhere), int16 (on the "
                 "stored quantised weights, no copies: less memory), int8 (as int16, with "
                 "int8 activations and VNNI kernels where the CPU has them; also batched "
                 "decode steps) or bf16 (as int16, prefill chunks and their attention on bf16 "
                 "AMX tiles where the CPU has them)")
      ->check(CLI::IsMember({"sgemm", "int16", "int8", "bf16"}))
      ->capture_default_str();
  cmd.add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                 "CPU: element type of the cached keys and values: f16 (half the memory and the "
                 "bytes each decode step reads; llama.cpp's default) or f32. GPU caches are bf16")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
}

void AddCpuIsaFlag(CLI::App& cmd, std::string& cpu_isa) {
  cmd.add_option("--cpu-isa", cpu_isa,
                 "Instruction-set level of the CPU kernels: auto (the best this CPU has), avx2, "
                 "avx512, avx512-vnni, avx512-bf16 or amx-bf16 (a level this CPU lacks is an error; "
                 "`uniprefill info` lists the CPU's features and the kernels each level runs)")
      ->envname("UNIPREFILL_CPU_ISA")
      ->check(CLI::IsMember({"auto", "avx2", "avx512", "avx512-vnni", "avx512-bf16", "amx-bf16"}))
      ->capture_default_str();
}

std::unique_ptr<Engine> LoadComparisonEngine(const std::string& model, int threads,
                                             const DeviceFlags& device,
                                             const UniPrefillFlags& flags) {
  EngineOptions eo;
  eo.model_path = ResolveModelArgument(model);
  eo.threads = threads;
  device.ApplyTo(eo);
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
  if (!SilenceOtherRanks(**engine)) return nullptr;
  return std::move(*engine);
}

bool SilenceOtherRanks(const Engine& engine) {
  // Every rank computes the same numbers; only rank 0 prints them (OwnsReports: and writes the
  // report files).
  const int rank = engine.tensor_parallel_rank();
  if (rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
    std::fprintf(stderr, "error: rank %d cannot silence its output\n", rank);
    return false;
  }
  return true;
}

std::unique_ptr<Engine> LoadEngineWithProgress(EngineOptions options, const UniPrefillFlags& flags,
                                               bool quiet) {
  std::string error;
  if (!ToUniPrefillOptions(flags, &options.uniprefill, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return nullptr;
  }
  options.model_path = ResolveModelArgument(options.model_path);
  // Tensor parallel: rank 0 speaks for the job (OpenMPI names the rank before MPI starts).
  const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const bool other_rank =
      options.tensor_parallel > 1 && mpi_rank != nullptr && std::string(mpi_rank) != "0";
  ProgressBar load_bar("loading", "layers", !quiet && !other_rank);
  auto engine = Engine::Load(options, [&](int64_t d, int64_t t) { load_bar.Update(d, t); });
  load_bar.Finish();
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
    return nullptr;
  }
  if (!SilenceOtherRanks(**engine)) return nullptr;
  return std::move(*engine);
}

}  // namespace uniprefill::cli
