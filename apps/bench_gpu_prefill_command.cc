#include "bench_gpu_prefill_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "bench_common.h"
#include "model/model_presets.h"
#include "output_files.h"

#ifdef UNIPREFILL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/stream_timing.h"
#include "engine/segment_chunked_prefill.h"
#include "model/transformer_model.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "sparsity/uniprefill_config.h"
#endif

namespace uniprefill::cli {
namespace {

// Hopper SXM dense bf16 tensor-core peak (datasheet; H100 and H200 share it).
constexpr double kDatasheetBf16Tflops = 989.4;

std::string PresetNames() {
  std::string s;
  for (const std::string& p : RandomModelPresets()) s += (s.empty() ? "" : ", ") + p;
  return s;
}

}  // namespace

CLI::App* AddBenchGpuPrefillCommand(CLI::App& bench_group, BenchGpuPrefillOptions& o) {
  CLI::App* cmd = bench_group.add_subcommand(
      "gpu-prefill",
      "Dense vs UniPrefill prefill on the GPU: the product's CUDA model of a preset shape with "
      "random weights (no files)");
  cmd->add_option("--shape", o.shape,
                  "Model preset: " + PresetNames() +
                      " (qwen3-next-80b-a3b keeps 256 of its 512 experts; tiny ones are for tests)")
      ->capture_default_str();
  cmd->add_option("--contexts", o.contexts, "Prompt lengths in tokens")->capture_default_str();
  cmd->add_option("--batch-sizes", o.batch_sizes, "Requests per packed prefill")
      ->capture_default_str();
  cmd->add_option("--keep-ratios", o.keep_ratios,
                  "UniPrefill fixed keep ratios to run beside dense ('' for dense only), at the "
                  "model's default drop layers")
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed runs per point (after one warm-up); medians")
      ->check(CLI::Range(1, 50))
      ->capture_default_str();
  cmd->add_option("--layers", o.layers,
                  "Layers of the model (0: the preset's; the drop layers then follow the default "
                  "rule at that depth)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--experts", o.experts,
                  "Experts per MoE layer (0: the preset's; MoE presets only; top-k capped at it)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--compare-sync", o.compare_sync,
                "Also run each keep ratio the way top-p must: a host sync per drop layer to learn "
                "the kept counts (mode keepR-sync), to show what the sync-free path saves");
  cmd->add_option("--attention", o.attention,
                  "Prefill attention kernels, as serve's --gpu-attention: auto (the product's "
                  "default: our Hopper wgmma kernel where it covers the layer, then cuDNN's fused "
                  "attention, then our flash attention), ours (our kernels alone), cudnn (cuDNN "
                  "then flash attention: the choice before the Hopper kernel) or flash")
      ->check(CLI::IsMember({"auto", "ours", "cudnn", "flash"}))
      ->capture_default_str();
  cmd->add_option("--moe-gemm", o.moe_gemm,
                  "MoE expert GEMMs: ours (our grouped kernel, sync-free, wgmma on Hopper: the "
                  "product's), mma-sync (our mma.sync kernel on any GPU) or library (cuBLAS "
                  "grouped GEMM after one host sync per MoE layer)")
      ->check(CLI::IsMember({"ours", "mma-sync", "library"}))
      ->capture_default_str();
  cmd->add_option("--delta-rule", o.delta_rule,
                  "Gated DeltaNet delta-rule kernel: auto (the product's: two tensor-core "
                  "kernels, the chunks' dots and solve in parallel, then the scan), tensor-core "
                  "(the fused one-kernel form) or chunked (f32)")
      ->check(CLI::IsMember({"auto", "tensor-core", "chunked"}))
      ->capture_default_str();
  cmd->add_option("--prefix-split", o.prefix_split,
                  "Split-KV for chunks over a cached prefix: the fewest keys per piece of a "
                  "split prefix (serve's --gpu-prefix-split); 0: chunks attend their prefix whole")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", o.chunk_tokens,
                  "Also run each mode as a chunked prefill of at most this many rows per request "
                  "and forward, as serve's --max-batched-tokens cuts it (UniPrefill: "
                  "segment-wise); 0: whole prefills only")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-block-tokens", o.kv_block_tokens,
                  "Tokens per KV cache block of the device pool (serve's --kv-block-tokens)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_flag("--phases", o.phases,
                "After the timed runs, one more run per row with a device sync after every step "
                "of the layer walk: where the time goes (attention, FFN, norms, exchange...)");
  cmd->add_flag("--serving-graphs", o.serving_graphs,
                "Prepare the model as serve does (Model::PrepareServing with --chunk-tokens, or "
                "the longest context, as the step budget and the longest context as the "
                "context): cuDNN graphs keyed by those sizes, built before the runs");
  cmd->add_option("--commit", o.commit, "Commit id recorded in the JSON");
  cmd->add_option("--json", o.json_out, "Write the results as JSON here");
  cmd->footer(
      "TTFT is host wall clock around Model::ForwardBatch (the walk serve and run use), summed over "
      "a chunked prefill's forwards. --phases breaks a forward down by walk step.");
  return cmd;
}

#ifndef UNIPREFILL_WITH_CUDA

int BenchGpuPrefillCommand(const BenchGpuPrefillOptions&) {
  std::fprintf(stderr,
               "error: this uniprefill was built without the CUDA backend; build on a machine with "
               "nvcc (`bash scripts/build.sh`, CUDA is on when nvcc is found) and run on an NVIDIA "
               "GPU\n");
  return 1;
}

#else

namespace {

// cuBLASLt bf16 GEMM rate on 8192^3 through our Gemm op: the measured matrix ceiling.
double MeasureGemmTflops(DeviceContext& ctx) {
  const int64_t n = 8192;
  DeviceBuffer a(n * n * 2), b(n * n * 2), c(n * n * 2);
  ops::cuda::FillRandomBf16(ctx, a.data(), n * n, 1, 1.0f);
  ops::cuda::FillRandomBf16(ctx, b.data(), n * n, 2, 1.0f);
  auto run = [&] {
    ops::cuda::Gemm(ctx, c.View(DType::kBF16, {n, n}), a.View(DType::kBF16, {n, n}),
                    b.View(DType::kBF16, {n, n}));
  };
  for (int i = 0; i < 3; ++i) run();
  Result<std::vector<float>> ms = TimeRunsMs(ctx.cuda().stream(), 10, run);
  if (!ms.ok()) return 0;  // no ceiling to report
  return 2.0 * n * n * n / Median(std::vector<double>(ms->begin(), ms->end())) / 1e9;
}

struct Points {
  std::vector<int64_t> contexts, batches;
  std::vector<double> ratios;
};

// The lists of the flags, or false after one `error:` line.
bool ParsePoints(const BenchGpuPrefillOptions& o, Points& p) {
  if (!ParseList(o.contexts, p.contexts) ||
      std::any_of(p.contexts.begin(), p.contexts.end(),
                  [](int64_t n) { return n < 1 || n > (1 << 30); })) {
    std::fprintf(stderr, "error: --contexts '%s' is not a list of token counts\n",
                 o.contexts.c_str());
    return false;
  }
  if (!ParseList(o.batch_sizes, p.batches) ||
      std::any_of(p.batches.begin(), p.batches.end(), [](int64_t b) { return b < 1 || b > 256; })) {
    std::fprintf(stderr, "error: --batch-sizes '%s' must list sizes in 1..256\n",
                 o.batch_sizes.c_str());
    return false;
  }
  if (!o.keep_ratios.empty() &&
      (!ParseList(o.keep_ratios, p.ratios) ||
       std::any_of(p.ratios.begin(), p.ratios.end(), [](double r) { return r <= 0 || r > 1; }))) {
    std::fprintf(stderr, "error: --keep-ratios '%s' must list ratios in (0, 1]\n",
                 o.keep_ratios.c_str());
    return false;
  }
  return true;
}

struct Mode {
  std::string name;  // dense, keepR, keepR-sync
  UniPrefillConfig up;
};

// Dense, then each ratio at the model's default drop layers (and synced, with --compare-sync).
std::vector<Mode> Modes(const UniPrefillConfig& defaults, const std::vector<double>& ratios,
                        bool compare_sync) {
  Mode dense{"dense", defaults};
  dense.up.enabled = false;
  std::vector<Mode> modes = {dense};
  for (double r : ratios) {
    Mode m{"", defaults};
    m.up.enabled = true;
    m.up.selection.mode = SelectionMode::kFixedRatio;
    m.up.selection.keep_ratio = static_cast<float>(r);
    char name[32];
    std::snprintf(name, sizeof(name), "keep%.2g", r);
    m.name = name;
    modes.push_back(m);
    if (compare_sync) {
      m.up.drop_sync = DropSync::kEveryDrop;
      m.name += "-sync";
      modes.push_back(m);
    }
  }
  return modes;
}

struct Timings {
  std::vector<double> total_ms, overhead_ms;  // one per timed run
  std::vector<KeptTokens> kept;               // request 0's records of the last run
  int drop_host_syncs = 0;                    // of the last run
  int split_prefix_attentions = 0;            // of the last run (ForwardStats)
  int prefix_reads_in_place = 0;              // of the last run (ForwardStats)
  std::vector<double> step_ms;                // every forward of the last run (chunked: many)
  ForwardStats phases;                        // --phases: one more run, the walk timed per step
  ClockSummary clock;                         // the timed runs' SM clock and power (NVML)
};

// One prefill of `batch` requests of n random tokens each (seeded), whole (chunk 0: one forward)
// or in chunks of at most `chunk` rows per request and forward, the way serve cuts them: dense
// prefills as plain steps whose caches hold the earlier chunks, UniPrefill ones segment-wise
// (engine/segment_chunked_prefill.h). Fresh device caches, made before the clock starts. Returns
// the wall time of every forward (each ends with a device sync).
Result<std::vector<double>> RunPrefill(Model& model, DeviceContext& ctx, int64_t n, int64_t batch,
                                       const UniPrefillConfig& up, int chunk, uint32_t seed,
                                       ForwardStats& stats,
                                       std::vector<std::vector<KeptTokens>>& kept) {
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<std::vector<int32_t>> ids(batch, std::vector<int32_t>(n));
  std::vector<std::vector<float>> logits(batch, std::vector<float>(vocab));
  kept.assign(batch, {});
  std::vector<std::unique_ptr<SequenceCache>> caches;
  for (int64_t r = 0; r < batch; ++r) {
    for (int32_t& id : ids[r]) id = token(rng);
    caches.push_back(model.NewCache(static_cast<int>(n), up.active_drop_layers()));
    // As serve does: chunks read their cached prefix in place.
    caches.back()->ExpectPrefill(static_cast<int>(n),
                                 !(up.enabled && !up.active_drop_layers().empty()));
  }
  UP_CUDA_CHECK(cudaDeviceSynchronize());  // cache set-up done before the clock starts
  std::vector<double> step_ms;
  auto forward = [&](std::span<const SequenceStep> steps) -> Status {
    const auto start = std::chrono::steady_clock::now();
    UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, steps, up, nullptr, &stats));
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    return OkStatus();
  };
  const bool segment_wise = chunk > 0 && up.enabled && !up.active_drop_layers().empty();
  if (segment_wise) {
    std::vector<SegmentChunkedPrefill> prefills;
    for (int64_t r = 0; r < batch; ++r) {
      prefills.push_back(SegmentChunkedPrefill::Of(caches[r].get(), ids[r], chunk,
                                                   logits[r].data(), &kept[r]));
    }
    const int n_segments = model.CacheLayoutFor(up.active_drop_layers()).n_segments;
    for (;;) {
      std::vector<SequenceStep> steps;
      for (SegmentChunkedPrefill& p : prefills) {
        if (!p.finished(n_segments)) steps.push_back(p.NextStep(n_segments, up.selection.last_n));
      }
      if (steps.empty()) break;
      UP_RETURN_IF_ERROR(forward(steps));
      for (SegmentChunkedPrefill& p : prefills) {
        if (!p.finished(n_segments)) p.Advance();
      }
    }
    return step_ms;
  }
  const int64_t rows = chunk > 0 ? chunk : n;
  for (int64_t done = 0; done < n; done += rows) {
    const int64_t take = std::min(rows, n - done);
    std::vector<SequenceStep> steps;
    for (int64_t r = 0; r < batch; ++r) {
      SequenceStep s;
      s.cache = caches[r].get();
      s.tokens = std::span<const int32_t>(ids[r]).subspan(done, take);
      s.logits = done + take == n ? logits[r].data() : nullptr;
      s.kept = &kept[r];
      steps.push_back(s);
    }
    UP_RETURN_IF_ERROR(forward(steps));
  }
  return step_ms;
}

// `repeats` timed prefills after one warm-up (and with `phases` one more, its walk timed).
// sampler (null: no NVML) reads the clock and power through the timed runs.
Result<Timings> TimeMode(Model& model, DeviceContext& ctx, int64_t n, int64_t batch,
                         const UniPrefillConfig& up, int repeats, int chunk, bool phases,
                         GpuClockSampler* sampler) {
  Timings t;
  std::vector<std::vector<KeptTokens>> kept;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    if (rep == 1 && sampler != nullptr) sampler->Start();
    ForwardStats stats;
    UP_ASSIGN_OR_RETURN(std::vector<double> steps,
                        RunPrefill(model, ctx, n, batch, up, chunk,
                                   static_cast<uint32_t>(1000 + rep), stats, kept));
    if (rep == 0) continue;
    double ms = 0;
    for (double m : steps) ms += m;
    t.total_ms.push_back(ms);
    t.overhead_ms.push_back(1000.0 * (stats.scoring_s + stats.selection_s + stats.compaction_s));
    t.kept = kept[0];
    t.drop_host_syncs = stats.drop_host_syncs;
    t.split_prefix_attentions = stats.split_prefix_attentions;
    t.prefix_reads_in_place = stats.prefix_reads_in_place;
    t.step_ms = steps;
  }
  if (sampler != nullptr) t.clock = sampler->Stop();
  if (phases) {
    t.phases.time_phases = true;
    UP_RETURN_IF_ERROR(
        RunPrefill(model, ctx, n, batch, up, chunk, 999, t.phases, kept).status());
  }
  return t;
}

// The model under test, with what the report says about it (counted before it moves to the GPU).
struct BenchModel {
  std::string preset, note;
  ModelConfig config;
  UniPrefillConfig defaults;
  int64_t parameters = 0;
  int n_experts = 0;
  std::vector<double> dense_flops;  // per context of the points, one request
  std::vector<double> executed_flops;  // what the walk runs of them (ExecutedDensePrefillFlops)
  std::unique_ptr<Model> model;
  double prepare_serving_s = 0;  // --serving-graphs: Model::PrepareServing's wall time
};

Result<BenchModel> BuildModel(const BenchGpuPrefillOptions& o, const Points& p,
                              DeviceContext& ctx) {
  RandomModelOptions ro;
  ro.n_layers = o.layers;
  ro.n_experts = o.experts;
  UP_ASSIGN_OR_RETURN(ModelDefinition def, RandomModelDefinition(o.shape, ro));
  BenchModel b;
  b.preset = o.shape;
  b.note = RandomModelPresetNote(o.shape);
  if (o.layers > 0) b.note += "; " + std::to_string(o.layers) + " layers (--layers)";
  if (o.experts > 0) b.note += "; " + std::to_string(o.experts) + " experts per layer (--experts)";
  b.config = def.config;
  b.defaults = DefaultUniPrefillConfig(def.config);
  b.parameters = ParameterCount(def);
  for (const LayerDefinition& L : def.layers) {
    if (L.moe) b.n_experts = L.moe->n_experts;
  }
  for (int64_t n : p.contexts) b.dense_flops.push_back(DensePrefillFlops(def, n));
  LoadOptions lo;
  // --attention was checked against the names by CLI11.
  lo.gpu_attention = GpuAttentionFromName(o.attention).value_or(GpuAttention::kAuto);
  lo.gpu_delta_rule = o.delta_rule == "tensor-core" ? DeltaRuleChoice::kChunkedTensorCore
                      : o.delta_rule == "chunked"   ? DeltaRuleChoice::kChunked
                                                    : DeltaRuleChoice::kAuto;
  lo.gpu_moe_gemm = o.moe_gemm == "library"    ? GpuMoeGemm::kLibrary
                    : o.moe_gemm == "mma-sync" ? GpuMoeGemm::kOursMmaSync
                                               : GpuMoeGemm::kOurs;
  lo.gpu_prefix_split_min_keys = o.prefix_split;
  UP_ASSIGN_OR_RETURN(const bool every_row, LastLayerEveryRow(lo));
  for (int64_t n : p.contexts) {
    b.executed_flops.push_back(ExecutedDensePrefillFlops(def, n, every_row));
  }
  UP_ASSIGN_OR_RETURN(b.model, MakeModel(std::move(def), ctx, lo));
  // The pool as serve fixes it: blocks of --kv-block-tokens, enough for the largest point.
  int64_t blocks = 0;
  for (int64_t n : p.contexts) {
    for (int64_t batch : p.batches) {
      blocks = std::max(blocks, batch * b.config.n_layers * ((n + o.kv_block_tokens - 1) /
                                                             o.kv_block_tokens + 1));
    }
  }
  UP_RETURN_IF_ERROR(b.model->FixCachePool(static_cast<int>(blocks), o.kv_block_tokens));
  UP_CUDA_CHECK(cudaDeviceSynchronize());  // the weights are filled on the device's stream
  if (o.serving_graphs) {
    const int64_t longest = *std::max_element(p.contexts.begin(), p.contexts.end());
    const auto start = std::chrono::steady_clock::now();
    const int64_t step_rows = o.chunk_tokens > 0 ? o.chunk_tokens : longest;
    UP_RETURN_IF_ERROR(b.model->PrepareServing(static_cast<int>(step_rows),
                                               static_cast<int>(longest)));
    b.prepare_serving_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return b;
}

// The table line and the JSON row of one mode at (n tokens, batch b); dense_ms: this point's dense
// median (the mode's own for dense).
// chunk: 0 for whole prefills, else the chunk rows (whole_ms: the same mode's whole median).
// flops: the dense prefill's (the anchor's convention); executed_flops: what the walk runs of it.
nlohmann::json ReportRow(const Mode& mode, int64_t n, int64_t b, double flops,
                         double executed_flops, const Timings& t, double dense_ms,
                         double gemm_tflops, int chunk, double whole_ms) {
  const bool dense = !mode.up.enabled;
  const double ms = Median(t.total_ms), overhead = Median(t.overhead_ms);
  const double tflops = flops / ms / 1e9;
  nlohmann::json row = {{"context", n},
                        {"batch", b},
                        {"mode", mode.name},
                        {"ttft_ms_median", ms},
                        {"ttft_ms_all", t.total_ms},
                        {"dense_flops", flops}};
  if (dense) {
    row["effective_tflops"] = tflops;
    row["executed_flops"] = executed_flops;
    row["executed_tflops"] = executed_flops / ms / 1e9;
    row["share_of_datasheet_peak"] = tflops / kDatasheetBf16Tflops;
    row["share_of_measured_gemm"] = tflops / gemm_tflops;
  } else {
    row["keep_ratio"] = mode.up.selection.keep_ratio;  // the setting, not a measured share
    row["host_sync_per_drop"] = mode.up.drop_sync == DropSync::kEveryDrop;
    row["drop_host_syncs"] = t.drop_host_syncs;
    row["speedup_vs_dense"] = dense_ms / ms;
    row["uniprefill_overhead_ms_median"] = overhead;
    row["uniprefill_overhead_share"] = overhead / ms;
    nlohmann::json kept = nlohmann::json::array();
    for (const KeptTokens& k : t.kept) kept.push_back(k.kept);
    row["kept_tokens_per_drop_layer"] = kept;
  }
  if (t.clock.samples > 0) {
    row["sm_clock_mhz_mean"] = t.clock.sm_mhz_mean;
    row["sm_clock_mhz_min"] = t.clock.sm_mhz_min;
    row["sm_clock_mhz_max"] = t.clock.sm_mhz_max;
    row["power_w_mean"] = t.clock.power_w_mean;
    row["clock_samples"] = t.clock.samples;
  }
  row["chunk_tokens"] = chunk;
  row["forwards"] = t.step_ms.size();
  row["split_prefix_attentions"] = t.split_prefix_attentions;
  row["prefix_reads_in_place"] = t.prefix_reads_in_place;
  row["forward_ms_last_run"] = t.step_ms;
  if (chunk > 0) row["chunked_over_whole"] = ms / whole_ms;
  if (t.phases.time_phases) {
    nlohmann::json phases = nlohmann::json::object();
    for (size_t i = 0; i < t.phases.phase_s.size(); ++i) {
      if (t.phases.phase_s[i] > 0) {
        phases[WalkPhaseName(static_cast<WalkPhase>(i))] = 1000.0 * t.phases.phase_s[i];
      }
    }
    row["walk_phase_ms"] = phases;  // one more run, synced after every walk step
  }
  std::printf("%-8lld %5lld %-13s %10.1f %9.1f %6.1f%% %7.3fx %10.1f %8.2f%% %6.0f %5.0f\n",
              static_cast<long long>(n), static_cast<long long>(b), mode.name.c_str(), ms,
              dense ? tflops : 0.0, dense ? 100 * tflops / kDatasheetBf16Tflops : 0.0,
              dense ? 1.0 : dense_ms / ms, dense ? 0.0 : overhead,
              dense ? 0.0 : 100 * overhead / ms, t.clock.sm_mhz_mean, t.clock.power_w_mean);
  if (chunk > 0) {
    std::vector<double> steps = t.step_ms;
    std::printf("         %lld forwards of <= %d rows per request: forward ms median %.1f, max %.1f; "
                "chunked / whole %.3fx\n",
                static_cast<long long>(steps.size()), chunk, Median(steps),
                *std::max_element(steps.begin(), steps.end()), ms / whole_ms);
  }
  if (t.phases.time_phases) {
    std::printf("         walk (synced per step), ms:");
    for (size_t i = 0; i < t.phases.phase_s.size(); ++i) {
      if (t.phases.phase_s[i] > 0) {
        std::printf(" %s %.1f", WalkPhaseName(static_cast<WalkPhase>(i)),
                    1000.0 * t.phases.phase_s[i]);
      }
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  return row;
}

// The JSON's fields other than the rows: what was measured, how, and on what.
nlohmann::json Summary(const BenchGpuPrefillOptions& o, const BenchModel& bm,
                       const std::string& gpu, double gemm_tflops) {
  return {
      {"benchmark", "gpu-prefill"},
      {"date", Today()},
      {"gpu", gpu},
      {"commit", o.commit},
      {"environment", BenchEnvironment()},
      {"shape", bm.preset},
      {"attention_kernel", o.attention},
      {"moe_gemm", o.moe_gemm},
      {"delta_rule", o.delta_rule},
      {"prefix_split_min_keys", o.prefix_split},
      {"model",
       "the product's model (MakeModel + Model::ForwardBatch, the walk serve and run use) on the "
       "CUDA backend, random bf16 weights made on the device (model/model_presets.h)"},
      {"n_layers", bm.config.n_layers},
      {"n_experts", bm.n_experts},
      {"parameters", bm.parameters},
      {"shape_note", bm.note},
      {"weight_bytes", bm.model->resident_weight_bytes()},
      {"drop_layers", bm.defaults.drop_layers},
      {"kv_block_tokens", o.kv_block_tokens},
      {"serving_graphs", o.serving_graphs},
      {"prepare_serving_s", bm.prepare_serving_s},
      {"uniprefill_origin", bm.defaults.origin},
      {"ttft_timing",
       "host wall clock around Model::ForwardBatch (it ends with a device sync), after a "
       "cudaDeviceSynchronize; device caches are made before the clock starts"},
      {"keep_ratio_meaning",
       "rows' keep_ratio is the fixed-ratio setting (selection.keep_ratio), not a measured share; "
       "kept_tokens_per_drop_layer is what request 0 kept at each drop layer that selected"},
      {"measured_gemm_tflops_8192", gemm_tflops},
      {"datasheet_bf16_tflops", kDatasheetBf16Tflops},
      {"clock_sampling",
       "NVML every 50 ms through each point's timed runs (not the warm-up): mean / min / max SM "
       "clock and mean board power; absent where NVML is unavailable (0 in the table). A GPU at "
       "its power limit lowers its clock, so compare timings at the clocks they ran at"},
      {"flop_convention",
       "linear layers + causal attention (4*H*D per visible pair), as pytorch_anchor.py; "
       "embedding, norms and logits not counted; executed_tflops: the FLOPs the walk runs of "
       "them (the last layer on each request's last row: ExecutedDensePrefillFlops)"}};
}

}  // namespace

int BenchGpuPrefillCommand(const BenchGpuPrefillOptions& o) {
  Points points;
  if (!ParsePoints(o, points)) return 1;
  if (!CheckOutputWritable(o.json_out, "--json")) return 1;
  Result<std::unique_ptr<DeviceContext>> ctx_or = DeviceContext::Cuda(0);
  if (!ctx_or.ok()) {
    std::fprintf(stderr, "error: %s\n", ctx_or.status().message().c_str());
    return 1;
  }
  DeviceContext& ctx = **ctx_or;
  const std::string gpu = ctx.cuda().Describe();
  std::fprintf(stderr, "GPU: %s\n", gpu.c_str());
  const double gemm_tflops = MeasureGemmTflops(ctx);
  std::fprintf(stderr, "cuBLASLt bf16 GEMM 8192^3: %.0f TFLOP/s\n", gemm_tflops);

  const auto t_load = std::chrono::steady_clock::now();
  Result<BenchModel> built = BuildModel(o, points, ctx);
  if (!built.ok()) {
    std::fprintf(stderr, "error: --shape %s: %s\n", o.shape.c_str(),
                 built.status().message().c_str());
    return 1;
  }
  BenchModel& bm = *built;
  Model& model = *bm.model;
  std::fprintf(stderr,
               "%s: %.2fB parameters, %.1f GiB of bf16 weights, made in %.1f s; drop layers %s "
               "(%s)\n",
               bm.preset.c_str(), bm.parameters / 1e9,
               model.resident_weight_bytes() / double(1 << 30),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
               LayerListToString(bm.defaults.drop_layers).c_str(), bm.defaults.origin.c_str());

  nlohmann::json rows = nlohmann::json::array();
  // The clock and power of each point's timed runs (core/gpu_clock_sampler.h).
  const std::unique_ptr<GpuClockSampler> sampler = ClockSamplerOrNote(ctx.cuda().PciBusId());
  std::printf("%-8s %5s %-13s %10s %9s %7s %8s %10s %9s %6s %5s\n", "context", "batch", "mode",
              "TTFT ms", "TFLOP/s", "peak%", "speedup", "UP ms", "UP share", "SM MHz", "W");
  for (size_t ci = 0; ci < points.contexts.size(); ++ci) {
    const int64_t n = points.contexts[ci];
    for (int64_t b : points.batches) {
      double dense_ms = 0;
      double dense_chunked_ms = 0;
      for (const Mode& mode : Modes(bm.defaults, points.ratios, o.compare_sync)) {
        double whole_ms = 0;
        std::vector<int> chunks = {0};  // whole, then chunked when one chunk can't hold it all
        if (o.chunk_tokens > 0 && o.chunk_tokens < n) chunks.push_back(o.chunk_tokens);
        for (int chunk : chunks) {
          Result<Timings> t =
              TimeMode(model, ctx, n, b, mode.up, o.repeats, chunk, o.phases, sampler.get());
          if (!t.ok()) {
            std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
            return 1;
          }
          const double ms = Median(t->total_ms);
          Mode shown = mode;
          if (chunk == 0) {
            whole_ms = ms;
            if (!mode.up.enabled) dense_ms = ms;
          } else {
            shown.name += "/c" + std::to_string(chunk);
            if (!mode.up.enabled) dense_chunked_ms = ms;
          }
          // Speedups compare like with like: chunked UniPrefill against chunked dense.
          rows.push_back(ReportRow(shown, n, b, bm.dense_flops[ci] * b,
                                   bm.executed_flops[ci] * b, *t,
                                   chunk == 0 ? dense_ms : dense_chunked_ms, gemm_tflops, chunk,
                                   whole_ms));
        }
      }
    }
  }
  nlohmann::json j = Summary(o, bm, gpu, gemm_tflops);
  j["rows"] = rows;
  if (!o.json_out.empty() && !WriteJsonFile(o.json_out, j, "--json")) return 1;
  return 0;
}

#endif

}  // namespace uniprefill::cli
