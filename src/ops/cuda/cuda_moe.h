// CUDA sparse MoE (Qwen3-Next's Qwen3NextSparseMoeBlock): the GPU twin of model/blocks/moe.h's
// MoeForward, bf16 activations and weights, f32 math.
//
// Steps, all on ctx.cuda().stream(), no host synchronisation (the row counts of each expert never
// leave the device) unless MoeGemm::kLibrary runs the GEMMs (below):
//   1. router logits f32 [T, E] = x @ router^T (our grouped GEMM kernel, one group, f32 output);
//   2. routing, one warp per row: softmax over all E experts in f32, top-k by probability with
//      ties to the lower expert index, optional renormalisation over the k chosen (summed in
//      ascending expert index), as RouteRow; per-expert row counts (atomics: counts are exact);
//   3. grouping: expert offsets and GEMM tile offsets (one-block scan), then every (row, choice)
//      gets a slot in its expert's contiguous range (the order within an expert's range is not
//      fixed, but nothing numeric depends on it: each output element of the GEMM kernel is one
//      fixed-order dot product, wherever its row sits);
//   4. expert gate/up GEMM over all experts in one launch (bf16 wgmma on Hopper, mma.sync
//      m16n8k16 elsewhere, f32 accumulation; the grid covers an upper bound of the tiles, each
//      block finds its expert by a binary search over the device tile offsets, extra blocks
//      exit), gathering x rows;
//   5. SiLU(gate) * up (in step 4's epilogue on the wgmma kernel); 6. the expert down GEMM
//      (same kernel) into one bf16 row per (row, choice);
//   7. the shared expert (the same GEMM kernel, one group) and its gate sigmoid(x . shared_gate);
//   8. combine, one block per row: out = sum over the k choices in ascending expert index of
//      weight * expert_out, then + sigmoid(gate) * shared_out, in f32, rounded to bf16 once.
// Tensor parallel (expert parallel, dist/shard_layers.h; the CPU twin is model/blocks/moe.h): the
// weights may hold a shard, experts [first_expert, first_expert + E_local) of the router's E with
// a column slice of the shared expert. Routing still runs over all E router rows (the router is
// replicated), so every rank picks the same top-k and weights as one process; choices of another
// rank's experts get no slot (steps 3-6 skip them) and add nothing in the combine, and the shared
// expert's slice adds its partial sum. The output is this rank's partial sum, which the layer
// walk's all-reduce completes; a whole model is the shard first_expert 0, E_local = E.
// Determinism (MoeGemm::kOurs): every row's result depends only on that row (not on the batch or
// on the slot order the atomics chose), and two runs give identical bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops::cuda {

struct MoeDeviceWeights {
  TensorView router;          // bf16 [E, H]: all of the model's experts, also in a shard
  TensorView expert_gate_up;  // bf16 [E_local, 2I, H]: per expert gate rows then up rows
  TensorView expert_down;     // bf16 [E_local, H, I] (contiguous)
  TensorView shared_gate_up;  // bf16 [2Is, H] (a shard: its Is columns' gate rows, then up rows)
  TensorView shared_down;     // bf16 [H, Is]
  TensorView shared_gate;     // bf16 [1, H]
  int top_k = 0;
  bool norm_topk_prob = true;
  // The routed expert expert_gate_up[0] is: 0 unless this is an expert-parallel shard.
  int first_expert = 0;
  int64_t n_experts() const { return router.dim(0); }            // E, what routing ranks
  int64_t local_experts() const { return expert_gate_up.dim(0); }  // E_local, what runs here
};

// Which kernels run the expert GEMMs (steps 4 and 6), the shared expert's (7) and the router's (1).
//   kOurs: our grouped kernel, no host sync, every row's result independent of the batch
//     (bit-identical in any batch). The default. On compute capability 9.0 (H100 / H200) it is
//     the wgmma kernel (sm90/grouped_gemm_wgmma.h), elsewhere the mma.sync one (moe.cu).
//   kOursMmaSync: the mma.sync kernel on any device (for comparisons).
//   kLibrary: one host sync after step 3 to learn the experts' row counts, x gathered into expert
//     order, then cuBLAS's grouped GEMM (grouped_gemm.h) and cuBLASLt for the shared expert; a
//     row's rounding may depend on the batch (the library picks kernels by shape). Measured on the
//     H200 (Qwen3-Next-80B layer, 512 experts, top 10, 32K rows): 9.73 ms against the mma.sync
//     kernel's 10.09 ms (240 vs 232 TFLOP/s), too little to pay for the sync and the batch
//     dependence, so it is kept for comparisons only (bench gpu-prefill --moe-gemm library).
enum class MoeGemm { kOurs, kOursMmaSync, kLibrary };

// Device scratch bytes MoeForward needs for up to max_rows rows (about
// max_rows * (4 E + 2 k (2 I + H) + 2 (2 Is + H) + 12 k) bytes).
size_t MoeScratchBytes(int64_t max_rows, const MoeDeviceWeights& w);

// out bf16 [T, H] = MoE(x bf16 [T, H]) (rows of out/x may be strided; out must not alias x).
// scratch: device memory of at least MoeScratchBytes(T, w) bytes, 256-byte aligned.
// Requirements: H, I, Is multiples of 8; x's row stride a multiple of 8 and x 16-byte aligned;
// 1 <= top_k <= min(E, 32); 0 <= first_expert, first_expert + E_local <= E. T == 0 is a no-op.
void MoeForward(DeviceContext& ctx, TensorView out, TensorView x, const MoeDeviceWeights& w,
                void* scratch, size_t scratch_bytes, MoeGemm gemm = MoeGemm::kOurs);

}  // namespace uniprefill::ops::cuda
