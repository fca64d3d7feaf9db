// CUDA Gated DeltaNet ops (the linear attention of Qwen3-Next): the GPU twins of
// ops/linear_attention_ops.h's CausalConv1dSilu, L2NormalizeHeads and GatedDeltaRule, over a
// packed batch of sequences in one launch (the CPU ops take one sequence per call).
//
// Same math and state layouts as the CPU ops: running a sequence's T rows in one call equals
// running them in several consecutive calls (a prefill, then 1-row decodes), and each sequence's
// state slot holds exactly what the CPU op's `state` holds (f32 always; zero at the start of a
// sequence). Token activations are bf16 or f32 (the dtype of the views; out has the dtype of its
// inputs); all math is f32, except the bf16 tensor-core products of
// DeltaRuleKernel::kChunkedTensorCore (kAuto's choice for bf16 prefills).
// Every op takes the DeviceContext (device kCuda) first, enqueues on ctx.cuda().stream() and never
// synchronises. Tensors are device views (TensorView::device == kCuda) whose rows may be strided
// (q, k, v are column ranges of one conv output) with the last dimension contiguous; integer
// arrays are device pointers.
// Non-goals: conv bias or other activations, fused gating / output norm
// (ops/cuda/cuda_dense_ops.h), backward passes.
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops::cuda {

// The sequences of a packed batch and their state slots. Sequence b owns rows
// [cu_seqlens[b], cu_seqlens[b+1]) of every token tensor and state slot state_slots[b] of the
// state slab (slots distinct within a call). A decode step is the batch with one row per sequence.
struct LinearAttentionBatch {
  // device int32 [batch + 1], ascending from 0. Null: every sequence has exactly max_seqlen rows
  // (sequence b is rows [b * max_seqlen, (b + 1) * max_seqlen)), e.g. one sequence of T rows, or
  // a decode batch with max_seqlen = 1.
  const int32_t* cu_seqlens = nullptr;
  // device int32 [batch]. Null: sequence b uses slot b.
  const int32_t* state_slots = nullptr;
  // device int32 [batch] (optional, with cu_seqlens): sequence b is only the first seq_lens[b]
  // rows of its cu_seqlens range (a bounded segment after a sync-free UniPrefill drop, whose tail
  // is padding); the padding rows are neither read nor written, and the state ends after the
  // real rows.
  const int32_t* seq_lens = nullptr;
  int batch = 1;
  // An upper bound on every sequence's rows (host-side: it sizes the grid; with cu_seqlens null it
  // is the exact length).
  int max_seqlen = 0;
};

// The depthwise causal conv + SiLU of ops::CausalConv1dSilu for every sequence of the batch:
//   out[t][c] = silu(sum_j weight[c][j] * in[t - (K-1) + j][c]),
// where in[] before the sequence's first row comes from its conv state, which is then replaced by
// the last K-1 inputs of [state; x], oldest first.
// out, x: bf16 or f32 [T, C] (the same dtype; rows strided; out must not alias x); weight: f32
// [C, K] contiguous, 1 <= K <= 8; state: f32 slab [slots][K-1][C] (slot s at
// state + s * (K-1) * C), in/out.
void CausalConv1dSilu(DeviceContext& ctx, TensorView out, TensorView x, TensorView weight,
                      float* state, const LinearAttentionBatch& seqs);

// In place, per row of the last dimension: x <- x * scale / sqrt(sum_d x[d]^2 + eps) (the FLA /
// Hugging Face l2norm). x bf16 or f32 [R, D] or [T, H, D] (rows and heads strided).
void L2NormalizeHeads(DeviceContext& ctx, TensorView x, float eps, float scale = 1.0f);

// Which kernel runs the gated delta rule; every one computes the same recurrence.
enum class DeltaRuleKernel {
  kAuto,       // recurrent when max_seqlen <= kDeltaRuleRecurrentMaxSeqlen, else chunked
               // (kChunkedTensorCoreSplit, else kChunkedTensorCore, for bf16 activations longer
               // than kDeltaRuleF32MaxSeqlen; kChunked otherwise)
  kChunked,    // chunks of 64 tokens in the WY form (prefill), f32 math on CUDA cores
  kRecurrent,  // token by token (decode, short sequences)
  // kChunked's math with every matrix product on the tensor cores: bf16 operands (activations,
  // and the state, the triangular inverse and the deltas rounded to bf16 where they enter a
  // product), f32 accumulation, f32 state and f32 triangular inverse. Agrees with kChunked to a
  // few 1e-3 (relative); f32 activations are rounded to bf16 on load.
  kChunkedTensorCore,
  // kChunkedTensorCore's math in two kernels (linear_attention_delta_rule_split.cu): the dots and
  // the solve of every chunk in parallel first, then the chunks in order with two products and
  // the update only. Needs the caller's scratch (GatedDeltaRuleScratchBytes), bf16 activations
  // with 16-byte aligned rows, Dk and Dv multiples of 8 and Dv <= 128; else kChunkedTensorCore
  // runs. kAuto's choice where kChunkedTensorCore's would be, when those hold.
  kChunkedTensorCoreSplit,
};
inline constexpr int kDeltaRuleRecurrentMaxSeqlen = 16;
// kAuto keeps sequences of at most one chunk (64 rows) on kChunked's f32 math.
inline constexpr int kDeltaRuleF32MaxSeqlen = 64;

// The gated delta rule of ops::GatedDeltaRule for every sequence of the batch, continuing from its
// state slot. Per value head h (key head h / (Hv / Hk)) and token t, with S = state[h]:
//   S <- exp(g[t][h]) S;  u = S^T k;  S <- S + k (beta[t][h] (v - u))^T;  out[t][h] = S^T q.
// q and k must already be l2-normalised, q scaled (by 1 / sqrt(Dk) in Qwen3-Next).
// out: [T, Hv, Dv]; q, k: [T, Hk, Dk]; v: [T, Hv, Dv] (all four bf16 or all four f32; rows and
// heads strided; out must not alias an input); g (log decay, <= 0), beta: f32 [T, Hv] (rows
// strided); state: f32 slab [slots][Hv][Dk][Dv] (slot s at state + s * Hv * Dk * Dv), in/out.
// Dk <= 128, any Dv; Hv a multiple of Hk.
// scratch: device memory of at least GatedDeltaRuleScratchBytes(T, Hv, Dv) bytes, 256-byte
// aligned, for kChunkedTensorCoreSplit (null or smaller: that kernel is not used).
void GatedDeltaRule(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    TensorView g, TensorView beta, float* state, const LinearAttentionBatch& seqs,
                    DeltaRuleKernel kernel = DeltaRuleKernel::kAuto, void* scratch = nullptr,
                    size_t scratch_bytes = 0);

// Scratch bytes kChunkedTensorCoreSplit needs for T token rows (~0.65 KB per row and value head at
// Dv 128).
size_t GatedDeltaRuleScratchBytes(int64_t rows, int64_t hv, int64_t dv);

}  // namespace uniprefill::ops::cuda
