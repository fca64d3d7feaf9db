// PoolSgemm: cblas_sgemm with the work split over the context's thread pool, OpenBLAS itself held
// to one thread (DeviceContext::Cpu sets openblas_set_num_threads(1)).
//
// Why: with OpenBLAS threading itself (its pthread variant), its idle workers spin on
// sched_yield for ~0.1 s after every call (its thread timeout), while our pool runs attention,
// norms and dequantisation between the GEMMs: on the 2-vCPU Emerald Rapids VM a third runnable
// thread that took ~10% of a 1K-token prefill's samples in the kernel and libc (perf, 2026-12-04).
// One pool for everything leaves nothing to yield.
#pragma once

#include <cstdint>

#include "core/device_context.h"

namespace uniprefill::ops::cpu {

// out f32 [m, n] (row stride ldc) = alpha * a f32 [m, k] (row stride lda) @ b f32 [n, k]^T (row
// stride ldb), row-major. The larger of m and n is split into one contiguous part per pool thread
// (multiples of 16), each part one single-threaded cblas_sgemm: a part packs its share of the
// split operand and all of the other, so splitting the larger dimension duplicates the smaller
// operand's packing only. Each output element is computed inside one sgemm call.
void PoolSgemm(DeviceContext& ctx, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float* out, int64_t ldc);

}  // namespace uniprefill::ops::cpu
