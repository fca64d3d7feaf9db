#include "bench_gpu_decode_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench_common.h"
#include "model/model_presets.h"
#include "output_files.h"

#ifdef UNIPREFILL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "engine/sampler.h"
#include "model/transformer_model.h"
#endif

namespace uniprefill::cli {

CLI::App* AddBenchGpuDecodeCommand(CLI::App& bench_group, BenchGpuDecodeOptions& o) {
  CLI::App* cmd = bench_group.add_subcommand(
      "gpu-decode",
      "Batched decode on the GPU: inter-token latency of the product's CUDA model of a preset "
      "shape with random weights (no files), host vs device token choice");
  cmd->add_option("--shape", o.shape, "Model preset (as bench gpu-prefill)")->capture_default_str();
  cmd->add_option("--contexts", o.contexts, "Prompt tokens per request before decoding")
      ->capture_default_str();
  cmd->add_option("--batch-sizes", o.batch_sizes, "Requests decoded together")
      ->capture_default_str();
  cmd->add_option("--sampling", o.sampling,
                  "Modes: host (logits copied back, argmax on the host: serve --host-sampling), "
                  "device (SequenceStep::sampling: ids only)")
      ->capture_default_str();
  cmd->add_option("--graphs", o.graphs,
                  "Decode steps as CUDA graphs (on) and/or kernel by kernel (off); the model is "
                  "loaded once per setting")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Timed decode steps per point (after 4 warm-up steps)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--layers", o.layers, "Layers of the model (0: the preset's)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--experts", o.experts, "Experts per MoE layer (0: the preset's)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--attention", o.attention,
                  "Prefill attention kernels: auto, ours, cudnn or flash")
      ->check(CLI::IsMember({"auto", "ours", "cudnn", "flash"}))
      ->capture_default_str();
  cmd->add_option("--commit", o.commit, "Commit id recorded in the JSON");
  cmd->add_option("--json", o.json_out, "Write the results as JSON here");
  return cmd;
}

#ifndef UNIPREFILL_WITH_CUDA

int BenchGpuDecodeCommand(const BenchGpuDecodeOptions&) {
  std::fprintf(stderr,
               "error: this uniprefill was built without the CUDA backend; build on a machine with "
               "nvcc (`bash scripts/build.sh`) and run on an NVIDIA GPU\n");
  return 1;
}

#else

namespace {

// H200 SXM HBM3e bandwidth (datasheet): the floor's denominator.
constexpr double kDatasheetHbmBytesPerS = 4.8e12;

struct DecodePoint {
  std::vector<double> step_ms;  // one per timed step
};

// KV bytes one token adds over all attention layers (bf16 K and V).
int64_t KvBytesPerToken(const ModelConfig& c) {
  int attention_layers = 0;
  for (LayerKind k : c.layer_kinds) attention_layers += k != LayerKind::kLinearAttention;
  return int64_t{attention_layers} * 2 * c.kv_dim() * 2;
}

// B requests prefilled with n random tokens (one forward each, so long prompts fit), then
// `warmup + steps` decode steps; the timed ones are returned.
Result<DecodePoint> TimeDecode(Model& model, DeviceContext& ctx, int64_t n, int64_t batch,
                               bool on_device, int steps) {
  constexpr int kWarmup = 4;
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(7 + n + batch));
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  UniPrefillConfig dense;
  dense.enabled = false;
  std::vector<std::unique_ptr<SequenceCache>> caches;
  std::vector<std::vector<float>> logits(batch, std::vector<float>(vocab));
  std::vector<int32_t> next(batch);
  // Prefills packed up to ~64K tokens per forward (fewer launches; long prompts one at a time).
  std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>(n));
  for (int64_t r = 0; r < batch; ++r) {
    for (int32_t& id : prompts[r]) id = token(rng);
    caches.push_back(model.NewCache(static_cast<int>(n + kWarmup + steps + 1)));
  }
  for (int64_t first = 0; first < batch;) {
    std::vector<SequenceStep> group;
    for (int64_t r = first; r < batch && (group.empty() || (r - first + 1) * n <= 65536); ++r) {
      group.push_back({caches[r].get(), prompts[r], logits[r].data()});
    }
    UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, group, dense));
    for (size_t i = 0; i < group.size(); ++i) next[first + i] = ArgMax(logits[first + i]);
    first += static_cast<int64_t>(group.size());
  }
  std::vector<StepSampling> sampling(batch);
  std::vector<std::vector<int32_t>> feed(batch, std::vector<int32_t>(1));
  DecodePoint p;
  for (int it = 0; it < kWarmup + steps; ++it) {
    std::vector<SequenceStep> s(batch);
    for (int64_t r = 0; r < batch; ++r) {
      feed[r][0] = next[r];
      s[r].cache = caches[r].get();
      s[r].tokens = feed[r];
      if (on_device) {
        sampling[r].token = &next[r];
        s[r].sampling = &sampling[r];
      } else {
        s[r].logits = logits[r].data();
      }
    }
    const auto start = std::chrono::steady_clock::now();
    UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, s, dense));
    if (!on_device) {
      for (int64_t r = 0; r < batch; ++r) next[r] = ArgMax(logits[r]);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (it >= kWarmup) p.step_ms.push_back(ms);
  }
  return p;
}

}  // namespace

int BenchGpuDecodeCommand(const BenchGpuDecodeOptions& o) {
  std::vector<int64_t> contexts, batches;
  std::vector<std::string> modes;
  if (!ParseList(o.contexts, contexts) ||
      std::any_of(contexts.begin(), contexts.end(), [](int64_t n) { return n < 1; })) {
    std::fprintf(stderr, "error: --contexts '%s' is not a list of token counts\n",
                 o.contexts.c_str());
    return 1;
  }
  if (!ParseList(o.batch_sizes, batches) ||
      std::any_of(batches.begin(), batches.end(), [](int64_t b) { return b < 1 || b > 1024; })) {
    std::fprintf(stderr, "error: --batch-sizes '%s' must list sizes in 1..1024\n",
                 o.batch_sizes.c_str());
    return 1;
  }
  if (!ParseList(o.sampling, modes) || std::any_of(modes.begin(), modes.end(), [](auto& m) {
        return m != "host" && m != "device";
      })) {
    std::fprintf(stderr, "error: --sampling '%s' must list host and/or device\n",
                 o.sampling.c_str());
    return 1;
  }
  std::vector<std::string> graph_settings;
  if (!ParseList(o.graphs, graph_settings) ||
      std::any_of(graph_settings.begin(), graph_settings.end(),
                  [](auto& g) { return g != "on" && g != "off"; })) {
    std::fprintf(stderr, "error: --graphs '%s' must list on and/or off\n", o.graphs.c_str());
    return 1;
  }
  if (!CheckOutputWritable(o.json_out, "--json")) return 1;
  Result<std::unique_ptr<DeviceContext>> ctx_or = DeviceContext::Cuda(0);
  if (!ctx_or.ok()) {
    std::fprintf(stderr, "error: %s\n", ctx_or.status().message().c_str());
    return 1;
  }
  DeviceContext& ctx = **ctx_or;
  const std::string gpu = ctx.cuda().Describe();
  std::fprintf(stderr, "GPU: %s\n", gpu.c_str());
  RandomModelOptions ro;
  ro.n_layers = o.layers;
  ro.n_experts = o.experts;
  nlohmann::json rows = nlohmann::json::array();
  bool failed = false;
  ModelConfig config;
  double weight_bytes = 0;
  std::printf("%-8s %5s %-7s %-6s %9s %9s %10s %9s %7s\n", "context", "batch", "mode", "graphs",
              "ITL ms", "p90 ms", "tokens/s", "floor ms", "floor%");
  for (const std::string& graphs : graph_settings) {
    Result<ModelDefinition> def = RandomModelDefinition(o.shape, ro);
    if (!def.ok()) {
      std::fprintf(stderr, "error: --shape %s: %s\n", o.shape.c_str(),
                   def.status().message().c_str());
      return 1;
    }
    config = def->config;
    LoadOptions lo;
    // --attention was checked against the names by CLI11.
    lo.gpu_attention = GpuAttentionFromName(o.attention).value_or(GpuAttention::kAuto);
    lo.gpu_decode_graphs = graphs == "on";
    Result<std::unique_ptr<Model>> model = MakeModel(std::move(*def), ctx, lo);
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    weight_bytes = static_cast<double>((*model)->resident_weight_bytes());
    std::fprintf(stderr, "%s: %.1f GiB of bf16 weights, graphs %s\n", o.shape.c_str(),
                 weight_bytes / double(1 << 30), graphs.c_str());
    for (int64_t n : contexts) {
      for (int64_t b : batches) {
        for (const std::string& mode : modes) {
          Result<DecodePoint> p = TimeDecode(**model, ctx, n, b, mode == "device", o.steps);
          if (!p.ok()) {  // e.g. a point whose caches do not fit: recorded, the others still run
            std::fprintf(stderr, "error: context %lld batch %lld: %s\n",
                         static_cast<long long>(n), static_cast<long long>(b),
                         p.status().message().c_str());
            rows.push_back({{"context", n},
                            {"batch", b},
                            {"sampling", mode},
                            {"cuda_graphs", graphs == "on"},
                            {"error", p.status().message()}});
            failed = true;
            continue;
          }
          const double ms = Median(p->step_ms), p90 = Quantile(p->step_ms, 0.9);
          const double kv = static_cast<double>(KvBytesPerToken(config)) * b * n;
          const double floor_ms = 1e3 * (weight_bytes + kv) / kDatasheetHbmBytesPerS;
          std::printf("%-8lld %5lld %-7s %-6s %9.2f %9.2f %10.0f %9.2f %6.1f%%\n",
                      static_cast<long long>(n), static_cast<long long>(b), mode.c_str(),
                      graphs.c_str(), ms, p90, 1e3 * b / ms, floor_ms, 100 * floor_ms / ms);
          std::fflush(stdout);
          rows.push_back({{"context", n},
                          {"batch", b},
                          {"sampling", mode},
                          {"cuda_graphs", graphs == "on"},
                          {"itl_ms_median", ms},
                          {"itl_ms_p90", p90},
                          {"itl_ms_all", p->step_ms},
                          {"tokens_per_s", 1e3 * b / ms},
                          {"hbm_floor_ms", floor_ms}});
        }
      }
    }
  }
  nlohmann::json j = {
      {"benchmark", "gpu-decode"},
      {"date", Today()},
      {"gpu", gpu},
      {"commit", o.commit},
      {"environment", BenchEnvironment()},
      {"shape", o.shape},
      {"n_layers", config.n_layers},
      {"weight_bytes", weight_bytes},
      {"kv_bytes_per_token", KvBytesPerToken(config)},
      {"timing",
       "host wall clock per decode step: Model::ForwardBatch (ends with a device sync) plus, for "
       "mode host, the host argmax of every row's copied logits; greedy; 4 warm-up steps"},
      {"hbm_floor",
       "(weight bytes + KV bytes of all requests' contexts) / 4.8 TB/s (H200 datasheet)"},
      {"rows", rows}};
  if (!o.json_out.empty() && !WriteJsonFile(o.json_out, j, "--json")) return 1;
  return failed ? 1 : 0;
}

#endif

}  // namespace uniprefill::cli
