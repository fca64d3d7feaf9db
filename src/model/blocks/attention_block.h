// The attention mixer of one layer over a packed batch, shared by every architecture (Gemma 3
// sliding/full, Llama full, Qwen3-Next gated full), including the UniPrefill selection at drop
// layers (docs/design.md section 1).
//
// At a drop layer, after the layer's queries and keys are computed (norms and RoPE applied) and the
// keys/values of every alive row are cached, each prefill request with more than S + n alive rows
// is scored (its last n queries against all its keys of this layer), its kept rows are chosen, and
// the batch moves to the next segment (x, positions, indices compacted). The attention itself is
// then computed only for the kept query rows: the dropped rows' outputs would be discarded, so this
// equals the reference's "attend with everything, then compact" while skipping their cost.
#pragma once

#include <span>
#include <vector>

#include "core/buffer.h"
#include "core/device_context.h"
#include "core/status.h"
#include "model/layer_backend.h"
#include "model/packed_batch.h"
#include "ops/ops.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {

struct AttentionWeights {
  ops::LinearWeight q, k, v, o;   // q: [Hq * D] rows, or [Hq * 2D] when gated ([query | gate] per head)
  std::vector<float> q_norm, k_norm;  // per-head RMSNorm weights f32 [D] as multiplied, or empty
  std::vector<float> rope_inv_freq;   // f32 [rot_dims / 2]
  int rot_dims = 0;
  ops::RopeStyle rope_style = ops::RopeStyle::kNeox;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  float norm_eps = 1e-6f;
  int window = 0;               // sliding window W, or 0 for full attention
  bool gated_output = false;    // out *= sigmoid(gate) before o (Qwen3-Next)
};

// Runs layer `layer`'s attention. h f32 [rows, hidden] is the normalised input. Returns the output
// f32 [rows', hidden] (in *out), where rows' = batch.rows() after the call (fewer at a drop layer,
// and with queries kLastOfEach one per request: every row's key and value are cached, and only
// each request's last row is attended for, as a drop's kept rows are).
Status AttentionForward(DeviceContext& ctx, const AttentionWeights& w, int layer,
                        PackedBatch& batch, TensorView h, const DropLayer* drop,
                        WindowMode window_mode, Buffer* out, QueryRows queries = QueryRows::kEvery);

}  // namespace uniprefill
