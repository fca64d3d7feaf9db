// Linear on bf16 with AMX tiles (--prefill-gemm bf16): no f32 weight copies. Two layouts:
// - Prefill chunks (more than kBf16FewRowsMax rows): each call converts the activation rows to
//   bf16 once, and every thread dequantises 32 weight rows at a time from the stored quant blocks
//   (io/dequant.h) into a bf16 panel that stays in its L2 while every activation row passes
//   (cpu_gemm_bf16_amx.h has the tile loop and the layout).
// - Batched decode steps and short chunks (kBf16MinRows to kBf16FewRowsMax rows): the weights
//   become the tiles' first operand as they are dequantised (AVX-512 decoders,
//   cpu_dequant_bf16_amx.h) and the few activation rows the second, so a step costs one stream
//   of the weights plus their conversion, not 16 vpdpwssd per weight block as the int16 lanes
//   kernels do. A single Q8_0 part with up to 16 rows skips the conversion: int8 tiles read its
//   blocks in place (cpu_gemm_q8_0_amx.h), the tokens quantised to int8 per 32 inputs.
// Accuracy: activations and weights each rounded to bf16 (8 significant bits: 2^-9 relative),
// or for the Q8_0 int8 tiles activations rounded to int8 per 32 inputs; sums in f32; on the
// golden prompt 2 the first-token logits stay within the bounds tests/model/gemma3_golden_test.cc
// gives this mode.
// Non-goals: one row (a lone decode streams the weights through the int16 matvec, which needs no
// conversion); CPUs without AMX (Linear runs the int16 rows there); inputs not a multiple of 32.
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cpu {

// Row counts of the few-rows layout above (a 16-request decode step is 16 rows).
inline constexpr int64_t kBf16MinRows = 2;
inline constexpr int64_t kBf16FewRowsMax = 64;

// At `isa` (>= kAmxBf16), every part of w dequantises (io/dequant.h) and the inputs are a
// multiple of 32.
bool CanRunLinearBf16(const LinearWeight& w, CpuIsa isa);

// out f32 [T, out] = x f32 [T, in] @ W^T; requires CanRunLinearBf16(w, ctx.cpu_isa()).
void LinearBf16(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w);

}  // namespace uniprefill::ops::cpu
