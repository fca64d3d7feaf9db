// Elementwise and row-copy CUDA dense ops: GatedActivation, Embedding, Add, GatherRows, the
// f32 <-> bf16 conversions and FillRandomBf16. All memory-bound, f32 math.
// Row-wise ops use row tiles (dense_kernels_common.cuh): 2^k threads per row, 256 per block, each
// thread striding over its row in 16-byte vectors when every pointer, row stride and row length
// allows it, else element by element. Flat ops are grid-stride loops over 8-element vectors
// (a grid of one wave: 8 blocks of 256 threads per SM) with a scalar tail.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/random_bf16.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/dense_kernels_common.cuh"

namespace uniprefill::ops::cuda {
namespace {

using detail::bf16;
using detail::kBf16PerVec;
using detail::kTileThreads;

// A 2-D view's rows: row r starts at data + r * stride.
template <typename T>
struct Rows2 {
  T* data = nullptr;
  int64_t stride = 0;
  __device__ __forceinline__ T* Row(int64_t r) const { return data + r * stride; }
};
template <typename T>
Rows2<T> RowsOf(const TensorView& v) {
  return {static_cast<T*>(v.data), v.stride[0]};
}

void Check2D(const TensorView& v, DType dtype, int64_t rows, int64_t cols) {
  assert(v.device == Device::kCuda && v.dtype == dtype && v.ndim == 2);
  assert(v.dim(0) == rows && v.dim(1) == cols && v.stride[1] == 1);
  (void)v, (void)dtype, (void)rows, (void)cols;
}

// Launches kernel(args..., rows, units, log2_tpr) over row tiles.
template <typename... KernelArgs, typename... Args>
void LaunchTiles(void (*kernel)(KernelArgs...), int64_t rows, int64_t units, cudaStream_t stream,
                 Args... args) {
  if (rows == 0 || units == 0) return;
  const detail::RowTile tile = detail::MakeRowTile(rows, units);
  assert(tile.blocks <= INT32_MAX);
  kernel<<<static_cast<unsigned>(tile.blocks), kTileThreads, 0, stream>>>(args..., rows, units,
                                                                          tile.log2_tpr);
  UP_CUDA_CHECK_LAUNCH();
}

// As LaunchTiles, for kernels that stride over blockIdx.y too: when the row tiles alone fill few
// blocks (a decode step's one row of 14336 gate values ran on one block of 256 threads, 8.4 us
// on an H200), each row's units are split over up to kColumnBlocksTarget / row blocks blocks.
constexpr int64_t kColumnBlocksTarget = 264;  // two blocks per SM of an H200 (132 SMs)
template <typename... KernelArgs, typename... Args>
void LaunchColumnSplitTiles(void (*kernel)(KernelArgs...), int64_t rows, int64_t units,
                            cudaStream_t stream, Args... args) {
  if (rows == 0 || units == 0) return;
  const detail::RowTile tile = detail::MakeRowTile(rows, units);
  assert(tile.blocks <= INT32_MAX);
  const int64_t passes = (units + (int64_t{1} << tile.log2_tpr) - 1) >> tile.log2_tpr;
  const int64_t columns =
      std::clamp<int64_t>(kColumnBlocksTarget / tile.blocks, 1, std::min<int64_t>(passes, 65535));
  const dim3 grid(static_cast<unsigned>(tile.blocks), static_cast<unsigned>(columns));
  kernel<<<grid, kTileThreads, 0, stream>>>(args..., rows, units, tile.log2_tpr);
  UP_CUDA_CHECK_LAUNCH();
}

// ---- GatedActivation ----

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;

// As ops/cpu/cpu_activation.cc: act(g) = g * sigmoid(z), z = g (silu) or
// 2 sqrt(2/pi) (g + 0.044715 g^3) (gelu tanh), which is exact algebra for both.
template <Activation kAct>
__device__ __forceinline__ float Act(float g) {
  const float z = kAct == Activation::kSilu ? g : 2.0f * kSqrt2OverPi * (g + kGeluCoef * g * g * g);
  return g / (1.0f + expf(-z));
}

// blockIdx.y splits each row's units over gridDim.y blocks (LaunchColumnSplitTiles).
template <Activation kAct, int W>
__global__ void __launch_bounds__(kTileThreads)
    GatedKernel(Rows2<bf16> out, Rows2<const bf16> gate, Rows2<const bf16> up, int64_t rows,
                int64_t units, int log2_tpr) {
  int64_t r, u;
  if (!detail::TileRow(log2_tpr, rows, &r, &u)) return;
  const int64_t stride = (int64_t{1} << log2_tpr) * gridDim.y;
  for (u += (int64_t{blockIdx.y}) << log2_tpr; u < units; u += stride) {
    float g[W], v[W];
    detail::LoadBf16<W>(gate.Row(r) + u * W, g);
    detail::LoadBf16<W>(up.Row(r) + u * W, v);
#pragma unroll
    for (int k = 0; k < W; ++k) g[k] = Act<kAct>(g[k]) * v[k];
    detail::StoreBf16<W>(out.Row(r) + u * W, g);
  }
}

// The interleaved form (GatedActivationPairs): unit u of a row reads 2W pairs' values.
template <Activation kAct, int W>
__global__ void __launch_bounds__(kTileThreads)
    GatedPairsKernel(Rows2<bf16> out, Rows2<const bf16> pairs, int64_t rows, int64_t units,
                     int log2_tpr) {
  int64_t r, u;
  if (!detail::TileRow(log2_tpr, rows, &r, &u)) return;
  const int64_t stride = (int64_t{1} << log2_tpr) * gridDim.y;
  for (u += (int64_t{blockIdx.y}) << log2_tpr; u < units; u += stride) {
    float a[W], b[W], h[W];
    detail::LoadBf16<W>(pairs.Row(r) + 2 * u * W, a);
    detail::LoadBf16<W>(pairs.Row(r) + 2 * u * W + W, b);
    if constexpr (W == 1) {  // a = the gate, b = its up
      h[0] = Act<kAct>(a[0]) * b[0];
    } else {  // outputs 0 .. W/2 - 1 from a's pairs, the rest from b's
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float g = k < W / 2 ? a[2 * k] : b[2 * k - W];
        const float v = k < W / 2 ? a[2 * k + 1] : b[2 * k + 1 - W];
        h[k] = Act<kAct>(g) * v;
      }
    }
    detail::StoreBf16<W>(out.Row(r) + u * W, h);
  }
}

template <Activation kAct>
void LaunchGatedPairs(const TensorView& out, const TensorView& pairs, cudaStream_t stream) {
  const int64_t T = out.dim(0), F = out.dim(1);
  if (detail::RowsVectorisable(out) && detail::RowsVectorisable(pairs)) {
    LaunchColumnSplitTiles(GatedPairsKernel<kAct, kBf16PerVec>, T, F / kBf16PerVec, stream,
                           RowsOf<bf16>(out), RowsOf<const bf16>(pairs));
  } else {
    LaunchColumnSplitTiles(GatedPairsKernel<kAct, 1>, T, F, stream, RowsOf<bf16>(out),
                           RowsOf<const bf16>(pairs));
  }
}

template <Activation kAct>
void LaunchGated(const TensorView& out, const TensorView& gate, const TensorView& up,
                 cudaStream_t stream) {
  const int64_t T = gate.dim(0), F = gate.dim(1);
  const bool vec = detail::RowsVectorisable(out) && detail::RowsVectorisable(gate) &&
                   detail::RowsVectorisable(up);
  if (vec) {
    LaunchColumnSplitTiles(GatedKernel<kAct, kBf16PerVec>, T, F / kBf16PerVec, stream,
                           RowsOf<bf16>(out), RowsOf<const bf16>(gate), RowsOf<const bf16>(up));
  } else {
    LaunchColumnSplitTiles(GatedKernel<kAct, 1>, T, F, stream, RowsOf<bf16>(out),
                           RowsOf<const bf16>(gate), RowsOf<const bf16>(up));
  }
}

// ---- Embedding and Add ----

template <int W>
__global__ void __launch_bounds__(kTileThreads)
    EmbeddingKernel(Rows2<bf16> out, Rows2<const bf16> table, const int32_t* ids, float scale,
                    int32_t first_id, int64_t table_rows, int64_t rows, int64_t units,
                    int log2_tpr) {
  int64_t r, u;
  if (!detail::TileRow(log2_tpr, rows, &r, &u)) return;
  const int64_t id = int64_t{ids[r]} - first_id;
  const bool held = id >= 0 && id < table_rows;  // another vocabulary shard's token: zeros
  const bf16* src = table.Row(held ? id : 0);
  for (; u < units; u += int64_t{1} << log2_tpr) {
    float f[W];
    detail::LoadBf16<W>(src + u * W, f);
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = held ? f[k] * scale : 0.0f;
    detail::StoreBf16<W>(out.Row(r) + u * W, f);
  }
}

template <int W>
__global__ void __launch_bounds__(kTileThreads)
    AddKernel(Rows2<bf16> out, Rows2<const bf16> a, Rows2<const bf16> b, int64_t rows,
              int64_t units, int log2_tpr) {
  int64_t r, u;
  if (!detail::TileRow(log2_tpr, rows, &r, &u)) return;
  for (; u < units; u += int64_t{1} << log2_tpr) {
    float fa[W], fb[W];
    detail::LoadBf16<W>(a.Row(r) + u * W, fa);
    detail::LoadBf16<W>(b.Row(r) + u * W, fb);
#pragma unroll
    for (int k = 0; k < W; ++k) fa[k] += fb[k];
    detail::StoreBf16<W>(out.Row(r) + u * W, fa);
  }
}

// ---- GatherRows: a byte copy in units U (16, 4 or 2 bytes) ----

template <typename U>
__global__ void __launch_bounds__(kTileThreads)
    GatherKernel(Rows2<U> out, Rows2<const U> x, const int32_t* src_rows, int64_t rows,
                 int64_t units, int log2_tpr) {
  int64_t r, u;
  if (!detail::TileRow(log2_tpr, rows, &r, &u)) return;
  const int32_t source = src_rows[r];
  U* dst = out.Row(r);
  if (source < 0) {  // a padding row of a bounded segment (cuda_uniprefill.h): zeros
    for (; u < units; u += int64_t{1} << log2_tpr) dst[u] = U{};
    return;
  }
  const U* src = x.Row(source);
  for (; u < units; u += int64_t{1} << log2_tpr) dst[u] = src[u];
}

// Whether rows of `bytes` bytes at data with a row stride of stride_bytes (rows > 1) can be moved
// in units of `unit` bytes.
bool RowsFitUnit(const TensorView& v, int64_t row_bytes, int64_t stride_bytes, int unit) {
  return detail::Aligned(v.data, unit) && row_bytes % unit == 0 &&
         (v.dim(0) <= 1 || stride_bytes % unit == 0);
}

template <typename U>
void LaunchGather(const TensorView& out, const TensorView& x, const int32_t* rows,
                  int64_t elem_bytes, cudaStream_t stream) {
  const int64_t units = out.dim(1) * elem_bytes / static_cast<int64_t>(sizeof(U));
  const Rows2<U> o{static_cast<U*>(out.data), out.stride[0] * elem_bytes / int64_t{sizeof(U)}};
  const Rows2<const U> in{static_cast<const U*>(x.data),
                          x.stride[0] * elem_bytes / int64_t{sizeof(U)}};
  LaunchTiles(GatherKernel<U>, out.dim(0), units, stream, o, in, rows);
}

// ---- Flat conversions and random fill ----

// One wave of grid-stride blocks for n_units work items.
unsigned FlatBlocks(const DeviceContext& ctx, int64_t n_units) {
  const int64_t wave = int64_t{8} * ctx.cuda().sm_count();
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(wave, (n_units + kTileThreads - 1) / kTileThreads)));
}

__device__ __forceinline__ int64_t FlatIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t FlatStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// kVec: out and x 16-byte aligned; the n % 8 tail goes element by element.
template <bool kVec>
__global__ void __launch_bounds__(kTileThreads)
    F32ToBf16Kernel(bf16* out, const float* x, int64_t n) {
  int64_t begin = 0;
  if constexpr (kVec) {
    const int64_t n_vec = n / kBf16PerVec;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t v = FlatIndex(); v < n_vec; v += FlatStride()) {
      const float4 a = x4[2 * v], b = x4[2 * v + 1];
      const float f[kBf16PerVec] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      detail::StoreBf16x8(out + v * kBf16PerVec, f);
    }
    begin = n_vec * kBf16PerVec;
  }
  for (int64_t i = begin + FlatIndex(); i < n; i += FlatStride())
    out[i] = __float2bfloat16_rn(x[i]);
}

template <bool kVec>
__global__ void __launch_bounds__(kTileThreads)
    Bf16ToF32Kernel(float* out, const bf16* x, int64_t n) {
  int64_t begin = 0;
  if constexpr (kVec) {
    const int64_t n_vec = n / kBf16PerVec;
    float4* out4 = reinterpret_cast<float4*>(out);
    for (int64_t v = FlatIndex(); v < n_vec; v += FlatStride()) {
      float f[kBf16PerVec];
      detail::LoadBf16x8(x + v * kBf16PerVec, f);
      out4[2 * v] = make_float4(f[0], f[1], f[2], f[3]);
      out4[2 * v + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
    begin = n_vec * kBf16PerVec;
  }
  for (int64_t i = begin + FlatIndex(); i < n; i += FlatStride()) out[i] = __bfloat162float(x[i]);
}

// Element i of the stream `seed` (core/random_bf16.h: the host makes the same values).
__device__ __forceinline__ bf16 RandomBf16(uint64_t seed, uint64_t i, float scale) {
  return __ushort_as_bfloat16(RandomBf16Bits(seed, i, scale));
}

template <bool kVec>
__global__ void __launch_bounds__(kTileThreads)
    FillRandomKernel(bf16* out, int64_t n, uint64_t seed, float scale) {
  int64_t begin = 0;
  if constexpr (kVec) {
    const int64_t n_vec = n / kBf16PerVec;
    for (int64_t v = FlatIndex(); v < n_vec; v += FlatStride()) {
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint64_t i = static_cast<uint64_t>(v * kBf16PerVec + 2 * k);
        w[k] = static_cast<uint32_t>(__bfloat16_as_ushort(RandomBf16(seed, i, scale))) |
               (static_cast<uint32_t>(__bfloat16_as_ushort(RandomBf16(seed, i + 1, scale))) << 16);
      }
      *reinterpret_cast<uint4*>(out + v * kBf16PerVec) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    begin = n_vec * kBf16PerVec;
  }
  for (int64_t i = begin + FlatIndex(); i < n; i += FlatStride()) {
    out[i] = RandomBf16(seed, static_cast<uint64_t>(i), scale);
  }
}

}  // namespace

void GatedActivation(DeviceContext& ctx, TensorView out, TensorView gate, TensorView up,
                     Activation act) {
  // gate, up, out bf16 [T, F] (rows strided).
  const int64_t T = gate.dim(0), F = gate.dim(1);
  Check2D(gate, DType::kBF16, T, F);
  Check2D(up, DType::kBF16, T, F);
  Check2D(out, DType::kBF16, T, F);
  if (act == Activation::kSilu) {
    LaunchGated<Activation::kSilu>(out, gate, up, ctx.cuda().stream());
  } else {
    LaunchGated<Activation::kGeluTanh>(out, gate, up, ctx.cuda().stream());
  }
}

void GatedActivationPairs(DeviceContext& ctx, TensorView out, TensorView pairs, Activation act) {
  // out bf16 [T, F]; pairs bf16 [T, 2F] (rows strided), gate j at column 2j, up j at 2j + 1.
  const int64_t T = out.dim(0), F = out.dim(1);
  Check2D(out, DType::kBF16, T, F);
  Check2D(pairs, DType::kBF16, T, 2 * F);
  if (act == Activation::kSilu) {
    LaunchGatedPairs<Activation::kSilu>(out, pairs, ctx.cuda().stream());
  } else {
    LaunchGatedPairs<Activation::kGeluTanh>(out, pairs, ctx.cuda().stream());
  }
}

void Embedding(DeviceContext& ctx, TensorView out, TensorView table, const int32_t* ids,
               float scale, int32_t first_id) {
  // out bf16 [T, D]; table bf16 [V, D]; ids int32 [T].
  const int64_t T = out.dim(0), D = table.dim(1);
  Check2D(out, DType::kBF16, T, D);
  Check2D(table, DType::kBF16, table.dim(0), D);
  const bool vec = detail::RowsVectorisable(out) && detail::RowsVectorisable(table);
  cudaStream_t stream = ctx.cuda().stream();
  if (vec) {
    LaunchTiles(EmbeddingKernel<kBf16PerVec>, T, D / kBf16PerVec, stream, RowsOf<bf16>(out),
                RowsOf<const bf16>(table), ids, scale, first_id, table.dim(0));
  } else {
    LaunchTiles(EmbeddingKernel<1>, T, D, stream, RowsOf<bf16>(out), RowsOf<const bf16>(table), ids,
                scale, first_id, table.dim(0));
  }
}

void Add(DeviceContext& ctx, TensorView out, TensorView a, TensorView b) {
  // a, b, out bf16 [R, D].
  const int64_t R = a.dim(0), D = a.dim(1);
  Check2D(a, DType::kBF16, R, D);
  Check2D(b, DType::kBF16, R, D);
  Check2D(out, DType::kBF16, R, D);
  const bool vec =
      detail::RowsVectorisable(out) && detail::RowsVectorisable(a) && detail::RowsVectorisable(b);
  cudaStream_t stream = ctx.cuda().stream();
  if (vec) {
    LaunchTiles(AddKernel<kBf16PerVec>, R, D / kBf16PerVec, stream, RowsOf<bf16>(out),
                RowsOf<const bf16>(a), RowsOf<const bf16>(b));
  } else {
    LaunchTiles(AddKernel<1>, R, D, stream, RowsOf<bf16>(out), RowsOf<const bf16>(a),
                RowsOf<const bf16>(b));
  }
}

void GatherRows(DeviceContext& ctx, TensorView out, TensorView x, const int32_t* rows) {
  // out [R, D] row r = x row rows[r]; bf16, f32 or i32.
  const int64_t R = out.dim(0), D = out.dim(1);
  assert(x.dtype == DType::kBF16 || x.dtype == DType::kF32 || x.dtype == DType::kI32);
  Check2D(out, x.dtype, R, D);
  Check2D(x, x.dtype, x.dim(0), D);
  assert(out.data != x.data);
  const int64_t elem = x.dtype == DType::kBF16 ? 2 : 4;
  const int64_t row_bytes = D * elem;
  const int64_t out_stride = out.stride[0] * elem, x_stride = x.stride[0] * elem;
  auto fits = [&](int unit) {
    return RowsFitUnit(out, row_bytes, out_stride, unit) &&
           RowsFitUnit(x, row_bytes, x_stride, unit);
  };
  cudaStream_t stream = ctx.cuda().stream();
  if (fits(16)) {
    LaunchGather<uint4>(out, x, rows, elem, stream);
  } else if (fits(4)) {
    LaunchGather<uint32_t>(out, x, rows, elem, stream);
  } else {
    LaunchGather<uint16_t>(out, x, rows, elem, stream);
  }
}

void F32ToBf16(DeviceContext& ctx, void* out_bf16, const float* x, int64_t n) {
  if (n <= 0) return;
  bf16* out = static_cast<bf16*>(out_bf16);
  const bool vec = detail::Aligned(out, 16) && detail::Aligned(x, 16);
  const unsigned blocks = FlatBlocks(ctx, vec ? (n + kBf16PerVec - 1) / kBf16PerVec : n);
  if (vec) {
    F32ToBf16Kernel<true><<<blocks, kTileThreads, 0, ctx.cuda().stream()>>>(out, x, n);
  } else {
    F32ToBf16Kernel<false><<<blocks, kTileThreads, 0, ctx.cuda().stream()>>>(out, x, n);
  }
  UP_CUDA_CHECK_LAUNCH();
}

void Bf16ToF32(DeviceContext& ctx, float* out, const void* x_bf16, int64_t n) {
  if (n <= 0) return;
  const bf16* x = static_cast<const bf16*>(x_bf16);
  const bool vec = detail::Aligned(out, 16) && detail::Aligned(x, 16);
  const unsigned blocks = FlatBlocks(ctx, vec ? (n + kBf16PerVec - 1) / kBf16PerVec : n);
  if (vec) {
    Bf16ToF32Kernel<true><<<blocks, kTileThreads, 0, ctx.cuda().stream()>>>(out, x, n);
  } else {
    Bf16ToF32Kernel<false><<<blocks, kTileThreads, 0, ctx.cuda().stream()>>>(out, x, n);
  }
  UP_CUDA_CHECK_LAUNCH();
}

void FillRandomBf16(DeviceContext& ctx, void* out_bf16, int64_t n, uint64_t seed, float scale) {
  if (n <= 0) return;
  bf16* out = static_cast<bf16*>(out_bf16);
  const bool vec = detail::Aligned(out, 16);
  const unsigned blocks = FlatBlocks(ctx, vec ? (n + kBf16PerVec - 1) / kBf16PerVec : n);
  if (vec) {
    FillRandomKernel<true><<<blocks, kTileThreads, 0, ctx.cuda().stream()>>>(out, n, seed, scale);
  } else {
    FillRandomKernel<false><<<blocks, kTileThreads, 0, ctx.cuda().stream()>>>(out, n, seed, scale);
  }
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
