// Linear-attention ops (Gated DeltaNet, as in Qwen3-Next): the short causal conv, the l2 norm of
// q/k heads, and the gated delta rule recurrence. Same conventions as ops.h: DeviceContext first,
// then outputs, inputs, sizes; shapes checked with assertions; all math in f32.
//
// The recurrent ops run on ONE sequence's rows and carry their state across calls: running T rows
// in one call gives the same result as running them in several consecutive calls (a prefill, then
// 1-row decodes). A packed batch of several sequences calls them once per sequence; the state
// buffers are those of kv/linear_state.h.
// Non-goals: causal conv with bias or other activations, chunked-prefill kernels with a different
// contract (a chunked WY form would be a variant inside GatedDeltaRule, same contract).
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops {

// Depthwise causal conv over time followed by SiLU, continuing from `state`:
//   out[t][c] = silu(sum_j weight[c][j] * in[t - (K-1) + j][c]),  j = 0 .. K-1,
// where in[tau] is x[tau] for tau >= 0 and state[K-1 + tau] (the previous call's last inputs) for
// tau < 0. Then state <- the last K-1 inputs of [state; x], oldest first.
// out f32 [T, C]; x f32 [T, C] (rows may be strided; must not alias out); weight f32 [C, K] (the
// Hugging Face conv1d weight [C, 1, K] squeezed: weight[c][K-1] multiplies the current input);
// state f32 [K-1, C], in/out (zeros at the start of a sequence).
void CausalConv1dSilu(DeviceContext& ctx, TensorView out, TensorView x, TensorView weight,
                      float* state);

// In place, per row of the last dimension: x <- x * scale / sqrt(sum_d x[d]^2 + eps) (the FLA /
// Hugging Face l2norm: eps is added to the sum of squares, not to the norm). x f32 [R, D] or
// [T, H, D] (strided rows and heads allowed, the last dim contiguous).
void L2NormalizeHeads(DeviceContext& ctx, TensorView x, float eps, float scale = 1.0f);

// The gated delta rule over T tokens of one sequence, continuing from `state`. Per value head h
// (key head h / (Hv / Hk)) and token t, with S = state[h] f32 [Dk, Dv]:
//   S <- exp(g[t][h]) S;  u = S^T k;  S <- S + k (beta[t][h] (v - u))^T;  out[t][h] = S^T q.
// q and k must already be l2-normalised, and q scaled (by 1 / sqrt(Dk) in Qwen3-Next).
// out f32 [T, Hv, Dv]; q, k f32 [T, Hk, Dk]; v f32 [T, Hv, Dv]; g (log decay, <= 0), beta
// f32 [T, Hv]; state f32 [Hv, Dk, Dv] contiguous, in/out. Token rows and heads may be strided
// (e.g. q, k, v are column ranges of one conv output); the last dim is contiguous; out must not
// alias an input. Hv must be a multiple of Hk.
void GatedDeltaRule(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    TensorView g, TensorView beta, float* state);

}  // namespace uniprefill::ops
