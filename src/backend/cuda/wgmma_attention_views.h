// The Hopper attention kernel's problem (ops/cuda/sm90/flash_attention_wgmma.h) of the CUDA
// model's strided views, for the mixers that run it and PrepareServing, which prices it.
#pragma once

#include <cuda_bf16.h>

#include "core/tensor.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"

namespace uniprefill::cuda_backend {

// How the backend launches the kernel (cuda_diagnostics.h: UNIPREFILL_CUDA_WGMMA_*); neither
// changes a bit of the output.
struct WgmmaLaunchChoices {
  ops::cuda::WgmmaTileOrder tile_order = ops::cuda::WgmmaTileOrder::kKvGroupLongestFirst;
  bool skip_unit_rescale = true;
  ops::cuda::WgmmaAttentionSchedule schedule =
      ops::cuda::WgmmaAttentionSchedule::kIntraOverlapPvBesideExp;
};

// q bf16 [Tq, Hq, 128], k / v bf16 [Tk, Hkv, 128], attn bf16 [Tq, Hq, 128], rows strided; the
// caller sets the sequences (seq_begin / seq_len, and k_seq_* for keys that are not q's rows).
inline ops::cuda::WgmmaAttentionProblem WgmmaProblemOf(const TensorView& q, const TensorView& k,
                                                       const TensorView& v, const TensorView& attn,
                                                       float scale,
                                                       const WgmmaLaunchChoices& choices) {
  ops::cuda::WgmmaAttentionProblem p;
  p.tile_order = choices.tile_order;
  p.skip_unit_rescale = choices.skip_unit_rescale;
  p.schedule = choices.schedule;
  p.q = static_cast<const __nv_bfloat16*>(q.data);
  p.k = static_cast<const __nv_bfloat16*>(k.data);
  p.v = static_cast<const __nv_bfloat16*>(v.data);
  p.out = static_cast<__nv_bfloat16*>(attn.data);
  p.q_row_stride = q.stride[0];
  p.k_row_stride = k.stride[0];
  p.v_row_stride = v.stride[0];
  p.out_row_stride = attn.stride[0];
  p.rows = q.shape[0];
  p.k_rows = k.shape[0];
  p.hq = static_cast<int>(q.shape[1]);
  p.hkv = static_cast<int>(k.shape[1]);
  p.head_dim = static_cast<int>(q.shape[2]);
  p.scale = scale;
  return p;
}

}  // namespace uniprefill::cuda_backend
