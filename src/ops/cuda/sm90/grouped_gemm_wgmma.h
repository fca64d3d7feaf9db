// The MoE's grouped bf16 GEMM on Hopper's wgmma (grouped_gemm_wgmma.cu, built for sm_90a only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/grouped_gemm_common.cuh"

namespace uniprefill::ops::cuda {

// True on devices that run the sm_90a code (compute capability 9.0: H100, H200).
bool WgmmaGroupedGemmAvailable(int device_major, int device_minor);

// C (OutT: bf16 or f32) = the grouped GEMM of grouped_gemm_common.cuh, over m_tiles_bound tiles
// of 128 rows (an upper bound of the real m tile count). Requirements as moe.cu's kernel: K, lda,
// ldb multiples of 8, A and B 16-byte aligned. Only on devices WgmmaGroupedGemmAvailable accepts.
template <typename OutT>
void LaunchGroupedGemmWgmma(const GroupedGemmArgs& args, int64_t m_tiles_bound,
                            cudaStream_t stream);

}  // namespace uniprefill::ops::cuda
