// The CPU backend of ops.h: one function per op, same contract (see ops.h), called by the dispatch
// in ops/ops.cc. Each kernel family lives in its own cpu_*.cc file.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cpu {

// Rows of x at or above which Linear uses BLAS sgemm on w.f32 (when present) instead of the fused
// dequantise-and-dot matvec.
inline constexpr int64_t kGemmMinRows = 8;
// Rows of x up to which Linear stays on the quantised weights (int16 activations) even where an
// f32 copy exists: a decode step of up to this many requests streams ~0.6 bytes per weight
// instead of sgemm's 4 (cpu_linear.cc).
inline constexpr int64_t kQuantBatchMaxRows = 64;

void Linear(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w);
// Whether Linear can make w's f32 GEMM operand per call (LinearWeight::f32_on_call) at `isa`:
// the avx512 level or above, and an AVX-512 f32 decoder for every part.
bool CanDequantiseForGemm(const LinearWeight& w, CpuIsa isa);
void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps);
void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style);
void GatedActivation(DeviceContext& ctx, TensorView out, TensorView gate, TensorView up,
                     Activation act);
void Embedding(DeviceContext& ctx, TensorView out, TensorView table, const int32_t* ids,
               float scale);
void Add(DeviceContext& ctx, TensorView out, TensorView a, TensorView b);
void Attention(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
               const int32_t* q_pos, const int32_t* k_pos, const AttentionParams& params);

void AttentionPaged(DeviceContext& ctx, TensorView out, TensorView q,
                    const std::vector<KvRun>& runs, const int32_t* q_pos, const int32_t* k_pos,
                    const AttentionParams& params);
void AttentionPagedBatch(DeviceContext& ctx, const std::vector<PagedAttentionSeq>& seqs,
                         const AttentionParams& params);

void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale);
void GatherRows(DeviceContext& ctx, TensorView out, TensorView x, const int32_t* rows);

}  // namespace uniprefill::ops::cpu
