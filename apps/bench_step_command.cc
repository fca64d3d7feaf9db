#include "bench_step_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_common.h"
#include "core/device_context.h"
#include "core/memory_check.h"
#include "loadgen/step_mix.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "output_files.h"
#include "sparsity/uniprefill_config.h"

#ifdef UNIPREFILL_WITH_CUDA
#include "core/cuda/cuda_context.h"
#endif

namespace uniprefill::cli {

CLI::App* AddBenchStepCommand(CLI::App& bench_group, BenchStepOptions& o) {
  CLI::App* cmd = bench_group.add_subcommand(
      "step",
      "One forward of a given mix of decodes and prefill chunks, repeated: what each part of a "
      "served step costs (random-weight preset model, CPU or GPU)");
  cmd->add_option("--mixes", o.mixes,
                  "Forwards to time, separated by ';', each items joined by '+': dN@L (N decodes "
                  "over L cached tokens), cR@K (a dense chunk of R tokens over K cached, not its "
                  "prompt's last), lR@K (its prompt's last chunk: the LM head runs), sR@K (a "
                  "segment-0 UniPrefill chunk). E.g. 'c1024@16384; c1024@16384+d3@32768'")
      ->required();
  cmd->add_option("--device", o.device, "Where the model runs: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU worker threads (0: every core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--shape", o.shape, "Model preset (as bench gpu-prefill; tiny for a quick look)")
      ->capture_default_str();
  cmd->add_option("--layers", o.layers, "Layers of the model (0: the preset's)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--experts", o.experts, "Experts per MoE layer (0: the preset's)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed forwards of each mix first")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed forwards of each mix")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--keep-ratio", o.keep_ratio,
                  "s items: fixed-ratio UniPrefill at the model's default drop layers")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_option("--budget", o.budget,
                  "Prepare the model as serve does for this step budget (Model::PrepareServing: "
                  "the GPU's budget graphs and measured prices); 0: not prepared")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-block-tokens", o.kv_block_tokens, "Tokens per KV block of the GPU pool")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--sampling", o.sampling,
                  "How decodes and last chunks choose their token: device (as serve; GPU only, "
                  "the CPU copies logits whatever this says) or host (logits copied back)")
      ->check(CLI::IsMember({"device", "host"}))
      ->capture_default_str();
  cmd->add_option("--attention", o.attention, "GPU prefill attention kernels: auto, ours, cudnn "
                                              "or flash")
      ->check(CLI::IsMember({"auto", "ours", "cudnn", "flash"}))
      ->capture_default_str();
  cmd->add_option("--gpu-prefix-split", o.prefix_split,
                  "GPU split-KV of chunks over a cached prefix (serve's option of that name)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--commit", o.commit, "Commit id recorded in the JSON");
  cmd->add_option("--json", o.json_out, "Write the results as JSON here");
  return cmd;
}

namespace {

std::string Where(const DeviceContext& ctx) {
#ifdef UNIPREFILL_WITH_CUDA
  if (ctx.device() == Device::kCuda) return ctx.cuda().Describe();
#endif
  return "CPU, " + std::to_string(ctx.threads()) + " threads";
}

nlohmann::json ItemsJson(const StepMix& mix) {
  nlohmann::json items = nlohmann::json::array();
  for (const StepItem& i : mix.items) {
    items.push_back({{"kind", std::string(1, i.kind)},
                     {"count", i.count},
                     {"rows", i.rows},
                     {"cached_tokens", i.depth}});
  }
  return items;
}

}  // namespace

int BenchStepCommand(const BenchStepOptions& o) {
  Result<std::vector<StepMix>> mixes = ParseStepMixes(o.mixes);
  if (!mixes.ok()) {
    std::fprintf(stderr, "error: --mixes: %s\n", mixes.status().message().c_str());
    return 1;
  }
  if (!CheckOutputWritable(o.json_out, "--json")) return 1;
  const bool cuda = o.device == "cuda";
  std::unique_ptr<DeviceContext> ctx;
  if (cuda) {
    Result<std::unique_ptr<DeviceContext>> c = DeviceContext::Cuda(0, o.threads);
    if (!c.ok()) {
      std::fprintf(stderr, "error: --device cuda: %s\n", c.status().message().c_str());
      return 1;
    }
    ctx = std::move(*c);
  } else {
    ctx = DeviceContext::Cpu(o.threads);
  }
  RandomModelOptions ro;
  ro.n_layers = o.layers;
  ro.n_experts = o.experts;
  // Described by seeds first (cheap): the CPU model's host tensors are made only once they fit.
  Result<ModelDefinition> def = RandomModelDefinition(o.shape, ro);
  if (!def.ok()) {
    std::fprintf(stderr, "error: --shape %s: %s\n", o.shape.c_str(),
                 def.status().message().c_str());
    return 1;
  }
  const ModelConfig config = def->config;
  StepMixOptions so;
  so.warmup = o.warmup;
  so.repeats = o.repeats;
  so.device_sampling = o.sampling == "device";
  so.uniprefill = DefaultUniPrefillConfig(config);
  so.uniprefill.enabled = true;
  so.uniprefill.selection.mode = SelectionMode::kFixedRatio;
  so.uniprefill.selection.keep_ratio = static_cast<float>(o.keep_ratio);
  const auto load_start = std::chrono::steady_clock::now();  // weights made and loaded
  int64_t mix_tokens = 0;  // cache tokens of the largest mix
  for (const StepMix& m : *mixes) mix_tokens = std::max(mix_tokens, StepMixCacheTokens(m, so));
  if (!cuda) {
    // On the CPU the weights live on the host (bf16, and f32 copies for the prefill GEMMs: ~6
    // bytes a parameter) beside f32 caches: refuse what this machine cannot hold, before any of
    // it is allocated, instead of being killed half-way.
    int attention_layers = 0;
    for (LayerKind k : config.layer_kinds) attention_layers += k != LayerKind::kLinearAttention;
    const int64_t weights = 6 * ParameterCount(*def);
    const int64_t caches = mix_tokens * attention_layers * 2 * config.kv_dim() * 4;
    const int64_t available = HostAvailableBytes();
    if (weights + caches > available) {
      std::fprintf(stderr,
                   "error: --device cpu: the %s model's weights (~%s) and the largest mix's "
                   "caches (~%s) need more than this machine's %s available; use a smaller "
                   "--shape (tiny), fewer --layers, shorter mixes or --device cuda\n",
                   o.shape.c_str(), FormatGib(weights).c_str(), FormatGib(caches).c_str(),
                   FormatGib(available).c_str());
      return 1;
    }
    ro.materialize = true;  // the CPU model needs host tensors; the GPU fills its own
    def = RandomModelDefinition(o.shape, ro);
    if (!def.ok()) {
      std::fprintf(stderr, "error: --shape %s: %s\n", o.shape.c_str(),
                   def.status().message().c_str());
      return 1;
    }
  }
  LoadOptions lo;
  // --attention was checked against the names by CLI11.
  lo.gpu_attention = GpuAttentionFromName(o.attention).value_or(GpuAttention::kAuto);
  lo.gpu_prefix_split_min_keys = o.prefix_split;
  Result<std::unique_ptr<Model>> model_or = MakeModel(std::move(*def), *ctx, lo);
  if (!model_or.ok()) {
    std::fprintf(stderr, "error: %s\n", model_or.status().message().c_str());
    return 1;
  }
  Model& model = **model_or;
  // The device pool as serve fixes it (a host model ignores this): room for the largest mix
  // twice over, so a chunk's cache always finds a run of blocks and reads its prefix in place.
  int64_t pool_tokens = 0, longest = 1;
  for (const StepMix& m : *mixes) {
    pool_tokens = std::max(pool_tokens, StepMixCacheTokens(m, so) +
                                            int64_t{2} * m.requests() * o.kv_block_tokens);
    for (const StepItem& i : m.items) longest = std::max(longest, StepItemCacheTokens(i, so));
  }
  const int64_t blocks = 2 * config.n_layers * (pool_tokens / o.kv_block_tokens + 1);
  if (Status st = model.FixCachePool(static_cast<int>(std::min<int64_t>(blocks, 1 << 30)),
                                     o.kv_block_tokens);
      !st.ok()) {
    std::fprintf(stderr, "error: the KV pool: %s\n", st.message().c_str());
    return 1;
  }
  double prepare_s = 0;
  if (o.budget > 0) {
    const auto start = std::chrono::steady_clock::now();
    if (Status st = model.PrepareServing(o.budget, static_cast<int>(longest)); !st.ok()) {
      std::fprintf(stderr, "error: --budget %d: %s\n", o.budget, st.message().c_str());
      return 1;
    }
    prepare_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  ctx->Synchronize();
  const std::string where = Where(*ctx);
  std::fprintf(stderr, "%s (%d layers) on %s, loaded in %.1f s; drop layers %s for s items\n",
               o.shape.c_str(), config.n_layers, where.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start)
                   .count(),
               LayerListToString(so.uniprefill.drop_layers).c_str());
  // On the GPU, each mix's SM clock and board power (NVML; core/gpu_clock_sampler.h): a GPU at its
  // power limit lowers its clock, so arms of an A/B are compared at the clocks they ran at.
  std::unique_ptr<GpuClockSampler> sampler;
#ifdef UNIPREFILL_WITH_CUDA
  if (cuda) sampler = ClockSamplerOrNote(ctx->cuda().PciBusId());
#endif
  std::printf("%-44s %4s %6s %10s %10s %10s %5s %6s %5s\n", "mix", "reqs", "rows", "median ms",
              "p10 ms", "p90 ms", "head", "SM MHz", "W");
  nlohmann::json rows = nlohmann::json::array();
  bool failed = false;
  if (sampler) {  // sampled during the timed forwards only (not warm-up, not prefix prefills)
    so.around_timed_forward = [&sampler](bool starts) {
      starts ? sampler->Resume() : sampler->Pause();
    };
  }
  for (const StepMix& m : *mixes) {
    if (sampler) sampler->Stop();  // an empty, paused window: the timed forwards resume it
    Result<StepMixTiming> t = TimeStepMix(model, *ctx, m, so);
    const ClockSummary clock = sampler ? sampler->Stop() : ClockSummary{};
    if (!t.ok()) {  // recorded; the other mixes still run
      std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
      rows.push_back({{"mix", m.text}, {"items", ItemsJson(m)}, {"error", t.status().message()}});
      failed = true;
      continue;
    }
    const double med = Median(t->forward_ms), p10 = Quantile(t->forward_ms, 0.1),
                 p90 = Quantile(t->forward_ms, 0.9);
    std::printf("%-44s %4d %6d %10.3f %10.3f %10.3f %5d %6.0f %5.0f\n", m.text.c_str(),
                m.requests(), m.new_rows(), med, p10, p90, t->stats.head_rows, clock.sm_mhz_mean,
                clock.power_w_mean);
    std::fflush(stdout);
    rows.push_back({{"mix", m.text},
                    {"items", ItemsJson(m)},
                    {"requests", m.requests()},
                    {"rows", m.new_rows()},
                    {"forward_ms_median", med},
                    {"forward_ms_p10", p10},
                    {"forward_ms_p90", p90},
                    {"forward_ms_all", t->forward_ms},
                    {"head_rows", t->stats.head_rows},
                    {"split_prefix_attentions", t->stats.split_prefix_attentions},
                    {"prefix_reads_in_place", t->stats.prefix_reads_in_place},
                    {"drop_host_syncs", t->stats.drop_host_syncs},
                    {"sm_clock_mhz_mean", clock.sm_mhz_mean},
                    {"power_w_mean", clock.power_w_mean},
                    {"clock_samples", clock.samples}});
  }
  nlohmann::json j = {
      {"benchmark", "step"},
      {"date", Today()},
      {"device", where},
      {"commit", o.commit},
      {"environment", BenchEnvironment()},
      {"shape", o.shape},
      {"n_layers", config.n_layers},
      {"drop_layers", so.uniprefill.drop_layers},
      {"keep_ratio", o.keep_ratio},
      {"budget", o.budget},
      {"prepare_serving_s", prepare_s},
      {"sampling", cuda ? o.sampling : "host"},
      {"warmup", o.warmup},
      {"timing",
       "host wall clock around Model::ForwardBatch plus a device sync, after a sync; decodes "
       "keep their caches; a chunk of R rows at K at least R x (warmup + (repeats - 1) / 2) deep "
       "keeps one cache, prefilled (untimed) once, its forwards' chunks at K - R, K, K + R, ... "
       "(the median's at K); a shallower chunk's prefix is prefilled (untimed) before each "
       "forward"},
      {"clock_sampling",
       "GPU only: NVML every 50 ms through each mix's whole timing (warm-up and untimed prefills "
       "included): mean SM clock and board power; 0 samples where NVML is unavailable or on the "
       "CPU"},
      {"rows", rows}};
  if (!o.json_out.empty() && !WriteJsonFile(o.json_out, j, "--json")) return 1;
  return failed ? 1 : 0;
}

}  // namespace uniprefill::cli
