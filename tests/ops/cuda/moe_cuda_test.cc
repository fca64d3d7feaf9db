// ops::cuda::MoeForward (ops/cuda/cuda_moe.h) against the CPU MoeForward (model/blocks/moe.h) on
// the same bf16-representable inputs and weights: several sizes (odd row counts 1, 7, 300, 2000;
// E = 4 / top 2 as the tiny Qwen3-Next checkpoint, E = 64 / top 8, E = 128 / top 10), with and
// without renormalisation, strided x and out rows, exact routing ties, and batch independence
// (bit-identical rows whether run together or alone), and expert-parallel shards (N = 2, 4: each
// shard against the CPU shard of dist::ShardMoe, the shards' sum against the whole layer).
// Outputs are poisoned with 0xFF (bf16 NaN) first, so an unwritten element fails.
// Error bound: the GPU rounds the expert and shared activations (gate/up GEMM output, SiLU * up,
// down GEMM output) to bf16 where the CPU keeps f32, and the output to bf16: each a relative
// error up to 2^-9 (RMS ~1.1e-3); normalised error < 1e-2 (measured values are printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "dist/shard_layers.h"
#include "model/blocks/moe.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_moe.h"
#include "testing/cuda_test_util.h"

namespace uniprefill {
namespace {

namespace ut = ::uniprefill::testing;

constexpr double kMoeBound = 1e-2;

DeviceContext& Cpu() {
  static std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2);
  return *ctx;
}

struct MoeSpec {
  int64_t e = 4, k = 2, h = 64, inter = 16, shared_inter = 32;
  bool norm = true;
};

// One bf16 weight: host f32 values (bf16-representable) and the device copy.
struct Weight {
  std::vector<float> host;
  DeviceBuffer dev;
  void Upload() {
    dev = DeviceBuffer(std::max<size_t>(2, host.size() * 2));
    dev.CopyFromHost(ut::ToBf16(host).data(), host.size() * 2);
  }
};

// An ops::LinearWeight (f32 parts and the f32 copy for the sgemm path) over host values.
ops::LinearWeight CpuLinear(const float* data, int64_t out, int64_t in) {
  ops::LinearWeight w;
  w.parts.push_back(TensorView::Contiguous(const_cast<float*>(data), DType::kF32, {out, in}));
  w.out_features = out;
  w.in_features = in;
  w.f32 = Buffer(sizeof(float) * out * in);
  std::copy(data, data + out * in, w.f32.as<float>());
  return w;
}

struct MoeFixture {
  MoeSpec s;
  Weight router, gate_up, down, shared_gate_up, shared_down, shared_gate;
  MoeWeights cpu;

  MoeFixture(const MoeSpec& spec, std::mt19937& rng) : s(spec) {
    auto fill = [&](Weight& w, int64_t n, int64_t fan_in) {
      const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
      w.host = ut::RandomBf16Values(rng, n, -a, a);
    };
    fill(router, s.e * s.h, s.h);
    // Router weights a few times larger than 1/sqrt(H): a spread of probabilities, as trained.
    for (float& v : router.host) v = ut::Bf16BitsToF32(ut::F32ToBf16Bits(v * 4.0f));
    fill(gate_up, s.e * 2 * s.inter * s.h, s.h);
    fill(down, s.e * s.h * s.inter, s.inter);
    fill(shared_gate_up, 2 * s.shared_inter * s.h, s.h);
    fill(shared_down, s.h * s.shared_inter, s.shared_inter);
    fill(shared_gate, s.h, s.h);
  }
  // Call after changing any host weights.
  void Finish() {
    for (Weight* w : {&router, &gate_up, &down, &shared_gate_up, &shared_down, &shared_gate}) {
      w->Upload();
    }
    cpu = MakeCpu();
  }
  // The CPU weights over the host values (a fresh set: dist::ShardMoe cuts its argument).
  MoeWeights MakeCpu() const {
    MoeWeights w;
    w.router = CpuLinear(router.host.data(), s.e, s.h);
    for (int64_t e = 0; e < s.e; ++e) {
      w.expert_gate_up.push_back(
          CpuLinear(gate_up.host.data() + e * 2 * s.inter * s.h, 2 * s.inter, s.h));
      w.expert_down.push_back(CpuLinear(down.host.data() + e * s.h * s.inter, s.h, s.inter));
    }
    w.shared_gate_up = CpuLinear(shared_gate_up.host.data(), 2 * s.shared_inter, s.h);
    w.shared_down = CpuLinear(shared_down.host.data(), s.h, s.shared_inter);
    w.shared_expert_gate = CpuLinear(shared_gate.host.data(), 1, s.h);
    w.n_experts = static_cast<int>(s.e);
    w.top_k = static_cast<int>(s.k);
    w.norm_topk_prob = s.norm;
    return w;
  }
  ops::cuda::MoeDeviceWeights Device() const {
    auto v = [](const Weight& w, std::initializer_list<int64_t> shape) {
      return TensorView::Contiguous(w.dev.data(), DType::kBF16, shape, uniprefill::Device::kCuda);
    };
    ops::cuda::MoeDeviceWeights d;
    d.router = v(router, {s.e, s.h});
    d.expert_gate_up = v(gate_up, {s.e, 2 * s.inter, s.h});
    d.expert_down = v(down, {s.e, s.h, s.inter});
    d.shared_gate_up = v(shared_gate_up, {2 * s.shared_inter, s.h});
    d.shared_down = v(shared_down, {s.h, s.shared_inter});
    d.shared_gate = v(shared_gate, {1, s.h});
    d.top_k = static_cast<int>(s.k);
    d.norm_topk_prob = s.norm;
    return d;
  }
};

TensorView Strided(void* data, DType dtype, int64_t rows, int64_t cols, int64_t stride,
                   Device device) {
  TensorView v = TensorView::Contiguous(data, dtype, {rows, cols}, device);
  v.stride[0] = stride;
  return v;
}

// Runs the GPU MoE on x (host f32 [T, stride_x], bf16-representable, valid columns [0, H)) and
// returns out as f32 [T, H] (out rows stride_out apart on the device, padding checked untouched).
std::vector<float> RunGpuOn(DeviceContext& ctx, const ops::cuda::MoeDeviceWeights& w,
                            const std::vector<float>& x, int64_t T, int64_t stride_x,
                            int64_t stride_out, ops::cuda::MoeGemm gemm) {
  const int64_t H = w.router.dim(1);
  DeviceBuffer dx(std::max<size_t>(2, x.size() * 2));
  if (!x.empty()) dx.CopyFromHost(ut::ToBf16(x).data(), x.size() * 2);
  DeviceBuffer dout(std::max<size_t>(2, T * stride_out * 2));
  dout.Fill(0xFF);
  const size_t scratch_bytes = ops::cuda::MoeScratchBytes(T, w);
  DeviceBuffer scratch(std::max<size_t>(256, scratch_bytes));
  scratch.Fill(0xFF);  // the op must not rely on zeroed scratch
  ops::cuda::MoeForward(ctx, Strided(dout.data(), DType::kBF16, T, H, stride_out, Device::kCuda),
                        Strided(dx.data(), DType::kBF16, T, H, stride_x, Device::kCuda), w,
                        scratch.data(), scratch_bytes, gemm);
  ctx.cuda().Synchronize();
  const std::vector<uint16_t> bits = dout.ToHost<uint16_t>(T * stride_out);
  std::vector<float> out;
  out.reserve(T * H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < H; ++c) out.push_back(ut::Bf16BitsToF32(bits[t * stride_out + c]));
    for (int64_t c = H; c < stride_out; ++c) EXPECT_EQ(bits[t * stride_out + c], 0xFFFF);
  }
  return out;
}

std::vector<float> RunGpu(DeviceContext& ctx, const MoeFixture& f, const std::vector<float>& x,
                          int64_t T, int64_t stride_x, int64_t stride_out,
                          ops::cuda::MoeGemm gemm = ops::cuda::MoeGemm::kOurs) {
  return RunGpuOn(ctx, f.Device(), x, T, stride_x, stride_out, gemm);
}

// The CPU MoeForward of `w` on the valid columns of x.
std::vector<float> RunCpuOn(const MoeWeights& w, const std::vector<float>& x, int64_t T,
                            int64_t stride_x) {
  const int64_t H = w.router.in_features;
  std::vector<float> xc(T * H), out(T * H);
  for (int64_t t = 0; t < T; ++t) {
    std::copy(x.begin() + t * stride_x, x.begin() + t * stride_x + H, xc.begin() + t * H);
  }
  MoeForward(Cpu(), w, TensorView::Contiguous(xc.data(), DType::kF32, {T, H}),
             TensorView::Contiguous(out.data(), DType::kF32, {T, H}));
  return out;
}

std::vector<float> RunCpu(const MoeFixture& f, const std::vector<float>& x, int64_t T,
                          int64_t stride_x) {
  return RunCpuOn(f.cpu, x, T, stride_x);
}

void CheckCase(DeviceContext& ctx, const MoeSpec& spec, const std::vector<int64_t>& rows,
               uint32_t seed, int64_t pad, ops::cuda::MoeGemm gemm = ops::cuda::MoeGemm::kOurs) {
  std::mt19937 rng(seed);
  MoeFixture f(spec, rng);
  f.Finish();
  for (int64_t T : rows) {
    const int64_t stride_x = spec.h + pad, stride_out = spec.h + pad;
    const std::vector<float> x = ut::RandomBf16Values(rng, T * stride_x);
    const std::vector<float> got = RunGpu(ctx, f, x, T, stride_x, stride_out, gemm);
    const std::vector<float> want = RunCpu(f, x, T, stride_x);
    const double err = ut::RelativeL2Error(got, want);
    std::printf("MoE E=%lld top%lld H=%lld I=%lld Is=%lld norm=%d T=%lld: normalised error %.2e\n",
                static_cast<long long>(spec.e), static_cast<long long>(spec.k),
                static_cast<long long>(spec.h), static_cast<long long>(spec.inter),
                static_cast<long long>(spec.shared_inter), spec.norm ? 1 : 0,
                static_cast<long long>(T), err);
    EXPECT_LT(err, kMoeBound) << "T=" << T;
  }
}

TEST(CudaMoeTest, TinyQwen3NextShapeE4Top2MatchesCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  MoeSpec s;  // the tiny checkpoint: E 4, top 2, H 64, I 16, shared 32
  CheckCase(ctx, s, {1, 7, 300, 2000}, 11, 0);
}

TEST(CudaMoeTest, E64Top8MatchesCpuWithStridedRows) {
  UP_CUDA_TEST_CONTEXT(ctx);
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 96;
  CheckCase(ctx, s, {1, 7, 300, 2000}, 12, 24);
}

TEST(CudaMoeTest, E128Top10WithoutRenormalisationMatchesCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  MoeSpec s;
  s.e = 128, s.k = 10, s.h = 512, s.inter = 136, s.shared_inter = 264, s.norm = false;
  CheckCase(ctx, s, {7, 300}, 13, 8);
}

// The combine reads and writes 16 bytes per thread when out rows are 16-byte aligned and scalar
// elements otherwise (an odd row stride); each column sums in the same order, so the two agree bit
// for bit, and both match the CPU op.
TEST(CudaMoeTest, VectorAndScalarCombineAreBitIdentical) {
  UP_CUDA_TEST_CONTEXT(ctx);
  MoeSpec s;
  s.e = 32, s.k = 6, s.h = 192, s.inter = 72, s.shared_inter = 40;
  std::mt19937 rng(21);
  MoeFixture f(s, rng);
  f.Finish();
  for (int64_t T : {1, 33, 517}) {
    const std::vector<float> x = ut::RandomBf16Values(rng, T * s.h);
    const std::vector<float> vec = RunGpu(ctx, f, x, T, s.h, s.h);
    const std::vector<float> scalar = RunGpu(ctx, f, x, T, s.h, s.h + 1);
    ASSERT_EQ(vec.size(), scalar.size());
    for (size_t i = 0; i < vec.size(); ++i) {
      ASSERT_EQ(std::memcmp(&vec[i], &scalar[i], 4), 0) << "T=" << T << " element " << i;
    }
    EXPECT_LT(ut::RelativeL2Error(vec, RunCpu(f, x, T, s.h)), kMoeBound) << "T=" << T;
  }
}

// The libraries' GEMMs (MoeGemm::kLibrary: one host sync, x gathered into expert order, cuBLAS's
// grouped GEMM, cuBLASLt for the shared expert) within the same bound of the CPU op, from one row
// (most experts empty) to 2500 rows, strided rows included.
TEST(CudaMoeTest, LibraryGemmsMatchCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  using ops::cuda::MoeGemm;
  MoeSpec tiny;
  CheckCase(ctx, tiny, {1, 7, 300}, 21, 0, MoeGemm::kLibrary);
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 96;
  CheckCase(ctx, s, {1, 37, 2000}, 22, 24, MoeGemm::kLibrary);
  CheckCase(ctx, s, {2500}, 23, 8, MoeGemm::kLibrary);
  MoeSpec t;
  t.e = 128, t.k = 10, t.h = 512, t.inter = 136, t.shared_inter = 264, t.norm = false;
  CheckCase(ctx, t, {300}, 24, 8, MoeGemm::kLibrary);
}

// The mma.sync kernel (MoeGemm::kOursMmaSync: the default off Hopper) within the same bound, and
// the default kernel (wgmma on Hopper) close to it: K tails (136 = 2 x 64 + 8), N tails
// (2 x 136 = 272 columns), strided rows, one row to 2000.
TEST(CudaMoeTest, MmaSyncKernelMatchesCpuAndTheDefaultKernel) {
  UP_CUDA_TEST_CONTEXT(ctx);
  using ops::cuda::MoeGemm;
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 96;
  CheckCase(ctx, s, {1, 7, 300, 2000}, 31, 24, MoeGemm::kOursMmaSync);
  MoeSpec t;
  t.e = 128, t.k = 10, t.h = 512, t.inter = 136, t.shared_inter = 264, t.norm = false;
  CheckCase(ctx, t, {7, 300}, 32, 8, MoeGemm::kOursMmaSync);
  std::mt19937 rng(33);
  MoeFixture f(t, rng);
  f.Finish();
  const int64_t T = 2000, stride = t.h + 8;
  const std::vector<float> x = ut::RandomBf16Values(rng, T * stride);
  const std::vector<float> mma = RunGpu(ctx, f, x, T, stride, stride, MoeGemm::kOursMmaSync);
  const std::vector<float> def = RunGpu(ctx, f, x, T, stride, stride, MoeGemm::kOurs);
  const double err = ut::RelativeL2Error(def, mma);
  std::printf("MoE default kernel vs mma.sync kernel, T=%lld: normalised difference %.2e\n",
              static_cast<long long>(T), err);
  // Both sum in f32 over k in different orders; the bf16 roundings of the intermediate rows
  // then differ by an ulp here and there (~1e-3 of the output), a wrong tile by far more.
  EXPECT_LT(err, 5e-3);
}

// Exact ties in the router logits (every product and sum exact in f32, so any summation order
// gives the same logits on both sides): the lower expert index must win, as in RouteRow. Choosing
// the other tied expert would change the output far beyond the bound, since each expert's
// weights differ.
TEST(CudaMoeTest, RoutingTiesGoToTheLowerExpertIndex) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(14);
  MoeSpec s;
  s.e = 8, s.k = 3, s.h = 64, s.inter = 32, s.shared_inter = 32;
  MoeFixture f(s, rng);
  // Router rows in multiples of 1/16 (|w| <= 1/2): rows 1 = 2 = 5 and 3 = 6, row 7 all zero.
  std::uniform_int_distribution<int> q(-8, 8);
  for (float& v : f.router.host) v = q(rng) / 16.0f;
  for (int64_t c = 0; c < s.h; ++c) {
    f.router.host[2 * s.h + c] = f.router.host[1 * s.h + c];
    f.router.host[5 * s.h + c] = f.router.host[1 * s.h + c];
    f.router.host[6 * s.h + c] = f.router.host[3 * s.h + c];
    f.router.host[7 * s.h + c] = 0.0f;
  }
  f.Finish();
  const int64_t T = 257;
  std::vector<float> x(T * s.h);
  for (float& v : x) v = q(rng) / 8.0f;  // multiples of 1/8: every logit is exact
  // A few rows of zeros: every logit is 0, all experts tie, experts 0..k-1 win.
  for (int64_t t : {0, 100, 256}) std::fill(x.begin() + t * s.h, x.begin() + (t + 1) * s.h, 0.0f);
  // The CPU routing of these rows has ties at the top-k boundary in many rows; count them.
  int boundary_ties = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> logits(s.e);
    for (int64_t e = 0; e < s.e; ++e) {
      double acc = 0;
      for (int64_t c = 0; c < s.h; ++c) acc += f.router.host[e * s.h + c] * x[t * s.h + c];
      logits[e] = static_cast<float>(acc);
    }
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    if (sorted[s.k - 1] == sorted[s.k]) ++boundary_ties;
  }
  std::printf("MoE ties: %d of %lld rows tie at the top-%lld boundary\n", boundary_ties,
              static_cast<long long>(T), static_cast<long long>(s.k));
  EXPECT_GT(boundary_ties, 10);
  const std::vector<float> got = RunGpu(ctx, f, x, T, s.h, s.h);
  const std::vector<float> want = RunCpu(f, x, T, s.h);
  // Row by row: a wrong tie-break shows up as one row far off.
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> g(got.begin() + t * s.h, got.begin() + (t + 1) * s.h);
    const std::vector<float> w(want.begin() + t * s.h, want.begin() + (t + 1) * s.h);
    EXPECT_LT(ut::RelativeL2Error(g, w), 2e-2) << "row " << t;
  }
  EXPECT_LT(ut::RelativeL2Error(got, want), kMoeBound);
}

// A row's output bits do not depend on the other rows of the batch (nor on the slots the
// grouping's atomics hand out): rows run alone, in a short slice and in the whole batch agree
// exactly, and two runs of the batch are identical.
TEST(CudaMoeTest, RowsAreBitIdenticalInAnyBatch) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(15);
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 128;
  MoeFixture f(s, rng);
  f.Finish();
  const int64_t T = 300;
  const std::vector<float> x = ut::RandomBf16Values(rng, T * s.h);
  const std::vector<float> whole = RunGpu(ctx, f, x, T, s.h, s.h);
  const std::vector<float> again = RunGpu(ctx, f, x, T, s.h, s.h);
  EXPECT_EQ(whole, again);
  for (int64_t t : {0, 17, 299}) {
    const std::vector<float> xr(x.begin() + t * s.h, x.begin() + (t + 1) * s.h);
    const std::vector<float> one = RunGpu(ctx, f, xr, 1, s.h, s.h);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), whole.begin() + t * s.h)) << "row " << t;
  }
  const int64_t b = 100, n = 7;
  const std::vector<float> xs(x.begin() + b * s.h, x.begin() + (b + n) * s.h);
  const std::vector<float> slice = RunGpu(ctx, f, xs, n, s.h, s.h);
  EXPECT_TRUE(std::equal(slice.begin(), slice.end(), whole.begin() + b * s.h));
}

// Rank r of `world`'s expert-parallel shard of f on the device, as dist::ShardMoe cuts it on the
// host: experts [E r / world, E (r + 1) / world) as views into the whole expert tensors, the
// router whole, the shared expert's columns [Is r / world, Is (r + 1) / world) (its gate and up
// rows, its down columns) copied.
struct DeviceShard {
  Weight shared_gate_up, shared_down;
  ops::cuda::MoeDeviceWeights w;

  DeviceShard(const MoeFixture& f, int r, int world) {
    const MoeSpec& s = f.s;
    const int64_t per = s.e / world, first = per * r;
    const int64_t is = s.shared_inter / world, c0 = is * r;
    for (int half = 0; half < 2; ++half) {  // gate rows, then up rows
      const float* src = f.shared_gate_up.host.data() + (half * s.shared_inter + c0) * s.h;
      shared_gate_up.host.insert(shared_gate_up.host.end(), src, src + is * s.h);
    }
    for (int64_t d = 0; d < s.h; ++d) {
      const float* src = f.shared_down.host.data() + d * s.shared_inter + c0;
      shared_down.host.insert(shared_down.host.end(), src, src + is);
    }
    shared_gate_up.Upload();
    shared_down.Upload();
    w = f.Device();
    const size_t gu_bytes = 2 * (2 * s.inter * s.h), down_bytes = 2 * (s.h * s.inter);
    w.expert_gate_up = TensorView::Contiguous(
        static_cast<char*>(f.gate_up.dev.data()) + first * gu_bytes, DType::kBF16,
        {per, 2 * s.inter, s.h}, Device::kCuda);
    w.expert_down = TensorView::Contiguous(
        static_cast<char*>(f.down.dev.data()) + first * down_bytes, DType::kBF16,
        {per, s.h, s.inter}, Device::kCuda);
    w.shared_gate_up = TensorView::Contiguous(shared_gate_up.dev.data(), DType::kBF16,
                                              {2 * is, s.h}, Device::kCuda);
    w.shared_down =
        TensorView::Contiguous(shared_down.dev.data(), DType::kBF16, {s.h, is}, Device::kCuda);
    w.first_expert = static_cast<int>(first);
  }
};

// Expert parallel (issue 21): every shard routes over all E router rows exactly as the whole
// layer, runs only its experts' choices and its shared-expert columns, and its output is the CPU
// shard's (dist::ShardMoe + the CPU MoeForward: the semantics the layer walk's all-reduce sums);
// the N shards' outputs summed are the whole layer's. One row (most shards get no routed row),
// odd counts and a batch of 2000, with and without renormalisation, both GEMM paths.
void CheckShards(DeviceContext& ctx, const MoeSpec& spec, uint32_t seed,
                 ops::cuda::MoeGemm gemm) {
  std::mt19937 rng(seed);
  MoeFixture f(spec, rng);
  f.Finish();
  for (int world : {2, 4}) {
    for (int64_t T : {1, 7, 300, 2000}) {
      const std::vector<float> x = ut::RandomBf16Values(rng, T * spec.h);
      const std::vector<float> whole = RunCpu(f, x, T, spec.h);
      std::vector<float> sum(T * spec.h, 0.0f);
      double worst_shard = 0;
      for (int r = 0; r < world; ++r) {
        const DeviceShard shard(f, r, world);
        MoeWeights cpu = f.MakeCpu();
        std::vector<Buffer> storage;
        dist::ShardPlan plan;
        plan.rank = r;
        plan.world = world;
        plan.experts = *dist::EvenShare(spec.e, r, world, "experts");
        plan.shared_ffn = *dist::EvenShare(spec.shared_inter, r, world, "shared");
        ASSERT_TRUE(dist::ShardMoe(cpu, plan, &storage).ok());
        ASSERT_EQ(cpu.first_expert, shard.w.first_expert);
        const std::vector<float> got = RunGpuOn(ctx, shard.w, x, T, spec.h, spec.h, gemm);
        const std::vector<float> want = RunCpuOn(cpu, x, T, spec.h);
        const double err = ut::RelativeL2Error(got, want);
        worst_shard = std::max(worst_shard, err);
        EXPECT_LT(err, kMoeBound) << "world " << world << " rank " << r << " T=" << T;
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
      }
      const double err = ut::RelativeL2Error(sum, whole);
      std::printf("MoE shards E=%lld top%lld world %d T=%lld: worst shard vs CPU shard %.2e, "
                  "sum vs whole layer %.2e\n",
                  static_cast<long long>(spec.e), static_cast<long long>(spec.k), world,
                  static_cast<long long>(T), worst_shard, err);
      EXPECT_LT(err, kMoeBound) << "world " << world << " T=" << T;
    }
  }
}

TEST(CudaMoeTest, ExpertParallelShardsMatchCpuShardsAndSumToTheLayer) {
  UP_CUDA_TEST_CONTEXT(ctx);
  MoeSpec tiny;  // the tiny checkpoint's E 4, top 2: at world 4 one expert per shard
  CheckShards(ctx, tiny, 31, ops::cuda::MoeGemm::kOurs);
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 96, s.norm = false;
  CheckShards(ctx, s, 32, ops::cuda::MoeGemm::kOurs);
}

TEST(CudaMoeTest, ExpertParallelShardsOnLibraryGemmsMatchCpuShards) {
  UP_CUDA_TEST_CONTEXT(ctx);
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 96;
  CheckShards(ctx, s, 33, ops::cuda::MoeGemm::kLibrary);
}

// A shard's rows are bit-identical whatever else is in the batch (as the whole layer's), and a
// shard holding every expert (world 1: first expert 0) is the unsharded layer bit for bit.
TEST(CudaMoeTest, ShardRowsAreBitIdenticalInAnyBatchAndWorldOneIsTheLayer) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(34);
  MoeSpec s;
  s.e = 64, s.k = 8, s.h = 256, s.inter = 128, s.shared_inter = 128;
  MoeFixture f(s, rng);
  f.Finish();
  const int64_t T = 300;
  const std::vector<float> x = ut::RandomBf16Values(rng, T * s.h);
  const DeviceShard one(f, 0, 1);
  EXPECT_EQ(RunGpuOn(ctx, one.w, x, T, s.h, s.h, ops::cuda::MoeGemm::kOurs),
            RunGpu(ctx, f, x, T, s.h, s.h));
  const DeviceShard shard(f, 2, 4);
  using ops::cuda::MoeGemm;
  const std::vector<float> whole = RunGpuOn(ctx, shard.w, x, T, s.h, s.h, MoeGemm::kOurs);
  for (int64_t t : {0, 17, 299}) {
    const std::vector<float> xr(x.begin() + t * s.h, x.begin() + (t + 1) * s.h);
    const std::vector<float> row = RunGpuOn(ctx, shard.w, xr, 1, s.h, s.h, MoeGemm::kOurs);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), whole.begin() + t * s.h)) << "row " << t;
  }
}

TEST(CudaMoeTest, ZeroRowsIsANoOp) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(16);
  MoeFixture f(MoeSpec{}, rng);
  f.Finish();
  const std::vector<float> got = RunGpu(ctx, f, {}, 0, 64, 64);
  EXPECT_TRUE(got.empty());
}

// The Qwen3-Next-80B MoE layer (E 512, top 10, H 2048, I 512, shared 512) on 32K rows: time and
// TFLOP/s (3 GEMMs of 2 H I per choice and of 2 H Is per row, router 2 H E per row).
TEST(CudaMoeTest, DISABLED_ThroughputQwen3Next32k) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const int64_t E = 512, k = 10, H = 2048, I = 512, Is = 512, T = 32768;
  DeviceBuffer router(E * H * 2), gu(E * 2 * I * H * 2), down(E * H * I * 2), sgu(2 * Is * H * 2),
      sdown(H * Is * 2), sgate(H * 2), x(T * H * 2), out(T * H * 2);
  uint64_t seed = 1;
  for (DeviceBuffer* b : {&gu, &down, &sgu, &sdown, &sgate, &x}) {
    ops::cuda::FillRandomBf16(ctx, b->data(), static_cast<int64_t>(b->size() / 2), ++seed, 0.03f);
  }
  ops::cuda::FillRandomBf16(ctx, router.data(), E * H, ++seed, 0.5f);
  ops::cuda::FillRandomBf16(ctx, x.data(), T * H, ++seed, 1.0f);
  ops::cuda::MoeDeviceWeights w;
  auto v = [](const DeviceBuffer& b, std::initializer_list<int64_t> shape) {
    return TensorView::Contiguous(b.data(), DType::kBF16, shape, Device::kCuda);
  };
  w.router = v(router, {E, H});
  w.expert_gate_up = v(gu, {E, 2 * I, H});
  w.expert_down = v(down, {E, H, I});
  w.shared_gate_up = v(sgu, {2 * Is, H});
  w.shared_down = v(sdown, {H, Is});
  w.shared_gate = v(sgate, {1, H});
  w.top_k = static_cast<int>(k);
  const size_t bytes = ops::cuda::MoeScratchBytes(T, w);
  DeviceBuffer scratch(bytes);
  const double flops = 2.0 * T * H * (3.0 * I * k + 3.0 * Is + E);
  using ops::cuda::MoeGemm;
  for (auto gemm : {MoeGemm::kOurs, MoeGemm::kOursMmaSync, MoeGemm::kLibrary}) {
    const double ms = ut::MeanCudaMs(ctx, 5, [&] {
      ops::cuda::MoeForward(ctx, v(out, {T, H}), v(x, {T, H}), w, scratch.data(), bytes, gemm);
    });
    std::printf("MoE Qwen3-Next layer, 32K rows, %s GEMMs: %.3f ms, %.1f TFLOP/s (scratch %.2f "
                "GiB)\n",
                gemm == MoeGemm::kOurs          ? "our default"
                : gemm == MoeGemm::kOursMmaSync ? "our mma.sync"
                                                : "library",
                ms, flops / ms * 1e-9,
                bytes / 1073741824.0);
  }
}

}  // namespace
}  // namespace uniprefill
