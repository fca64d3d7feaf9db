// Kernel benchmarks on the Gemma 3 270M shapes: Linear decode matvec per weight type (GB/s of
// weight bytes streamed), Linear prefill GEMM (GFLOP/s), attention prefill at 4K and decode at 16K
// keys (GFLOP/s counting 4 * D flops per visible (query head, key) pair: QK^T and PV).
// All runs use a CPU context with every core. Run:
//   build/uniprefill_bench_kernels --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../tests/ops/ops_test_util.h"
#include "core/buffer.h"
#include "core/cpu_isa.h"
#include "io/dequant.h"
#include "ops/cpu/cpu_quant_lanes_i16.h"
#include "ops/ops.h"

namespace uniprefill::ops {
namespace {

// Contexts by thread count (0: every core) and CPU ISA level (kAuto: the best), built on first use.
DeviceContext& Ctx(int threads = 0, CpuIsa isa = CpuIsa::kAuto) {
  static std::map<std::pair<int, CpuIsa>, std::unique_ptr<DeviceContext>> ctx;
  auto& c = ctx[{threads == 1 ? 1 : 0, isa}];
  if (!c) c = DeviceContext::Cpu(threads, isa);
  return *c;
}

// args: dtype, in, out, rows of x, threads (0: every core), CPU ISA level (core/cpu_isa.h)
void BM_LinearDecode(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t in = state.range(1), out = state.range(2), t = state.range(3);
  const auto isa = static_cast<CpuIsa>(state.range(5));
  if (!ResolveCpuIsa(isa, DetectCpuFeatures()).ok()) {
    state.SkipWithError("this CPU lacks the ISA level");
    return;
  }
  DeviceContext& ctx = Ctx(static_cast<int>(state.range(4)), isa);
  std::mt19937 rng(1);
  std::vector<uint8_t> w = testing::RandomWeights(rng, type, out, in);
  LinearWeight lw;
  lw.parts.push_back(TensorView::Contiguous(w.data(), type, {out, in}));
  lw.in_features = in;
  lw.out_features = out;
  // What a loaded CPU model has (MakeModel): the Q8_0 lanes kernel's block sums.
  cpu::AttachBlockQuantSums(lw, ResolveCpuIsa(isa, DetectCpuFeatures()).value());
  std::vector<float> x = testing::RandomFloats(rng, t * in), y(t * out);
  const TensorView xv = TensorView::Contiguous(x.data(), DType::kF32, {t, in});
  const TensorView yv = TensorView::Contiguous(y.data(), DType::kF32, {t, out});
  for (auto _ : state) {
    Linear(ctx, yv, xv, lw);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(DTypeName(type)) + " " +
                 std::string(CpuIsaName(ResolveCpuIsa(isa, DetectCpuFeatures()).value())));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()),
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * in * out * t,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// One thread, rates from CPU time: the per-core kernel speed (robust on a shared machine), at the
// AVX2 baseline and at the best level of this CPU; T = 1 runs the int16-activation kernels where
// the level has one, T = 2 the f32-activation ones.
void DecodeArgsOneThread(benchmark::internal::Benchmark* b) {
  const DType types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K, DType::kQ4_1,
                         DType::kF32,  DType::kF16,  DType::kQ4_0, DType::kQ5_K};
  for (int64_t isa : {static_cast<int64_t>(CpuIsa::kAvx2), static_cast<int64_t>(CpuIsa::kAuto)}) {
    for (DType ty : types) {
      for (int64_t t : {1, 2}) b->Args({static_cast<int64_t>(ty), 640, 2048, t, 1, isa});
    }
    b->Args({static_cast<int64_t>(DType::kQ8_0), 640, 262144, 1, 1, isa});
    // A decode step of 16 requests: the batched int16 rows (LinearInt16Rows) where the level
    // has int16 kernels for the type (K-quants: not on AVX2, which takes the 7-row f32 path).
    for (DType ty : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K, DType::kQ4_1}) {
      b->Args({static_cast<int64_t>(ty), 640, 2048, 16, 1, isa});
    }
    b->Args({static_cast<int64_t>(DType::kQ8_0), 640, 262144, 16, 1, isa});
  }
}
BENCHMARK(BM_LinearDecode)->Name("BM_LinearDecode1T")->Apply(DecodeArgsOneThread)
    ->ArgNames({"type", "in", "out", "T", "threads", "isa"})->Unit(benchmark::kMicrosecond);

void DecodeArgs(benchmark::internal::Benchmark* b) {
  const DType model_types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K};
  const DType other_types[] = {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ5_K,
                               DType::kQ4_1};
  const int64_t shapes[][2] = {{640, 1024}, {640, 2048}, {2048, 640}};
  for (DType ty : model_types) {
    for (auto& s : shapes) b->Args({static_cast<int64_t>(ty), s[0], s[1], 1, 0, 0});
  }
  for (DType ty : other_types) b->Args({static_cast<int64_t>(ty), 640, 2048, 1, 0, 0});
  // Multi-row decode (weights read once for 4 rows).
  b->Args({static_cast<int64_t>(DType::kQ5_0), 640, 2048, 4, 0, 0});
  b->Args({static_cast<int64_t>(DType::kQ6_K), 2048, 640, 4, 0, 0});
  // The tied output head: token_embd Q8_0 [262144, 640].
  b->Args({static_cast<int64_t>(DType::kQ8_0), 640, 262144, 1, 0, 0});
  b->Args({static_cast<int64_t>(DType::kQ8_0), 640, 262144, 4, 0, 0});
}
BENCHMARK(BM_LinearDecode)->Apply(DecodeArgs)
    ->ArgNames({"type", "in", "out", "T", "threads", "isa"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// Prefill GEMM: x f32 [512, 640] @ W f32 [2048, 640]^T through OpenBLAS.
void BM_LinearGemm(benchmark::State& state) {
  const int64_t t = state.range(0), in = state.range(1), out = state.range(2);
  std::mt19937 rng(2);
  LinearWeight lw;
  lw.in_features = in;
  lw.out_features = out;
  lw.f32 = Buffer(sizeof(float) * in * out);
  const std::vector<float> wf = testing::RandomFloats(rng, in * out);
  std::copy(wf.begin(), wf.end(), lw.f32.as<float>());
  lw.parts.push_back(TensorView::Contiguous(lw.f32.data(), DType::kF32, {out, in}));
  std::vector<float> x = testing::RandomFloats(rng, t * in), y(t * out);
  for (auto _ : state) {
    Linear(Ctx(), TensorView::Contiguous(y.data(), DType::kF32, {t, out}),
           TensorView::Contiguous(x.data(), DType::kF32, {t, in}), lw);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * t * in * out,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearGemm)->Args({512, 640, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

// Prefill GEMM on a quantised weight, x f32 [t, in] @ W [out, in]^T, one thread: with an f32 copy
// (sgemm, the old default) or without (LinearInt16Rows on the stored weights). args: dtype, t,
// in, out, with_f32.
void BM_LinearGemmQuant(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t t = state.range(1), in = state.range(2), out = state.range(3);
  std::mt19937 rng(3);
  std::vector<uint8_t> w = testing::RandomWeights(rng, type, out, in);
  LinearWeight lw;
  lw.parts.push_back(TensorView::Contiguous(w.data(), type, {out, in}));
  lw.in_features = in;
  lw.out_features = out;
  // mode: 1 sgemm on the f32 copy, 0 int16 rows, 2 int8 rows (VNNI; else the int16 rows), 3 bf16
  // AMX tiles (the amx-bf16 level; else the int16 rows).
  const int64_t mode = state.range(4);
  lw.int8_rows_activations = mode == 2;
  lw.bf16_prefill_gemm = mode == 3;
  if (mode == 1) {
    lw.f32 = Buffer(sizeof(float) * in * out);
    if (!Dequantize(type, w.data(), lw.f32.as<float>(), in * out).ok()) {
      state.SkipWithError("dequantise failed");
      return;
    }
  }
  std::vector<float> x = testing::RandomFloats(rng, t * in), y(t * out);
  for (auto _ : state) {
    Linear(Ctx(1), TensorView::Contiguous(y.data(), DType::kF32, {t, out}),
           TensorView::Contiguous(x.data(), DType::kF32, {t, in}), lw);
    benchmark::DoNotOptimize(y.data());
  }
  const char* path = mode == 1 ? " sgemm" : mode == 2 ? " int8" : mode == 3 ? " bf16" : " int16";
  state.SetLabel(std::string(DTypeName(type)) + path);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * t * in * out,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
void GemmQuantArgs(benchmark::internal::Benchmark* b) {
  // Gemma 3 270M's shapes per type: Q4_K attn_output 1024 -> 640, Q6_K ffn_down 2048 -> 640,
  // Q5_0 gate / up and Q8_0 640 -> 2048.
  const int64_t shapes[][3] = {{static_cast<int64_t>(DType::kQ4_K), 1024, 640},
                               {static_cast<int64_t>(DType::kQ5_0), 640, 2048},
                               {static_cast<int64_t>(DType::kQ6_K), 2048, 640},
                               {static_cast<int64_t>(DType::kQ8_0), 640, 2048}};
  for (const auto& s : shapes) {
    for (int64_t mode : {1, 0, 2, 3}) b->Args({s[0], 512, s[1], s[2], mode});
  }
  // A 16-request decode step (int16 / int8 rows; sgemm is not what decode runs): the layers, and
  // a 32768-row slice of the Q8_0 output head.
  // Mode 3 there is the few-rows AMX layout (cpu_linear_bf16.h).
  for (const auto& s : shapes) {
    for (int64_t mode : {0, 2, 3}) b->Args({s[0], 16, s[1], s[2], mode});
  }
  for (int64_t t : {2, 4, 16, 64}) {
    for (int64_t mode : {0, 2, 3}) {
      b->Args({static_cast<int64_t>(DType::kQ8_0), t, 640, 32768, mode});
    }
  }
}
BENCHMARK(BM_LinearGemmQuant)->Apply(GemmQuantArgs)
    ->ArgNames({"type", "T", "in", "out", "mode"})->Unit(benchmark::kMillisecond);

// args: tq, tk, window, threads (0: every core), CPU ISA level. Gemma 3 270M: Hq 4, Hkv 1,
// D 256; queries are the last tq keys.
void BM_Attention(benchmark::State& state) {
  const int64_t tq = state.range(0), tk = state.range(1), hq = 4, hkv = 1, d = 256;
  const int window = static_cast<int>(state.range(2));
  const auto isa = static_cast<CpuIsa>(state.range(4));
  if (!ResolveCpuIsa(isa, DetectCpuFeatures()).ok()) {
    state.SkipWithError("this CPU lacks the ISA level");
    return;
  }
  DeviceContext& ctx = Ctx(static_cast<int>(state.range(3)), isa);
  std::mt19937 rng(3);
  std::vector<float> q = testing::RandomFloats(rng, tq * hq * d),
                     k = testing::RandomFloats(rng, tk * hkv * d),
                     v = testing::RandomFloats(rng, tk * hkv * d), o(tq * hq * d);
  std::vector<int32_t> q_pos(tq), k_pos(tk);
  for (int64_t j = 0; j < tk; ++j) k_pos[j] = static_cast<int32_t>(j);
  for (int64_t i = 0; i < tq; ++i) q_pos[i] = static_cast<int32_t>(tk - tq + i);
  double pairs = 0;  // visible (query, key) pairs
  for (int64_t i = 0; i < tq; ++i) {
    const int64_t visible = q_pos[i] + 1;
    pairs += window > 0 ? std::min<int64_t>(visible, window) : visible;
  }
  AttentionParams params;
  params.scale = 1.0f / 16.0f;
  params.window = window;
  for (auto _ : state) {
    Attention(ctx, TensorView::Contiguous(o.data(), DType::kF32, {tq, hq, d}),
              TensorView::Contiguous(q.data(), DType::kF32, {tq, hq, d}),
              TensorView::Contiguous(k.data(), DType::kF32, {tk, hkv, d}),
              TensorView::Contiguous(v.data(), DType::kF32, {tk, hkv, d}), q_pos.data(),
              k_pos.data(), params);
    benchmark::DoNotOptimize(o.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * d * hq * pairs,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  // K and V bytes a decode step must read (visible keys only).
  const double kv_bytes = 2.0 * 4 * d * hkv * (window > 0 ? std::min<int64_t>(tk, window) : tk);
  state.counters["KV GB/s"] = benchmark::Counter(kv_bytes * static_cast<double>(tq == 1),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)
    ->Name("BM_Attention1T")
    ->ArgNames({"tq", "tk", "window", "threads", "isa"})
    ->ArgsProduct({{1024}, {1024}, {0}, {1}, {1, 0}})
    ->ArgsProduct({{4096}, {4096}, {512}, {1}, {1, 0}})
    ->ArgsProduct({{1}, {16384}, {0}, {1}, {1, 0}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention)
    ->ArgNames({"tq", "tk", "window", "threads", "isa"})
    ->Args({4096, 4096, 0, 0, 0})
    ->Args({4096, 4096, 512, 0, 0})
    ->Args({1, 16384, 0, 0, 0})
    ->Args({1, 16384, 512, 0, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Decode attention over a paged cache: Gemma 3 270M's Hq 4, Hkv 1, D 256, tk keys in 16-key
// blocks, each its own allocation. args: tk, gather (1: copy the blocks into one buffer first,
// as the attention block did before AttentionPaged; 0: read them in place).
void BM_AttentionPagedDecode(benchmark::State& state) {
  const int64_t tk = state.range(0), hq = 4, hkv = 1, d = 256, block = 16;
  const bool gather = state.range(1) != 0;
  DeviceContext& ctx = Ctx(1);
  std::mt19937 rng(4);
  std::vector<std::vector<float>> k_blocks, v_blocks;
  std::vector<KvRun> runs;
  for (int64_t j = 0; j < tk; j += block) {
    k_blocks.push_back(testing::RandomFloats(rng, block * hkv * d));
    v_blocks.push_back(testing::RandomFloats(rng, block * hkv * d));
    runs.push_back({TensorView::Contiguous(k_blocks.back().data(), DType::kF32, {block, hkv, d}),
                    TensorView::Contiguous(v_blocks.back().data(), DType::kF32, {block, hkv, d})});
  }
  std::vector<float> q = testing::RandomFloats(rng, hq * d), o(hq * d);
  std::vector<float> k_all(tk * hkv * d), v_all(tk * hkv * d);
  std::vector<int32_t> k_pos(tk), q_pos = {static_cast<int32_t>(tk - 1)};
  for (int64_t j = 0; j < tk; ++j) k_pos[j] = static_cast<int32_t>(j);
  AttentionParams params;
  params.scale = 1.0f / 16.0f;
  const TensorView ov = TensorView::Contiguous(o.data(), DType::kF32, {1, hq, d});
  const TensorView qv = TensorView::Contiguous(q.data(), DType::kF32, {1, hq, d});
  for (auto _ : state) {
    if (gather) {
      const size_t row = hkv * d * block;
      for (size_t b = 0; b < runs.size(); ++b) {
        std::copy(k_blocks[b].begin(), k_blocks[b].end(), k_all.begin() + b * row);
        std::copy(v_blocks[b].begin(), v_blocks[b].end(), v_all.begin() + b * row);
      }
      Attention(ctx, ov, qv, TensorView::Contiguous(k_all.data(), DType::kF32, {tk, hkv, d}),
                TensorView::Contiguous(v_all.data(), DType::kF32, {tk, hkv, d}), q_pos.data(),
                k_pos.data(), params);
    } else {
      AttentionPaged(ctx, ov, qv, runs, q_pos.data(), k_pos.data(), params);
    }
    benchmark::DoNotOptimize(o.data());
  }
}
BENCHMARK(BM_AttentionPagedDecode)
    ->ArgNames({"tk", "gather"})
    ->ArgsProduct({{1024, 16384}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace uniprefill::ops
