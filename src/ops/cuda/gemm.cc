// Gemm: bf16 x bf16 -> bf16 through cuBLASLt, f32 accumulation and scale.
// cuBLASLt is column-major, and a row-major [rows, cols] matrix with row stride ld is the
// column-major [cols, rows] matrix with the same ld. So out = x w^T (row-major) is, column-major,
//   C [N x M] = op(A) [N x K] * B [K x M]   with  A = w stored K x N (ld = w row stride), op T;
//                                                 B = x stored K x M (ld = x row stride), op N;
//                                                 C = D = out (ld = out row stride).
// Plans (descriptors + the heuristic's algorithm, or a tuner's: TuneGemms) are cached per key in
// the CudaContext.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/gemm_algos.h"
#include "ops/gemm_tune_plan.h"

namespace uniprefill::ops::cuda {
namespace {

// BlasLtMatmulKey::kind of this file's one variant: bf16 in/out, f32 compute, A^T B, no epilogue.
constexpr int32_t kKindBf16TN = 1;

// Largest power of two (<= 256, cuBLASLt's default assumption) dividing the address.
uint32_t PointerAlignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (a % align) != 0) align >>= 1;
  return align;
}

// The plan's descriptors for key (no algorithm yet).
BlasLtMatmulPlan MakeDescriptors(const BlasLtMatmulKey& key) {
  BlasLtMatmulPlan plan;
  UP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  UP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                 sizeof(trans_a)));
  UP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                 sizeof(trans_b)));
  // Layouts describe the matrices as stored (before op): rows, cols, leading dimension.
  UP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, key.k, key.m, key.lda));
  UP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, key.k, key.n, key.ldb));
  UP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_16BF, key.m, key.n, key.ldc));
  return plan;
}

// Up to `max` of the heuristic's algorithms for the plan's descriptors, best first.
std::vector<cublasLtMatmulHeuristicResult_t> HeuristicResults(cublasLtHandle_t handle,
                                                              const BlasLtMatmulPlan& plan,
                                                              const BlasLtMatmulKey& key,
                                                              size_t workspace_bytes, int max) {
  cublasLtMatmulPreference_t pref = nullptr;
  UP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = workspace_bytes;
  UP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  const uint32_t aligns[4] = {key.align_a, key.align_b, key.align_c, key.align_c};
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    UP_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i])));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(max, 1)));
  int found = 0;
  UP_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.c,
                                                 pref, static_cast<int>(results.size()),
                                                 results.data(), &found));
  UP_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  results.resize(static_cast<size_t>(found));
  return results;
}

// The algorithm TuneGemms kept for key's row bucket, when there is one and cuBLASLt accepts it
// for key's own rows within the workspace. Tuned at 256-byte aligned pointers: other alignments
// keep the heuristic.
bool TunedAlgo(const CudaContext& cuda, const BlasLtMatmulPlan& plan, const BlasLtMatmulKey& key,
               cublasLtMatmulAlgo_t* algo) {
  const GemmTuneRows rows{cuda.matmul_tune_step(), cuda.matmul_tune_max_rows()};
  const int64_t bucket = GemmTuneBucket(key.n, rows);
  if (bucket == 0 || key.kind != kKindBf16TN || key.align_a != 256 || key.align_b != 256 ||
      key.align_c != 256) {
    return false;
  }
  BlasLtMatmulKey bucket_key = key;
  bucket_key.n = bucket;
  if (!cuda.FindTunedMatmulAlgo(bucket_key, algo)) return false;
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(cuda.blas_lt(), plan.op, plan.a, plan.b, plan.c, plan.c, algo,
                                 &check) == CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= cuda.blas_workspace_bytes();
}

BlasLtMatmulPlan MakePlan(const CudaContext& cuda, const BlasLtMatmulKey& key) {
  const cublasLtHandle_t handle = cuda.blas_lt();
  const size_t workspace_bytes = cuda.blas_workspace_bytes();
  BlasLtMatmulPlan plan = MakeDescriptors(key);
  if (TunedAlgo(cuda, plan, key, &plan.algo)) return plan;
  const std::vector<cublasLtMatmulHeuristicResult_t> results =
      HeuristicResults(handle, plan, key, workspace_bytes, 1);
  if (results.empty()) {
    std::fprintf(stderr,
                 "cuBLASLt has no bf16 algorithm for out [%lld, %lld] = x [%lld, %lld] @ w^T "
                 "(row strides out %lld, x %lld, w %lld; pointer alignments %u/%u/%u bytes)\n",
                 static_cast<long long>(key.n), static_cast<long long>(key.m),
                 static_cast<long long>(key.n), static_cast<long long>(key.k),
                 static_cast<long long>(key.ldc), static_cast<long long>(key.ldb),
                 static_cast<long long>(key.lda), key.align_c, key.align_b, key.align_a);
    std::abort();
  }
  plan.algo = results[0].algo;
  return plan;
}

// Gemm's problem: out bf16 [M, N] = x bf16 [M, K] @ w bf16 [N, K]^T, column-major.
BlasLtMatmulKey KeyOf(TensorView out, TensorView x, TensorView w) {
  const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(0);
  assert(x.dtype == DType::kBF16 && w.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  assert(w.dim(1) == K && out.dim(0) == M && out.dim(1) == N);
  assert(x.stride[1] == 1 && w.stride[1] == 1 && out.stride[1] == 1);
  BlasLtMatmulKey key;
  key.kind = kKindBf16TN;
  key.m = N;
  key.n = M;
  key.k = K;
  key.lda = w.stride[0];
  // cuBLASLt wants ld >= rows even where only one column exists (a one-row view may carry any
  // stride).
  key.ldb = M == 1 ? std::max<int64_t>(x.stride[0], K) : x.stride[0];
  key.ldc = M == 1 ? std::max<int64_t>(out.stride[0], N) : out.stride[0];
  assert(key.lda >= K && key.ldb >= K && key.ldc >= N);
  key.align_a = PointerAlignment(w.data);
  key.align_b = PointerAlignment(x.data);
  key.align_c = PointerAlignment(out.data);
  return key;
}

// beta 0: out = x w^T; beta 1: out += x w^T (the same plan: cuBLASLt's algorithms take any beta).
void RunMatmul(CudaContext& cuda, const BlasLtMatmulPlan& plan, const cublasLtMatmulAlgo_t& algo,
               TensorView out, TensorView x, TensorView w, float beta = 0.0f) {
  const float alpha = 1.0f;
  UP_CUBLAS_CHECK(cublasLtMatmul(cuda.blas_lt(), plan.op, &alpha, w.data, plan.a, x.data, plan.b,
                                 &beta, out.data, plan.c, out.data, plan.c, &algo,
                                 cuda.blas_workspace(), cuda.blas_workspace_bytes(),
                                 cuda.stream()));
}

// The cached plan for the problem, made when missing; *one_off holds it (the caller destroys it)
// only when the cache is full.
const BlasLtMatmulPlan* PlanFor(CudaContext& cuda, const BlasLtMatmulKey& key,
                                BlasLtMatmulPlan* one_off, bool* owned) {
  *owned = false;
  const BlasLtMatmulPlan* plan = cuda.FindMatmulPlan(key);
  if (plan != nullptr) return plan;
  *one_off = MakePlan(cuda, key);
  plan = cuda.CacheMatmulPlan(key, *one_off);
  if (plan != nullptr) return plan;
  *owned = true;
  return one_off;
}

// One cuBLASLt call on the problem's cached plan (made when missing).
void RunPlanned(CudaContext& cuda, TensorView out, TensorView x, TensorView w, float beta) {
  BlasLtMatmulPlan one_off;
  bool owned = false;
  const BlasLtMatmulPlan* plan = PlanFor(cuda, KeyOf(out, x, w), &one_off, &owned);
  RunMatmul(cuda, *plan, plan->algo, out, x, w, beta);
  // cublasLtMatmul has read the descriptors by the time it returns.
  if (owned) DestroyBlasLtMatmulPlan(one_off);
}

// Gemm and GemmAccumulate: whole, or as row blocks (CudaContext::SetGemmMaxRows).
void GemmRows(DeviceContext& ctx, TensorView out, TensorView x, TensorView w, float beta) {
  // out bf16 [M, N]; x bf16 [M, K]; w bf16 [N, K].
  if (x.dim(0) == 0) return;
  assert(w.dim(0) > 0 && x.dim(1) > 0);
  CudaContext& cuda = ctx.cuda();
  const int64_t max_rows = cuda.gemm_max_rows();
  if (max_rows == 0 || x.dim(0) <= max_rows) return RunPlanned(cuda, out, x, w, beta);
  for (int64_t r = 0; r < x.dim(0); r += max_rows) {
    TensorView xb = x, ob = out;
    xb.shape[0] = ob.shape[0] = std::min(max_rows, x.dim(0) - r);
    xb.data = static_cast<uint16_t*>(x.data) + r * x.stride[0];
    ob.data = static_cast<uint16_t*>(out.data) + r * out.stride[0];
    RunPlanned(cuda, ob, xb, w, beta);
  }
}

}  // namespace

void Gemm(DeviceContext& ctx, TensorView out, TensorView x, TensorView w) {
  GemmRows(ctx, out, x, w, 0.0f);
}

void GemmAccumulate(DeviceContext& ctx, TensorView out, TensorView x, TensorView w) {
  GemmRows(ctx, out, x, w, 1.0f);
}

GemmAlgo PlannedGemmAlgo(DeviceContext& ctx, TensorView out, TensorView x, TensorView w) {
  CudaContext& cuda = ctx.cuda();
  BlasLtMatmulPlan one_off;
  bool owned = false;
  const BlasLtMatmulPlan* plan = PlanFor(cuda, KeyOf(out, x, w), &one_off, &owned);
  GemmAlgo algo;
  algo.algo = plan->algo;
  if (owned) DestroyBlasLtMatmulPlan(one_off);
  return algo;
}

std::vector<GemmAlgo> GemmHeuristicAlgos(DeviceContext& ctx, TensorView out, TensorView x,
                                         TensorView w, int max) {
  CudaContext& cuda = ctx.cuda();
  const BlasLtMatmulKey key = KeyOf(out, x, w);
  const BlasLtMatmulPlan plan = MakeDescriptors(key);
  std::vector<GemmAlgo> algos;
  for (const cublasLtMatmulHeuristicResult_t& r :
       HeuristicResults(cuda.blas_lt(), plan, key, cuda.blas_workspace_bytes(), max)) {
    algos.push_back({r.algo, r.workspaceSize, r.wavesCount});
  }
  DestroyBlasLtMatmulPlan(plan);
  return algos;
}

void GemmWithAlgo(DeviceContext& ctx, TensorView out, TensorView x, TensorView w,
                  const GemmAlgo& algo) {
  if (x.dim(0) == 0) return;
  CudaContext& cuda = ctx.cuda();
  const BlasLtMatmulPlan plan = MakeDescriptors(KeyOf(out, x, w));
  RunMatmul(cuda, plan, algo.algo, out, x, w);
  DestroyBlasLtMatmulPlan(plan);
}

void KeepGemmAlgo(DeviceContext& ctx, TensorView out, TensorView x, TensorView w,
                  const GemmAlgo& algo) {
  ctx.cuda().KeepTunedMatmulAlgo(KeyOf(out, x, w), algo.algo);
}

int RechooseCachedGemmPlans(DeviceContext& ctx) {
  CudaContext& cuda = ctx.cuda();
  int changed = 0;
  cuda.ForEachMatmulPlan([&](const BlasLtMatmulKey& key, BlasLtMatmulPlan& plan) {
    cublasLtMatmulAlgo_t algo{};
    if (TunedAlgo(cuda, plan, key, &algo)) {
      plan.algo = algo;
      ++changed;
    }
  });
  return changed;
}

}  // namespace uniprefill::ops::cuda
