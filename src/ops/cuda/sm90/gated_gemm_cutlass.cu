// The gate | up GEMM of a dense FFN with act(gate) * up in its epilogue (gated_gemm_cutlass.h).
// Why: cuBLASLt has no gated epilogue, so the FFN wrote [rows, 2f] and a separate kernel read it
// back (2.8 GB a layer at 32K rows of the 8B shape, ~0.85 ms on an H100); here the intermediate
// never reaches memory and the GEMM writes half as much. Why CUTLASS and not our own wgmma
// kernel: the GEMM itself must run at cuBLAS's pace (our cp.async grouped GEMM does not), which
// takes TMA, clusters and a persistent warp-specialised schedule: CUTLASS's own.
//
// The mainloop is CUTLASS's (CollectiveBuilder: 128 x 256 x 64 tiles, cluster 2 x 1, the
// cooperative persistent kernel); the epilogue is ours (GatedPairsEpilogue, through CUTLASS's
// adapter for register epilogues): wgmma's f32 accumulator fragment holds columns n and n + 1 of
// a row in neighbouring registers (CUTLASS's CLayout_64xN: the value mode's innermost element
// steps one column), so with gate row j at weight row 2j and up row j at 2j + 1 a thread holds
// both halves of its outputs and writes act(gate) * up as one bf16 to column n / 2.
//
// Measured (37th session, H100, bench/results/gpu/session37/): at 32K rows of the 8B FFN the
// fused GEMM ran 11.7 ms (659 TFLOP/s) against cuBLASLt's GEMM alone at 10.6-11.3 ms plus the
// activation's ~0.9: end to end (8B dense 32K / 128K, same binary) +0.3% either way. CUTLASS's
// stock mainloop runs ~8-10% below cuBLASLt's (nvjet) kernel, about what the fusion saves, so the
// backend keeps this opt-in (UNIPREFILL_CUDA_GATED_GEMM=1). Before the swizzle (kSwizzle) it
// ran 12.8 ms: tiles walked without it re-read A from DRAM past ~4K rows.
#include <cuda_bf16.h>

#include "ops/cuda/sm90/gated_gemm_cutlass.h"

#if defined(UP_WITH_CUTLASS)
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#endif

namespace uniprefill::ops::cuda {

#if defined(UP_WITH_CUTLASS)
namespace {

// As dense_elementwise.cu's Act, g * sigmoid(z), z = g (SiLU) or 2 sqrt(2/pi) (g + 0.044715 g^3),
// on the fast intrinsics: IEEE division's slow path is a function call, and a call anywhere in the
// kernel makes ptxas serialise every wgmma of it (its C7510 warning).
template <bool kGelu>
__device__ __forceinline__ float GatedAct(float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kGeluCoef = 0.044715f;
  const float z = kGelu ? 2.0f * kSqrt2OverPi * (g + kGeluCoef * g * g * g) : g;
  return __fdividef(g, 1.0f + __expf(-z));  // 1 + e^-z = inf: g * 0
}

using Stride3 = cute::Stride<int64_t, cute::Int<1>, int64_t>;  // row-major [M, N] (or [N, K]), L

// A register epilogue (CUTLASS's DefaultEpilogue interface, wrapped by
// Sm90TmaWarpSpecializedAdapter): out [M, N / 2] from the accumulators of [M, N] pairs.
template <bool kGelu>
class GatedPairsEpilogue {
 public:
  using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementOutput = cutlass::bfloat16_t;
  using ElementC = cutlass::bfloat16_t;  // no source is read
  using StrideC = Stride3;
  using ElementD = cutlass::bfloat16_t;
  using StrideD = Stride3;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct ThreadEpilogueOp {  // only named by GemmUniversalAdapter
    using ElementOutput = cutlass::bfloat16_t;
    using ElementAccumulator = float;
    using ElementCompute = float;
  };

  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  struct Arguments {
    cutlass::bfloat16_t* out = nullptr;
    int64_t ldo = 0;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& shape, Arguments const& args) {
    return cute::get<1>(shape) % 2 == 0 && args.out != nullptr;
  }

  CUTLASS_HOST_DEVICE
  GatedPairsEpilogue(Params const& params, SharedStorage const& = SharedStorage())
      : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<FrgLayout>::value, "the accumulator layout must be static");
    const int M = get<0>(problem_shape_mnkl), N = get<1>(problem_shape_mnkl);
    const auto m_coord = get<0>(blk_coord_mnkl);
    const auto n_coord = get<1>(blk_coord_mnkl);
    // The (m, n) of every accumulator element this thread holds.
    Tensor coords = make_identity_tensor(make_shape(M, N));
    Tensor tile = local_tile(coords, take<0, 2>(blk_shape_MNK), make_coord(m_coord, n_coord));
    Tensor thread_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(tile);
    CUTE_STATIC_ASSERT_V(size(thread_coords) == size(accumulators));
    static_assert(decltype(size(accumulators))::value % 2 == 0);
    cutlass::bfloat16_t* out = params_.out;
    const int64_t ldo = params_.ldo;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); i += 2) {
      // Element i is (m, n) with n even (a gate), element i + 1 is (m, n + 1) (its up).
      const auto c = thread_coords(i);
      const int m = get<0>(c), n = get<1>(c);
      if (m < M && n < N) {
        const float h = GatedAct<kGelu>(accumulators(i)) * accumulators(i + 1);
        out[int64_t{m} * ldo + n / 2] = cutlass::bfloat16_t(h);
      }
    }
  }

 private:
  Params params_;
};

// One kernel configuration: CTA tile, cluster, schedule (cooperative: two consumer warpgroups
// share a tile; pingpong: each has its own and one's epilogue runs beside the other's MMAs).
template <bool kGelu, class Tile, class Cluster, class Schedule>
struct GatedGemmKernel {
  using Epilogue =
      cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<GatedPairsEpilogue<kGelu>>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t,
      cutlass::layout::RowMajor, 8, cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, float,
      Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using cute::_1;
using cute::_2;
using cute::_64;
using cute::_128;
using cute::_256;
using Cooperative = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using Pingpong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// Tiles are walked in swizzled groups of this many along the rasterised dimension, so that a wave's
// A rows and B columns stay in L2 (without it, measured on an H100: 600 TFLOP/s at 32K rows of the
// 8B FFN against 700 at 4K rows, where the whole A fits in L2).
constexpr int kSwizzle = 8;

template <class Config>
bool Run(const GatedGemmArgs& a, int sm_count, cudaStream_t stream) {
  using Gemm = typename Config::Gemm;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  const int M = static_cast<int>(a.rows), N = static_cast<int>(2 * a.f), K = static_cast<int>(a.k);
  StrideA stride_a{};
  cute::get<0>(stride_a) = a.ldx;  // A [M, K] row-major
  StrideB stride_b{};
  cute::get<0>(stride_b) = a.k;  // B as [N, K] rows (K-major)
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = sm_count;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {static_cast<const cutlass::bfloat16_t*>(a.x), stride_a,
       static_cast<const cutlass::bfloat16_t*>(a.w), stride_b},
      {static_cast<cutlass::bfloat16_t*>(a.out), a.ldo},
      hw};
  args.scheduler.max_swizzle_size = kSwizzle;
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
  if (Gemm::get_workspace_size(args) != 0) return false;  // none expected: no split-K
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return false;
  return gemm.run(stream) == cutlass::Status::kSuccess;
}

}  // namespace

bool GatedGemmAvailable(int device_major, int device_minor) {
  return device_major == 9 && device_minor == 0;
}

bool GatedGemmSupports(const GatedGemmArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.k % 8 == 0 && a.ldx % 8 == 0 && aligned(a.x) && aligned(a.w) && a.f > 0 &&
         a.rows <= INT32_MAX && 2 * a.f <= INT32_MAX && a.k <= INT32_MAX;
}

const char* GatedGemmVariantName(int variant) {
  switch (variant) {
    case 0: return "cooperative 128x256 cluster 2x1";
    case 1: return "pingpong 64x256 cluster 2x1";
    case 2: return "cooperative 128x256 cluster 1x2";
    default: return nullptr;
  }
}

bool LaunchGatedGemm(const GatedGemmArgs& args, int sm_count, cudaStream_t stream) {
  using cute::Shape;
  if (args.rows == 0) return true;
  if (args.gelu_tanh) {  // the default configuration only
    return Run<GatedGemmKernel<true, Shape<_128, _256, _64>, Shape<_2, _1, _1>, Cooperative>>(
        args, sm_count, stream);
  }
  switch (args.variant) {
    case 0:
      return Run<GatedGemmKernel<false, Shape<_128, _256, _64>, Shape<_2, _1, _1>, Cooperative>>(
          args, sm_count, stream);
    case 1:
      return Run<GatedGemmKernel<false, Shape<_64, _256, _64>, Shape<_2, _1, _1>, Pingpong>>(
          args, sm_count, stream);
    case 2:
      return Run<GatedGemmKernel<false, Shape<_128, _256, _64>, Shape<_1, _2, _1>, Cooperative>>(
          args, sm_count, stream);
    default:
      return false;
  }
}

#else  // built without CUTLASS's headers: never available

bool GatedGemmAvailable(int, int) { return false; }
bool GatedGemmSupports(const GatedGemmArgs&) { return false; }
bool LaunchGatedGemm(const GatedGemmArgs&, int, cudaStream_t) { return false; }
const char* GatedGemmVariantName(int) { return nullptr; }

#endif  // UP_WITH_CUTLASS

}  // namespace uniprefill::ops::cuda
