// A dense FFN's gate | up GEMM with the gated activation in its epilogue, on CUTLASS's Hopper
// GEMM (TMA loads, warp-specialised persistent cooperative kernel; gated_gemm_cutlass.cu, built
// for sm_90a only, and only where scripts/setup.sh fetched CUTLASS's headers).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace uniprefill::ops::cuda {

// out bf16 [rows, f] = act(x w_gate^T) * (x w_up^T), rounded once from the f32 accumulators:
// x bf16 [rows, k] (row stride ldx), w bf16 [2f, k] with gate and up rows interleaved (row 2j is
// gate row j, row 2j + 1 is up row j; contiguous), out row stride ldo. act: SiLU, or GELU (tanh)
// where gelu_tanh. Each output element is one fixed-order sum over k whatever the row count.
struct GatedGemmArgs {
  void* out;
  int64_t ldo;
  const void* x;
  int64_t ldx;
  const void* w;
  int64_t rows, f, k;
  bool gelu_tanh;
  int variant = 0;  // the kernel configuration (GatedGemmVariantName); GELU runs 0 alone
};

// True where this build holds the kernel (CUTLASS found, sm_90a compiled) and the device runs it
// (compute capability 9.0).
bool GatedGemmAvailable(int device_major, int device_minor);

// The shapes TMA can load: k, ldx multiples of 8 and x, w 16-byte aligned.
bool GatedGemmSupports(const GatedGemmArgs& args);

// The configurations a launch may ask for by GatedGemmArgs::variant (0 .. n - 1: a name; then
// nullptr), for same-binary comparisons.
const char* GatedGemmVariantName(int variant);

// Enqueues the GEMM on `stream` (no workspace, no sync); false if CUTLASS refused the launch.
bool LaunchGatedGemm(const GatedGemmArgs& args, int sm_count, cudaStream_t stream);

}  // namespace uniprefill::ops::cuda
