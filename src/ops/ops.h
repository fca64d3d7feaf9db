// The backend-neutral op interface: what a model forward is built from.
//
// Every op takes the DeviceContext first, then outputs, then inputs, then sizes/params; the choice
// of kernel variant (scalar, AVX2, BLAS, and later CUDA) lives inside the op, dispatched on
// ctx.device() and the shapes. Shapes are checked with assertions: they are set by model code, not
// by users. Tensor comments give dtype and shape, outermost first.
// Non-goals: autograd, broadcasting, dtype promotion.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops {

// A linear layer's weight W [out, in] (y = x W^T), possibly fused from several file tensors
// stacked along `out` (e.g. q, k, v). `parts` are the tensors as stored in the model file (any
// dequantisable dtype, read in place); `f32` is an optional dequantised copy f32 [out, in] used for
// many-row GEMMs (prefill), where BLAS on f32 beats fused dequantisation.
struct LinearWeight {
  std::vector<TensorView> parts;  // each [out_i, in]
  Buffer f32;                     // f32 [out, in] or empty
  // No f32 copy kept, but many-row GEMMs run as if there were one: each call dequantises the
  // parts into a scratch f32 [out, in] (AVX-512 decoders, the copy's exact values) and runs the
  // same sgemm, so prefill keeps the copies' numerics and speed without their memory.
  bool f32_on_call = false;
  int64_t out_features = 0;
  int64_t in_features = 0;
  // Decode products (one row, and on the CPU steps of up to kQuantBatchMaxRows rows) may quantise
  // each activation row to int16 (error ~1e-5 of its max; see ops/cpu/cpu_quant_dot_i16.h) for
  // 2-3x faster integer kernels on the stored weights. false: f32 throughout (--f32-decode).
  bool int16_decode_activations = true;
  // With int16_decode_activations, on the CPU: products of several rows quantise them to int8
  // instead (one scale per 256 values; vpdpbusd kernels, VNNI CPUs only: ops/cpu/
  // cpu_quant_dot_i8.h), ~128x the int16 rounding. --prefill-gemm int8.
  bool int8_rows_activations = false;
  // With int16_decode_activations, on the CPU: products of more than kQuantBatchMaxRows rows
  // (prefill chunks) on bf16 activations and weights with AMX tiles where the CPU has them
  // (ops/cpu/cpu_linear_bf16.h); batched decode steps keep the int16 rows. --prefill-gemm bf16.
  bool bf16_prefill_gemm = false;
  // A random weight (benchmarks' random-weight models, model/model_presets.h) has no parts but
  // random_parts, stacked along `out` like parts: in part p, row-major element i of its
  // [rows, in] block is RandomBf16Bits(seed, i, scale) (core/random_bf16.h). The CUDA model fills
  // them on the device; CPU models get the same values materialised into parts.
  struct RandomPart {
    uint64_t seed = 0;
    int64_t rows = 0;
    float scale = 0;
  };
  std::vector<RandomPart> random_parts;
  bool is_random() const { return parts.empty() && !random_parts.empty(); }
  // CPU only, per part (empty, or one entry per part): int16 [rows, in / 32] sums of each Q8_0
  // block's 32 quants, made at load for the lanes kernel that reads them
  // (ops::cpu::AttachBlockQuantSums, cpu_quant_lanes_i16.h); an empty entry: computed per call.
  std::vector<std::vector<int16_t>> block_quant_sums;
};

// out f32 [T, out] = x f32 [T, in] @ W^T. `out` rows may be strided.
void Linear(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w);

// out = x / sqrt(mean(x^2) + eps) * weight over the last dim; x, out f32 [R, D]; weight f32 [D].
// In-place (out == x) is allowed. Computed in f32.
void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps);

enum class RopeStyle {
  kNeox,      // pairs (i, i + rot/2): Hugging Face rotate_half, GGUF gemma3/qwen
  kAdjacent,  // pairs (2i, 2i + 1): GGUF llama
};
// Rotates the first `rot_dims` dims of every head of x f32 [T, H, D] in place by position
// pos[t] with inverse frequencies inv_freq[rot_dims / 2].
void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style);
// inv_freq[i] = theta^(-2i / rot_dims), i < rot_dims / 2.
std::vector<float> RopeInvFreq(double theta, int rot_dims);

enum class Activation { kGeluTanh, kSilu };
// out f32 [T, F] = act(gate) * up; gate, up f32 [T, F] (rows may be strided, e.g. halves of one
// fused [T, 2F] GEMM output). out may alias gate.
void GatedActivation(DeviceContext& ctx, TensorView out, TensorView gate, TensorView up,
                     Activation act);

// out f32 [T, D] = table[ids[t]] * scale; table [V, D] in any dequantisable dtype.
void Embedding(DeviceContext& ctx, TensorView out, TensorView table, const int32_t* ids,
               float scale);

// out f32 [R, D] = a + b (out may alias a).
void Add(DeviceContext& ctx, TensorView out, TensorView a, TensorView b);

struct AttentionParams {
  float scale = 1.0f;  // applied to q.k
  int window = 0;      // 0: full causal; W > 0: key visible when k_pos > q_pos - W
  // CPU at the amx-bf16 level (--prefill-gemm bf16): query tiles of more than a few rows multiply
  // Q K^T and P V on bf16 AMX tiles (f32 sums; softmax in f32). Decode rows keep f32.
  bool bf16_tiles = false;
};
// Causal multi-head attention with GQA, tiled flash-style (online softmax; never an N x N matrix,
// so memory is linear in context). q f32 [Tq, Hq, D]; k, v f32 [Tk, Hkv, D] (row stride may exceed
// Hkv * D); out f32 [Tq, Hq, D]. Query head h uses kv head h / (Hq / Hkv).
// Key j is visible to query i iff k_pos[j] <= q_pos[i] and (window == 0 or
// k_pos[j] > q_pos[i] - window). k_pos must be ascending. Softmax in f32. A query with no visible
// key gets zeros.
void Attention(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
               const int32_t* q_pos, const int32_t* k_pos, const AttentionParams& params);

// One run of consecutive keys of a paged cache: k, v f32 or f16 [count, Hkv, D] (row stride may
// exceed Hkv * D; every run of a call the same dtype), read in place (f16 is widened to f32 a key
// tile at a time: the result equals f32 runs holding the same values).
struct KvRun {
  TensorView k, v;
};
// Attention exactly as above over the keys of `runs` in order (key j of the concatenation is row
// j - start of its run), without gathering them into one buffer: a paged cache's blocks are read
// where they are. k_pos [sum of the runs' counts], ascending over all of them.
void AttentionPaged(DeviceContext& ctx, TensorView out, TensorView q,
                    const std::vector<KvRun>& runs, const int32_t* q_pos, const int32_t* k_pos,
                    const AttentionParams& params);

// One request of AttentionPagedBatch: the arguments of an AttentionPaged call.
struct PagedAttentionSeq {
  TensorView out, q;
  const std::vector<KvRun>* runs = nullptr;
  const int32_t* q_pos = nullptr;
  const int32_t* k_pos = nullptr;
};
// AttentionPaged for every request of a step (same params), results equal bit for bit to one
// call per request; the work items of the requests too small to occupy the threads alone (decode
// requests of short contexts: one item each) share one pass of the thread pool, so a step of
// many of them keeps every thread busy instead of running them one after another on one thread.
void AttentionPagedBatch(DeviceContext& ctx, const std::vector<PagedAttentionSeq>& seqs,
                         const AttentionParams& params);

// UniPrefill scoring (docs/design.md section 1, steps 2-3): for each query j of q and each query
// head h, the fp32 softmax over the keys visible to j (k_pos[i] <= q_pos[j]) of
// scale * q[j,h] . k[i,kv(h)]; importance[i] += the sum of those probabilities over j and h. q f32
// [n, Hq, D] (row stride may exceed Hq * D); k f32 [N, Hkv, D] (row stride may exceed Hkv * D);
// importance f32 [N], accumulated into (zero it first). k_pos ascending.
void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale);

// out f32 [R, D] row r = x row rows[r] (compaction after a UniPrefill drop). out must not alias x.
void GatherRows(DeviceContext& ctx, TensorView out, TensorView x, const int32_t* rows);

}  // namespace uniprefill::ops
