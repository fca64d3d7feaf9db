// The MoE's grouped bf16 GEMM on Hopper's warpgroup MMA (wgmma), compiled for sm_90a only (its
// own CMake target): the same problem and device-side grouping as moe.cu's mma.sync kernel
// (grouped_gemm_common.cuh), at a higher rate. Why by hand and not cuBLAS / CUTLASS: the A rows
// are gathered through an index array and the groups' row counts stay on the device (no host sync,
// the walk stays capturable), and cuBLAS's grouped GEMM needs both on the host (measured: it was
// only 3% faster than the mma.sync kernel, grouped_gemm.h).
//
// Tiles of 128 x 256 x 64, two consumer warpgroups of 64 x 256 (wgmma m64n256k16, f32
// accumulators in registers, 128 per thread); all 256 threads load the next tiles with 16-byte
// cp.async into a 4-stage ring (48 KiB a stage) laid out as the 128-byte swizzle wgmma's shared
// memory descriptors read (K-major rows of 64 bf16 = 128 bytes; the 16-byte chunk c of row r sits
// at chunk c ^ (r % 8); 8 rows form one 1024-byte atom). Loads run two tiles ahead: stage
// kt + 2 is refilled only after the barrier that follows every warpgroup's wait for the MMAs of
// tile kt - 1, so no MMA still reading a stage sees it overwritten. A gated launch (gated_half)
// puts 128 gate rows and the 128 matching up rows in one tile and writes SiLU(gate) * up from the
// accumulators, so the MoE's [rows, 2I] intermediate never reaches memory. Each output element
// is one fixed-order sum over k (the same in every tile position), so a row's result does not
// depend on the batch. (A persistent variant, one block per SM issuing its next tile's loads
// before the current tile's epilogue, measured the same on the H200: Qwen3-Next layer 6.33 vs
// 6.37 ms, 128K prefill 5509 vs 5519 ms; so this simpler one stays.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/flash_attention_mma.cuh"
#include "ops/cuda/sm90/grouped_gemm_wgmma.h"
#include "ops/cuda/sm90/wgmma_primitives.cuh"

namespace uniprefill::ops::cuda {
namespace {

using bf16 = __nv_bfloat16;
namespace fl = ::uniprefill::ops::cuda::flash;
namespace s90 = ::uniprefill::ops::cuda::sm90;

constexpr int kBM = kGroupedGemmTileRows, kBN = 256, kBK = 64, kStages = 4, kThreads = 256;
constexpr int kAheadTiles = kStages - 2;  // tiles in flight beyond the one being multiplied
constexpr int kStageABytes = kBM * kBK * 2, kStageBBytes = kBN * kBK * 2;
constexpr int kStageBytes = kStageABytes + kStageBBytes;  // 48 KiB
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024;  // + alignment slack
constexpr int kRowsPerPass = kThreads / 8;  // 8 16-byte chunks per 128-byte row
static_assert(kBK * 2 == 128, "one tile row is one 128-byte swizzle row");

#ifdef UP_SM90A_COMPILED
using s90::FenceProxyAsync;
using s90::WgmmaCommit;
using s90::WgmmaFence;
using s90::WgmmaWait;
// SiLU(gate) * up of f32 accumulators, each rounded to bf16 first: the same bits as a bf16 GEMM
// output followed by ops/cuda's gated activation kernel (dense_elementwise.cu).
__device__ __forceinline__ float GatedSilu(float gate, float up) {
  const float g = __bfloat162float(__float2bfloat16_rn(gate));
  const float u = __bfloat162float(__float2bfloat16_rn(up));
  return g / (1.0f + expf(-g)) * u;
}
// d[0..127] += A (64 x 16, K-major, descriptor) * B (16 x 256, K-major descriptor), f32.
__device__ __forceinline__ void WgmmaM64N256K16(float (&d)[128], uint64_t desc_a,
                                               uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
      "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
      "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
      "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "
      "%120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
        "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
        "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
        "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
        "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
        "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
        "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <typename OutT>
__global__ void __launch_bounds__(kThreads, 1)
    GroupedGemmWgmmaKernel(GroupedGemmArgs args, int n_tiles) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle atoms need 1024-byte alignment of every stage.
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});

  const int n_tile = static_cast<int>(blockIdx.x % n_tiles);
  const int m_tile = static_cast<int>(blockIdx.x / n_tiles);
  GroupTile t;
  if (!FindGroupTile(args, m_tile, kBM, &t)) return;
  // A gated tile multiplies 128 gate rows and the 128 up rows of the same outputs.
  const bool gated = args.gated_half > 0;
  const int m0 = t.tile_in_group * kBM, n0 = n_tile * (gated ? kBN / 2 : kBN);
  const bf16* b_base = args.b + t.group * args.b_group_stride;

  // This thread's 16-byte chunk: column chunk `chunk` of rows row0 + kRowsPerPass * i. Every such
  // row has the same row % 8, so the swizzled chunk position is the same in every pass.
  const int tid = threadIdx.x;
  const int chunk = tid & 7, row0 = tid >> 3;
  const uint32_t smem_chunk = static_cast<uint32_t>(row0 * 128 + ((chunk ^ (row0 & 7)) << 4));
  constexpr int kAPasses = kBM / kRowsPerPass, kBPasses = kBN / kRowsPerPass;
  const bf16* a_src[kAPasses];
  bool a_ok[kAPasses];
#pragma unroll
  for (int i = 0; i < kAPasses; ++i) {
    const int local = m0 + row0 + kRowsPerPass * i;
    a_ok[i] = local < t.rows;
    int64_t a_row = 0;
    if (a_ok[i]) {
      const int r = t.row_begin + local;
      a_row = args.a_rows ? args.a_rows[r] : r;
    }
    a_src[i] = args.a + a_row * args.lda + chunk * 8;
  }
  const bf16* b_src[kBPasses];
  bool b_ok[kBPasses];
#pragma unroll
  for (int i = 0; i < kBPasses; ++i) {
    const int tile_row = row0 + kRowsPerPass * i;
    const int out_col = n0 + (gated ? tile_row % (kBN / 2) : tile_row);
    const int b_row = gated && tile_row >= kBN / 2 ? args.gated_half + out_col : out_col;
    b_ok[i] = out_col < args.n;
    b_src[i] = b_base + static_cast<int64_t>(b_ok[i] ? b_row : 0) * args.ldb + chunk * 8;
  }
  const int k_tiles = (args.k + kBK - 1) / kBK;
  auto load_tile = [&](int kt) {
    const int k0 = kt * kBK;
    const bool k_ok = k0 + chunk * 8 < args.k;
    unsigned char* sa = smem + (kt % kStages) * kStageBytes + smem_chunk;
    unsigned char* sb = sa + kStageABytes;
#pragma unroll
    for (int i = 0; i < kAPasses; ++i) {
      const bool va = a_ok[i] && k_ok;
      fl::CpAsync16(sa + i * kRowsPerPass * 128, va ? a_src[i] + k0 : args.a, va);
    }
#pragma unroll
    for (int i = 0; i < kBPasses; ++i) {
      const bool vb = k_ok && b_ok[i];
      fl::CpAsync16(sb + i * kRowsPerPass * 128, vb ? b_src[i] + k0 : args.b, vb);
    }
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kAheadTiles; ++s) {
    if (s < k_tiles) load_tile(s);
    fl::CpAsyncCommit();
  }
  const int warpgroup = tid >> 7;
  const uint32_t smem_base = fl::SmemAddress(smem);
  for (int kt = 0; kt < k_tiles; ++kt) {
    // Tile kt has landed (this thread's copies), then is visible to every thread's MMAs; every
    // warpgroup has also finished the MMAs of tile kt - 2, whose stage the next load refills.
    fl::CpAsyncWait<kAheadTiles - 1>();
    FenceProxyAsync();
    __syncthreads();
    if (kt + kAheadTiles < k_tiles) load_tile(kt + kAheadTiles);
    fl::CpAsyncCommit();

    const uint32_t stage = smem_base + (kt % kStages) * kStageBytes;
    const uint64_t desc_a = s90::KMajorSw128Descriptor(stage + warpgroup * 64 * 128);
    const uint64_t desc_b = s90::KMajorSw128Descriptor(stage + kStageABytes);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      // 16 bf16 along k = 32 bytes = 2 descriptor units; the swizzle is applied to the address.
      WgmmaM64N256K16(acc, desc_a + 2 * kk, desc_b + 2 * kk);
    }
    WgmmaCommit();
    WgmmaWait<1>();
  }
  WgmmaWait<0>();
  s90::FenceRegisters(acc);  // no read of the accumulators moves above the wait
  fl::CpAsyncWait<0>();

  // Epilogue from the accumulators: warp w of the warpgroup holds rows 16 w .. 16 w + 15; lane
  // (g = lane / 4, q = lane % 4) holds, for each 8-column block j, acc[4j], acc[4j + 1] at (row g,
  // cols 8j + 2q, +1) and acc[4j + 2], acc[4j + 3] at row g + 8.
  OutT* c = static_cast<OutT*>(args.c);
  const int lane = tid & 31, warp = (tid >> 5) & 3;
  const int g = lane >> 2, q = lane & 3;
  const bool paired =
      (args.ldc % 2 == 0) && (reinterpret_cast<uintptr_t>(c) % (2 * sizeof(OutT)) == 0);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int local = m0 + warpgroup * 64 + warp * 16 + g + h * 8;
    if (local >= t.rows) continue;
    OutT* crow = c + static_cast<int64_t>(t.row_begin + local) * args.ldc;
    if (gated) {
      // Gate column 8j + 2q sits in block j, its up column in block j + 16 of the same thread.
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) {
        const int col = n0 + j * 8 + 2 * q;
        if (col >= args.n) continue;
        const int gi = 4 * j + 2 * h, ui = 4 * (j + kBN / 16) + 2 * h;
        StorePair<OutT>(crow + col, GatedSilu(acc[gi], acc[ui]),
                        GatedSilu(acc[gi + 1], acc[ui + 1]), col + 1 < args.n, paired);
      }
      continue;
    }
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int col = n0 + j * 8 + 2 * q;
      if (col >= args.n) continue;
      StorePair<OutT>(crow + col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], col + 1 < args.n,
                      paired);
    }
  }
}
#else
template <typename OutT>
__global__ void GroupedGemmWgmmaKernel(GroupedGemmArgs, int) {
  __trap();  // built without sm_90a code: WgmmaGroupedGemmAvailable() said no
}
#endif  // UP_SM90A_COMPILED

}  // namespace

bool WgmmaGroupedGemmAvailable(int device_major, int device_minor) {
  return device_major == 9 && device_minor == 0;
}

template <typename OutT>
void LaunchGroupedGemmWgmma(const GroupedGemmArgs& args, int64_t m_tiles_bound,
                            cudaStream_t stream) {
  assert(args.k % 8 == 0 && args.lda % 8 == 0 && args.ldb % 8 == 0);
  assert(reinterpret_cast<uintptr_t>(args.a) % 16 == 0);
  assert(reinterpret_cast<uintptr_t>(args.b) % 16 == 0);
  if (m_tiles_bound == 0 || args.n == 0) return;
  static bool configured = [] {
    UP_CUDA_CHECK(cudaFuncSetAttribute(GroupedGemmWgmmaKernel<OutT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes)));
    return true;
  }();
  (void)configured;
  assert(args.gated_half == 0 || args.gated_half == args.n);
  const int tile_cols = args.gated_half > 0 ? kBN / 2 : kBN;
  const int n_tiles = (args.n + tile_cols - 1) / tile_cols;
  const int64_t blocks = m_tiles_bound * n_tiles;
  assert(blocks <= INT32_MAX);
  GroupedGemmWgmmaKernel<OutT>
      <<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(args, n_tiles);
  UP_CUDA_CHECK_LAUNCH();
}

template void LaunchGroupedGemmWgmma<__nv_bfloat16>(const GroupedGemmArgs&, int64_t, cudaStream_t);
template void LaunchGroupedGemmWgmma<float>(const GroupedGemmArgs&, int64_t, cudaStream_t);

}  // namespace uniprefill::ops::cuda
