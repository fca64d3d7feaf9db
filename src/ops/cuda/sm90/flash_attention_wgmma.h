// Causal prefill attention on Hopper's warpgroup MMA and tensor memory accelerator
// (flash_attention_wgmma.cu, built for sm_90a only): FlashAttention-3's structure (a producer warp
// issuing TMA loads into a ring of K / V stages, two consumer warpgroups of 64 query rows each,
// QK^T and PV on wgmma with P kept in registers, online softmax in f32).
//
// Covers causal attention by row index over a packed varlen batch: each sequence's queries are
// its last keys (self-attention of a prefill, dense or the kept rows after a drop, whose
// ascending positions order the rows alike; or a chunk over its cached prefix, the keys being the
// prefix's then the chunk's own) or, with coordinates, rows gathered from its keys (a drop
// layer's kept queries over the layer's every key), GQA, head dim 128, bf16 in and out. Everything
// else (sliding windows, other head dims) stays with cuDNN and ops::cuda::FlashAttention.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace uniprefill::ops::cuda {

// How a consumer warpgroup orders its GEMMs and softmax (measured with
// tools/gpu/wgmma_attention_probe.cu, docs/gpu_performance.md; the default is the fastest):
//   kSerial       softmax of tile j, then PV of j and S of j + 1 together
//   kIntraOverlap FlashAttention-3's intra-warpgroup overlap: the softmax of tile j beside the
//                 PV GEMM of tile j - 1 (with 3 stages: 1.02-1.03x kSerial at 32K-128K). Read
//                 in its SASS (30th session): ptxas waits for PV right after the row max's
//                 shuffles, before every exponential, so the softmax does not run beside PV
//   kIntraOverlapPvBesideExp  S of tile j alone, its row max, then PV of tile j - 1 issued and
//                 the exponentials (written over S, no shuffle) beside it, one P buffer packed
//                 after PV's wait; in its SASS the 8 PV wgmmas interleave with the 64 MUFU.EX2
//                 of the unmasked tiles. Bit-identical to the others; not yet measured
enum class WgmmaAttentionSchedule { kSerial, kIntraOverlap, kIntraOverlapPvBesideExp };

// The order the GPU meets the CTAs in (it hands them to SMs in blockIdx order, x fastest):
//   kHeadMajor            head by head, each head's query tiles heaviest first; a launch ends on
//                         the last head's tiles, the heaviest of them among its last waves
//   kKvGroupLongestFirst  the query heads that share a kv head together, their tiles heaviest
//                         first across the group (a longest-first list schedule: the launch ends
//                         on the group's lightest tiles; the group's K / V is the L2's working
//                         set as before)
enum class WgmmaTileOrder { kHeadMajor, kKvGroupLongestFirst };

struct WgmmaAttentionProblem {
  // q bf16 [rows, hq, 128], k and v bf16 [rows, hkv, 128], out bf16 [rows, hq, 128]; each with
  // its own row stride in elements (a multiple of 8; q / k / v are often column slices of one
  // fused QKV output). All four 16-byte aligned.
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* k = nullptr;
  const __nv_bfloat16* v = nullptr;
  __nv_bfloat16* out = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0, out_row_stride = 0;
  int64_t rows = 0;  // rows of the packed buffers
  // Sequence b's queries are rows [seq_begin[b], seq_begin[b] + seq_len[b]) of q and out (device
  // int32 [batch] each; the lengths may be true counts below the capacities the host sized the
  // grid by). Its keys are the same rows of k and v (self-attention: k_seq_begin / k_seq_len
  // null), or rows [k_seq_begin[b], + k_seq_len[b]) of k and v, whose last seq_len[b] are the
  // queries' own (a chunk over its cached prefix: k_rows rows). Query i sees keys 0 ..
  // k_seq_len - seq_len + i. Rows outside the sequences are not written.
  const int32_t* seq_begin = nullptr;
  const int32_t* seq_len = nullptr;
  const int32_t* k_seq_begin = nullptr;
  const int32_t* k_seq_len = nullptr;
  int64_t k_rows = 0;  // rows of the k and v buffers when they are not q's (0: rows)
  // Gathered queries (a drop layer's kept rows, compacted before their attention): when set, query
  // row i of sequence b sees its keys 0 .. q_coord[seq_begin[b] + i] - k_coord[k_seq_begin[b]]
  // (device int32, the rows' and keys' alive indices in one frame, the keys' ascending by one from
  // their first; a row past the last key, as kPaddingPosition's padding rows, sees every key)
  // instead of 0 .. k_seq_len - seq_len + i. The queries' coordinates ascend within a sequence.
  // Each row's output is bit for bit its output in the ungathered problem (the key tiles a row
  // sees, and their order, do not change; a tile wholly past its last key changes nothing).
  const int32_t* q_coord = nullptr;
  const int32_t* k_coord = nullptr;
  int batch = 0;
  int max_seqlen = 0;  // upper bound of every sequence's length (sizes the grid)
  int hq = 0, hkv = 0;
  int head_dim = 0;
  float scale = 0.0f;
  WgmmaAttentionSchedule schedule = WgmmaAttentionSchedule::kIntraOverlap;
  int stages = 3;  // K / V tiles in flight: 2 or 3 (the overlap needs 3: 0.78x at 2)
  WgmmaTileOrder tile_order = WgmmaTileOrder::kHeadMajor;
  // Leave O alone in a key tile where no row of a warp saw a new running max: the rescale factor
  // is then exactly 1 for all its rows, so the output is bit-identical and the 64 multiplies a
  // thread does between two PV GEMMs go (past the first few tiles the max rarely moves).
  bool skip_unit_rescale = false;
  // Split-KV (1 .. kMaxAttentionPieces, cuda_attention_merge.h): with splits > 1 each query
  // tile's visible key tiles are cut into `splits` near-equal runs, a CTA each, so that a chunk
  // of few query tiles over a deep prefix fills the SMs. Split s writes its rows' attention over
  // its own keys, not to out, but to
  //   partial bf16 [splits, rows, hq, 128]: row r of q at (s * rows + r)
  //   lse     f32 [splits, hq, rows]:       log of sum exp(scale * score) over its keys (-inf
  //                                         where a row saw none; then its partial row is 0)
  // which MergeAttentionPieces turns into the attention (per sequence: the pointers offset by its
  // seq_begin, piece_rows and lse_rows = rows).
  int splits = 1;
  __nv_bfloat16* partial = nullptr;
  float* lse = nullptr;
};

// True on devices that run the kernel's sm_90a code (compute capability 9.0) and for the
// problems it covers (head dim 128, hq a multiple of hkv, strides and pointers aligned).
bool WgmmaAttentionAvailable(int device_major, int device_minor);
bool WgmmaAttentionCovers(const WgmmaAttentionProblem& p);

// Launches the kernel; a problem WgmmaAttentionCovers rejects returns cudaErrorInvalidValue
// without launching.
cudaError_t LaunchFlashAttentionWgmma(const WgmmaAttentionProblem& p, cudaStream_t stream);

}  // namespace uniprefill::ops::cuda
