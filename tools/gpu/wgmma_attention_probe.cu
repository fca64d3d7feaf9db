// Development probe for the sm_90a attention kernel (src/ops/cuda/sm90/flash_attention_wgmma.cu):
// correctness against a naive f32 GPU reference on a varlen batch of odd lengths, then causal
// throughput at the issue-17 shapes, each variant alone after idle and 20 back-to-back. Built
// with nvcc alone, so that a device call needs no project build:
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     tools/gpu/wgmma_attention_probe.cu src/ops/cuda/sm90/flash_attention_wgmma.cu -o probe
//   ./probe check | ./probe bench [N...] | ./probe ab [N...]
//
// `ab` runs the overlap schedules with their tile orders and O-rescale skip interleaved (rounds
// of 10 back-to-back launches each, variants in turn, 9 rounds) and prints each one's median: the
// variants meet the same clock and temperature, as a same-call A/B must.
//
// The engine's tests (tests/ops/cuda/flash_attention_wgmma_test.cc) are the judges that run in
// the CUDA suite; this file is for measuring.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/sm90/flash_attention_wgmma.h"

namespace {

using bf16 = __nv_bfloat16;
using uniprefill::ops::cuda::LaunchFlashAttentionWgmma;
using uniprefill::ops::cuda::WgmmaAttentionProblem;
using uniprefill::ops::cuda::WgmmaAttentionSchedule;
using uniprefill::ops::cuda::WgmmaTileOrder;

struct Variant {
  const char* name;
  WgmmaAttentionSchedule schedule;
  int stages;
  WgmmaTileOrder order = WgmmaTileOrder::kHeadMajor;
  bool skip_unit_rescale = false;
};
constexpr Variant kVariants[] = {
    {"serial/2", WgmmaAttentionSchedule::kSerial, 2},
    {"serial/3", WgmmaAttentionSchedule::kSerial, 3},
    {"overlap/2", WgmmaAttentionSchedule::kIntraOverlap, 2},
    {"overlap/3", WgmmaAttentionSchedule::kIntraOverlap, 3},
    {"o3+group", WgmmaAttentionSchedule::kIntraOverlap, 3, WgmmaTileOrder::kKvGroupLongestFirst},
    {"o3+skip", WgmmaAttentionSchedule::kIntraOverlap, 3, WgmmaTileOrder::kHeadMajor, true},
    {"o3+grp+skp", WgmmaAttentionSchedule::kIntraOverlap, 3,
     WgmmaTileOrder::kKvGroupLongestFirst, true},
    {"s3+grp+skp", WgmmaAttentionSchedule::kSerial, 3, WgmmaTileOrder::kKvGroupLongestFirst, true},
    {"pvexp/3", WgmmaAttentionSchedule::kIntraOverlapPvBesideExp, 3},
    {"pvexp+g+s", WgmmaAttentionSchedule::kIntraOverlapPvBesideExp, 3,
     WgmmaTileOrder::kKvGroupLongestFirst, true},
};
void Apply(const Variant& variant, WgmmaAttentionProblem& p) {
  p.schedule = variant.schedule;
  p.stages = variant.stages;
  p.tile_order = variant.order;
  p.skip_unit_rescale = variant.skip_unit_rescale;
}

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// out f32 [rows, hq, d] = causal softmax(q k^T * scale) v per sequence, one warp per (row, head).
__global__ void NaiveAttention(const bf16* qkv, int64_t width, int hq, int hkv, int d,
                               const int* seq_of_row, const int* cu, float scale, float* out,
                               int rows) {
  const int row = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  if (row >= rows) return;
  const int b = seq_of_row[row], begin = cu[b];
  const int kvh = h / (hq / hkv);
  const bf16* q = qkv + row * width + h * d;
  float mx = -INFINITY;
  for (int j = begin; j <= row; ++j) {
    const bf16* k = qkv + j * width + hq * d + kvh * d;
    float dot = 0;
    for (int i = lane; i < d; i += 32) dot += __bfloat162float(q[i]) * __bfloat162float(k[i]);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    mx = fmaxf(mx, dot * scale);
  }
  float acc[8] = {0};  // d <= 256
  float sum = 0;
  for (int j = begin; j <= row; ++j) {
    const bf16* k = qkv + j * width + hq * d + kvh * d;
    const bf16* v = qkv + j * width + (hq + hkv) * d + kvh * d;
    float dot = 0;
    for (int i = lane; i < d; i += 32) dot += __bfloat162float(q[i]) * __bfloat162float(k[i]);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float p = expf(dot * scale - mx);
    sum += p;
    for (int i = lane, n = 0; i < d; i += 32, ++n) acc[n] += p * __bfloat162float(v[i]);
  }
  for (int i = lane, n = 0; i < d; i += 32, ++n) {
    out[(int64_t(row) * hq + h) * d + i] = acc[n] / sum;
  }
}

std::vector<bf16> Random(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(u(rng));
  return v;
}

struct Packed {
  int hq, hkv, d = 128;
  int64_t width() const { return int64_t(hq + 2 * hkv) * d; }
};

// cu: device int32 [batch + 1] row offsets; the sequences are adjacent.
WgmmaAttentionProblem Problem(const Packed& s, const bf16* qkv, bf16* out, int64_t rows,
                              const int* cu, int batch, int max_len) {
  WgmmaAttentionProblem p;
  p.q = qkv;
  p.k = qkv + int64_t(s.hq) * s.d;
  p.v = qkv + int64_t(s.hq + s.hkv) * s.d;
  p.out = out;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = s.width();
  p.out_row_stride = int64_t(s.hq) * s.d;
  p.rows = rows;
  p.seq_begin = cu;
  p.seq_len = cu + batch + 1;  // the caller stores the lengths after the offsets
  p.batch = batch;
  p.max_seqlen = max_len;
  p.hq = s.hq;
  p.hkv = s.hkv;
  p.head_dim = s.d;
  p.scale = 1.0f / std::sqrt(float(s.d));
  return p;
}

int Check() {
  int failures = 0;
  for (const Variant& variant : kVariants) {
    for (auto [hq, hkv, lens, range] :
         {std::tuple{8, 2, std::vector<int>{1, 77, 128, 129, 300, 1000, 2049}, 2.0f},
          std::tuple{32, 8, std::vector<int>{4096}, 1.0f},
          std::tuple{4, 4, std::vector<int>{255, 3, 640}, 6.0f}}) {
      Packed s{hq, hkv};
      std::vector<int> cu{0}, seq_of_row;
      for (int i = 0; i < int(lens.size()); ++i) {
        cu.push_back(cu.back() + lens[i]);
        seq_of_row.insert(seq_of_row.end(), lens[i], i);
      }
      const int64_t rows = cu.back();
      int max_len = 0;
      for (int l : lens) max_len = std::max(max_len, l);
      std::mt19937 rng(hq * 131 + lens.size());
      const auto host = Random(rng, rows * s.width(), -range, range);
      bf16 *qkv, *out;
      float* ref;
      int *cu_dev, *sor_dev;
      CHECK(cudaMalloc(&qkv, host.size() * 2));
      CHECK(cudaMalloc(&out, rows * hq * s.d * 2));
      CHECK(cudaMalloc(&ref, rows * hq * s.d * 4));
      std::vector<int> cu_and_len = cu;
      for (int l : lens) cu_and_len.push_back(l);
      CHECK(cudaMalloc(&cu_dev, cu_and_len.size() * 4));
      CHECK(cudaMalloc(&sor_dev, rows * 4));
      CHECK(cudaMemcpy(qkv, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(cu_dev, cu_and_len.data(), cu_and_len.size() * 4, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(sor_dev, seq_of_row.data(), rows * 4, cudaMemcpyHostToDevice));
      CHECK(cudaMemset(out, 0xFF, rows * hq * s.d * 2));  // NaN: an unwritten element shows
      auto p = Problem(s, qkv, out, rows, cu_dev, int(lens.size()), max_len);
      Apply(variant, p);
      CHECK(LaunchFlashAttentionWgmma(p, nullptr));
      NaiveAttention<<<dim3(rows, hq), 32>>>(qkv, s.width(), hq, hkv, s.d, sor_dev, cu_dev,
                                             p.scale, ref, int(rows));
      CHECK(cudaDeviceSynchronize());
      std::vector<bf16> got(rows * hq * s.d);
      std::vector<float> want(got.size());
      CHECK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(want.data(), ref, want.size() * 4, cudaMemcpyDeviceToHost));
      double max_err = 0, max_ref = 0;
      int64_t bad = 0, first_bad = -1;
      for (size_t i = 0; i < got.size(); ++i) {
        const float g = __bfloat162float(got[i]);
        const double e = std::fabs(double(g) - want[i]);
        max_ref = std::max(max_ref, double(std::fabs(want[i])));
        if (!(e <= 0.02 + 0.02 * std::fabs(want[i]))) {
          if (first_bad < 0) first_bad = int64_t(i);
          ++bad;
        }
        if (e == e) max_err = std::max(max_err, e);
      }
      std::printf("check %-10s hq %2d hkv %d seqs %zu rows %lld: max |err| %.4g (max |ref| "
                  "%.3g), %lld bad",
                  variant.name, hq, hkv, lens.size(), (long long)rows, max_err, max_ref,
                  (long long)bad);
      if (bad) {
        const int64_t i = first_bad, row = i / (hq * s.d), h = (i / s.d) % hq, c = i % s.d;
        std::printf(" (first: row %lld head %lld col %lld got %g want %g)", (long long)row,
                    (long long)h, (long long)c, __bfloat162float(got[i]), want[i]);
      }
      std::printf("\n");
      failures += bad > 0;
      cudaFree(qkv), cudaFree(out), cudaFree(ref), cudaFree(cu_dev), cudaFree(sor_dev);
    }
  }
  std::printf("check: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}

float TimeMs(int runs, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < runs; ++i) fn();
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms / runs;
}

// The timing modes' problem: one causal sequence of n tokens, 32 / 8 heads, d 128, random
// inputs seeded by n; freed at scope end.
struct CausalInputs {
  Packed s{32, 8};
  bf16* qkv = nullptr;  // bf16 [n, (32 + 2 * 8) * 128]
  bf16* out = nullptr;  // bf16 [n, 32 * 128]
  int* cu = nullptr;    // int32 {0, n, n}: offsets, then the length
  int n = 0;
  double flops = 0;
  explicit CausalInputs(int tokens) : n(tokens) {
    std::mt19937 rng(n);
    const auto host = Random(rng, int64_t(n) * s.width(), -1.0f, 1.0f);
    CHECK(cudaMalloc(&qkv, host.size() * 2));
    CHECK(cudaMalloc(&out, int64_t(n) * s.hq * s.d * 2));
    CHECK(cudaMalloc(&cu, 12));
    const int offsets[3] = {0, n, n};
    CHECK(cudaMemcpy(qkv, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(cu, offsets, 12, cudaMemcpyHostToDevice));
    flops = 4.0 * s.d * s.hq * (double(n) * (n + 1) / 2);
  }
  ~CausalInputs() { cudaFree(qkv), cudaFree(out), cudaFree(cu); }
  CausalInputs(const CausalInputs&) = delete;
  CausalInputs& operator=(const CausalInputs&) = delete;
  // The kernel's problem over these inputs with `variant`'s launch choices.
  WgmmaAttentionProblem ProblemFor(const Variant& variant) const {
    WgmmaAttentionProblem p = Problem(s, qkv, out, n, cu, 1, n);
    Apply(variant, p);
    return p;
  }
};

int Bench(const std::vector<int>& ns) {
  for (int n : ns) {
    const CausalInputs in(n);
    const double flops = in.flops;
    for (const Variant& variant : kVariants) {
      const WgmmaAttentionProblem p = in.ProblemFor(variant);
      auto run = [&] { CHECK(LaunchFlashAttentionWgmma(p, nullptr)); };
      run();
      CHECK(cudaDeviceSynchronize());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const float single = TimeMs(1, run);
      const float sustained = TimeMs(20, run);
      std::printf("bench N %6d D 128 Hq 32 Hkv 8 causal %-10s: one run after idle %8.3f ms "
                  "%6.1f TFLOP/s; 20 back-to-back %8.3f ms %6.1f TFLOP/s\n",
                  n, variant.name, single, flops / single / 1e9, sustained,
                  flops / sustained / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

// The overlap schedules' variants interleaved: rounds of 10 back-to-back launches each, in turn.
int AB(const std::vector<int>& ns) {
  constexpr int kRounds = 9, kLaunches = 10;
  std::vector<const Variant*> variants;
  for (const Variant& v : kVariants) {
    if (v.schedule != WgmmaAttentionSchedule::kSerial && v.stages == 3) variants.push_back(&v);
  }
  for (int n : ns) {
    const CausalInputs in(n);
    const double flops = in.flops;
    std::vector<std::vector<float>> ms(variants.size());
    std::vector<std::vector<uint16_t>> bits(variants.size());
    for (int r = 0; r < kRounds; ++r) {
      for (size_t i = 0; i < variants.size(); ++i) {
        const WgmmaAttentionProblem p = in.ProblemFor(*variants[i]);
        auto run = [&] { CHECK(LaunchFlashAttentionWgmma(p, nullptr)); };
        run();
        ms[i].push_back(TimeMs(kLaunches, run));
        if (r == 0) {
          bits[i].resize(size_t(n) * in.s.hq * in.s.d);
          CHECK(cudaMemcpy(bits[i].data(), in.out, bits[i].size() * 2, cudaMemcpyDeviceToHost));
        }
      }
    }
    for (size_t i = 0; i < variants.size(); ++i) {
      std::vector<float> v = ms[i];
      std::sort(v.begin(), v.end());
      const float med = v[v.size() / 2];
      std::printf("ab N %6d %-10s: median %8.3f ms %6.1f TFLOP/s (min %.3f max %.3f) output %s "
                  "the first variant's\n",
                  n, variants[i]->name, med, flops / med / 1e9, v.front(), v.back(),
                  bits[i] == bits[0] ? "bit-identical to" : "DIFFERS from");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") return Check();
  std::vector<int> ns;
  for (int i = 2; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
  if (ns.empty()) ns = {8192, 32768, 131072};
  return mode == "ab" ? AB(ns) : Bench(ns);
}
