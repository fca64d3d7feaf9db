#include "bench_gpu_prefill_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "output_files.h"

#ifdef UNIPREFILL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "model/cuda/synthetic_transformer.h"
#include "ops/cuda/cuda_dense_ops.h"
#endif

namespace uniprefill::cli {
namespace {

// Hopper SXM dense bf16 tensor-core peak (datasheet; H100 and H200 share it).
constexpr double kDatasheetBf16Tflops = 989.4;

template <typename T>
bool ParseList(const std::string& text, std::vector<T>& out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    T v;
    if (!(is >> v) || !is.eof()) return false;
    out.push_back(v);
  }
  return !out.empty();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string Today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

}  // namespace

CLI::App* AddBenchGpuPrefillCommand(CLI::App& bench_group, BenchGpuPrefillOptions& o) {
  CLI::App* cmd = bench_group.add_subcommand(
      "gpu-prefill",
      "Dense vs UniPrefill prefill on the GPU with a synthetic model (random weights, no files)");
  cmd->add_option("--shape", o.shape,
                  "Model shape: llama-3.1-8b, gemma-3-12b, qwen3-next-80b-a3b (256 of its 512 "
                  "experts), tiny or tiny-hybrid")
      ->capture_default_str();
  cmd->add_option("--contexts", o.contexts, "Prompt lengths in tokens")->capture_default_str();
  cmd->add_option("--batch-sizes", o.batch_sizes, "Requests per packed prefill")
      ->capture_default_str();
  cmd->add_option("--keep-ratios", o.keep_ratios,
                  "UniPrefill fixed keep ratios to run beside dense ('' for dense only)")
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed runs per point (after one warm-up); medians")
      ->check(CLI::Range(1, 50))
      ->capture_default_str();
  cmd->add_flag("--time-attention", o.time_attention,
                "Also time every flash-attention launch, DeltaNet core and MoE (one extra dense "
                "run per point)");
  cmd->add_flag("--compare-sync", o.compare_sync,
                "Also run each keep ratio the way top-p must: a host sync per drop layer to learn "
                "the kept counts (mode keepR-sync), to show what the sync-free path saves");
  cmd->add_option("--commit", o.commit, "Commit id recorded in the JSON");
  cmd->add_option("--json", o.json_out, "Write the results as JSON here");
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
  cudaEvent_t start, stop;
  UP_CUDA_CHECK(cudaEventCreate(&start));
  UP_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int rep = 0; rep < 10; ++rep) {
    UP_CUDA_CHECK(cudaEventRecord(start, ctx.cuda().stream()));
    run();
    UP_CUDA_CHECK(cudaEventRecord(stop, ctx.cuda().stream()));
    UP_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    UP_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  UP_CUDA_CHECK(cudaEventDestroy(start));
  UP_CUDA_CHECK(cudaEventDestroy(stop));
  return 2.0 * n * n * n / Median(ms) / 1e9;
}

}  // namespace

int BenchGpuPrefillCommand(const BenchGpuPrefillOptions& o) {
  std::vector<int64_t> contexts, batches;
  std::vector<double> ratios;
  if (!ParseList(o.contexts, contexts) ||
      std::any_of(contexts.begin(), contexts.end(), [](int64_t n) { return n < 1; })) {
    std::fprintf(stderr, "error: --contexts '%s' is not a list of token counts\n",
                 o.contexts.c_str());
    return 1;
  }
  if (!ParseList(o.batch_sizes, batches) ||
      std::any_of(batches.begin(), batches.end(), [](int64_t b) { return b < 1 || b > 256; })) {
    std::fprintf(stderr, "error: --batch-sizes '%s' must list sizes in 1..256\n",
                 o.batch_sizes.c_str());
    return 1;
  }
  if (!o.keep_ratios.empty() &&
      (!ParseList(o.keep_ratios, ratios) ||
       std::any_of(ratios.begin(), ratios.end(), [](double r) { return r <= 0 || r > 1; }))) {
    std::fprintf(stderr, "error: --keep-ratios '%s' must list ratios in (0, 1]\n",
                 o.keep_ratios.c_str());
    return 1;
  }
  Result<SyntheticShape> shape = SyntheticShapeByName(o.shape);
  if (!shape.ok()) {
    std::fprintf(stderr, "error: --shape: %s\n", shape.status().message().c_str());
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

  int64_t max_tokens = 0;
  for (int64_t n : contexts) {
    for (int64_t b : batches) max_tokens = std::max(max_tokens, n * b);
  }
  const double gemm_tflops = MeasureGemmTflops(ctx);
  std::fprintf(stderr, "cuBLASLt bf16 GEMM 8192^3: %.0f TFLOP/s\n", gemm_tflops);
  const auto t_load = std::chrono::steady_clock::now();
  Result<std::unique_ptr<SyntheticTransformer>> model_or =
      SyntheticTransformer::Create(ctx, *shape, max_tokens, /*seed=*/1);
  if (!model_or.ok()) {
    std::fprintf(stderr, "error: %s\n", model_or.status().message().c_str());
    return 1;
  }
  SyntheticTransformer& model = **model_or;
  std::fprintf(stderr, "%s: %.2fB parameters, %.1f GiB of bf16 weights, made in %.1f s; work "
               "buffers for %lld tokens\n",
               shape->name.c_str(), shape->Parameters() / 1e9,
               model.weight_bytes() / double(1 << 30),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
               static_cast<long long>(max_tokens));

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-8s %5s %-13s %10s %9s %7s %8s %10s %9s\n", "context", "batch", "mode", "TTFT ms",
              "TFLOP/s", "peak%", "speedup", "UP ms", "UP share");
  for (int64_t n : contexts) {
    for (int64_t b : batches) {
      const std::vector<int64_t> lengths(b, n);
      const double flops = shape->DensePrefillFlops(n) * b;
      std::vector<std::pair<std::string, UniPrefillRun>> modes = {{"dense", UniPrefillRun{}}};
      for (double r : ratios) {
        UniPrefillRun up;
        up.enabled = true;
        up.selection.mode = sparsity::SelectionMode::kFixedRatio;
        up.selection.keep_ratio = static_cast<float>(r);
        char name[32];
        std::snprintf(name, sizeof(name), "keep%.2g", r);
        modes.push_back({name, up});
        if (o.compare_sync) {
          up.sync_each_drop = true;
          modes.push_back({std::string(name) + "-sync", up});
        }
      }
      double dense_ms = 0;
      for (const auto& [name, up] : modes) {
        std::vector<double> total, overhead;
        PrefillTiming last;
        for (int rep = 0; rep <= o.repeats; ++rep) {  // rep 0 warms up
          Result<PrefillTiming> t = model.Prefill(lengths, up, /*seed=*/1000 + rep, false, nullptr);
          if (!t.ok()) {
            std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
            return 1;
          }
          if (rep == 0) continue;
          total.push_back(t->total_ms);
          overhead.push_back(t->uniprefill_ms);
          last = *t;
        }
        const double ms = Median(total);
        if (name == "dense") dense_ms = ms;
        nlohmann::json row = {{"context", n},
                              {"batch", b},
                              {"mode", name},
                              {"ttft_ms_median", ms},
                              {"ttft_ms_all", total},
                              {"dense_flops", flops}};
        const double tflops = flops / ms / 1e9;
        if (name == "dense") {
          row["effective_tflops"] = tflops;
          row["share_of_datasheet_peak"] = tflops / kDatasheetBf16Tflops;
          row["share_of_measured_gemm"] = tflops / gemm_tflops;
        } else {
          row["keep_ratio"] = up.selection.keep_ratio;
          row["host_sync_per_drop"] = up.sync_each_drop;
          row["speedup_vs_dense"] = dense_ms / ms;
          row["uniprefill_overhead_ms_median"] = Median(overhead);
          row["uniprefill_overhead_share"] = Median(overhead) / ms;
          row["kept_tokens_per_drop_layer"] = last.kept.empty() ? nlohmann::json::array()
                                                                : nlohmann::json(last.kept[0]);
        }
        if (name == "dense" && o.time_attention) {
          Result<PrefillTiming> t = model.Prefill(lengths, up, 999, true, nullptr);
          if (t.ok()) {
            const double attn_flops =
                (shape->DensePrefillFlops(n) - shape->LinearPrefillFlops(n)) * b;
            row["attention_ms"] = t->attention_ms;
            row["attention_tflops"] = attn_flops / t->attention_ms / 1e9;
            if (t->linear_attention_ms > 0) {
              row["linear_attention_core_ms"] = t->linear_attention_ms;
            }
            if (t->moe_ms > 0) row["moe_ms"] = t->moe_ms;
            row["timed_run_total_ms"] = t->total_ms;
          }
        }
        rows.push_back(row);
        std::printf("%-8lld %5lld %-13s %10.1f %9.1f %6.1f%% %7.3fx %10.1f %8.2f%%\n",
                    static_cast<long long>(n), static_cast<long long>(b), name.c_str(), ms,
                    name == "dense" ? tflops : 0.0,
                    name == "dense" ? 100 * tflops / kDatasheetBf16Tflops : 0.0,
                    name == "dense" ? 1.0 : dense_ms / ms,
                    name == "dense" ? 0.0 : Median(overhead),
                    name == "dense" ? 0.0 : 100 * Median(overhead) / ms);
        std::fflush(stdout);
      }
    }
  }
  nlohmann::json j = {{"benchmark", "gpu-prefill"},
                      {"date", Today()},
                      {"gpu", gpu},
                      {"commit", o.commit},
                      {"shape", shape->name},
                      {"parameters", shape->Parameters()},
                      {"shape_note", shape->note},
                      {"weight_bytes", model.weight_bytes()},
                      {"drop_layers", shape->drop_layers},
                      {"measured_gemm_tflops_8192", gemm_tflops},
                      {"datasheet_bf16_tflops", kDatasheetBf16Tflops},
                      {"flop_convention",
                       "linear layers + causal attention (4*H*D per visible pair), as "
                       "pytorch_anchor.py; embedding, norms and logits not counted"},
                      {"rows", rows}};
  if (!o.json_out.empty() && !WriteJsonFile(o.json_out, j, "--json")) return 1;
  return 0;
}

#endif

}  // namespace uniprefill::cli
