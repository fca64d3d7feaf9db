// The CUDA model's weights on the device: every linear weight dequantised once and uploaded as
// bf16 (rows fused or regrouped where the forward wants one GEMM), norms and small vectors as f32,
// one struct per layer kind. Built from a model definition (model/model_definition.h); random
// weights are filled on the device (core/random_bf16.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/device_buffer.h"
#include "core/status.h"
#include "core/device_context.h"
#include "model/model_definition.h"
#include "ops/cuda/cuda_moe.h"
#include "ops/ops.h"

namespace uniprefill::cuda_backend {

// A bf16 weight [out, in] on the device.
struct DeviceLinear {
  DeviceBuffer w;
  int64_t out = 0, in = 0;
  TensorView view() const { return w.View(DType::kBF16, {out, in}); }
};

// The rows of the given host weights stacked (dequantised to f32 [sum of out, in]), uploaded as
// bf16, or random weights filled on the device; `order` (optional) lists which host row becomes
// each device row.
Result<DeviceLinear> Upload(DeviceContext& ctx, const std::vector<const ops::LinearWeight*>& ws,
                            const std::vector<int64_t>* order = nullptr);
DeviceBuffer UploadF32(const std::vector<float>& v);
// The same from host rows already in f32 [out, in].
Result<DeviceLinear> UploadRows(const std::vector<float>& rows, int64_t out, int64_t in,
                                const std::vector<int64_t>* order = nullptr);

struct AttentionLayer {
  const AttentionWeights* host = nullptr;
  DeviceLinear qkv;  // bf16 [Hq D (+ Hq D gate) + 2 Hkv D, hidden]: q | gate | k | v
  DeviceLinear o;    // bf16 [hidden, Hq D]
  DeviceBuffer q_norm, k_norm, inv_freq;  // f32 [D], [D], [rot / 2]
};

struct DeltaLayer {
  const GatedDeltaNetWeights* host = nullptr;
  DeviceLinear in_proj;  // bf16 [conv_dim + value_dim + 2 Hv, hidden]: q | k | v | z | b | a
  DeviceLinear out_proj;
  DeviceBuffer conv_w, a_log, dt_bias, norm;  // f32 [conv_dim, K], [Hv], [Hv], [Dv]
};

// The router holds all n_experts rows; the expert tensors the local_experts from first_expert on
// (all of them unless an expert-parallel shard, dist/shard_layers.h).
struct MoeLayer {
  DeviceLinear router, experts_gate_up, experts_down, shared_gate_up, shared_down, shared_gate;
  int top_k = 0;
  bool norm_topk = true;
  int first_expert = 0;
  int64_t n_experts = 0, local_experts = 0, inter = 0;
  ops::cuda::MoeDeviceWeights View() const {
    ops::cuda::MoeDeviceWeights w;
    w.router = router.view();
    w.expert_gate_up =
        experts_gate_up.w.View(DType::kBF16, {local_experts, 2 * inter, router.in});
    w.expert_down = experts_down.w.View(DType::kBF16, {local_experts, router.in, inter});
    w.first_expert = first_expert;
    w.shared_gate_up = shared_gate_up.view();
    w.shared_down = shared_down.view();
    w.shared_gate = shared_gate.view();
    w.top_k = top_k;
    w.norm_topk_prob = norm_topk;
    return w;
  }
};

struct Layer {
  DeviceBuffer mixer_norm, post_mixer_norm, ffn_norm, post_ffn_norm;  // f32 [hidden] (or empty)
  std::unique_ptr<AttentionLayer> attention;
  std::unique_ptr<DeltaLayer> delta;
  DeviceLinear gate_up, down;  // dense FFN
  ops::Activation activation = ops::Activation::kSilu;
  std::unique_ptr<MoeLayer> moe;
};

// Each adds the bytes it uploaded to *bytes.
// Attention: q | gate | k | v fused (Qwen3-Next's per-head [query | gate] rows regrouped into all
// queries, then all gates).
Status UploadAttention(DeviceContext& ctx, const AttentionWeights& a, AttentionLayer* L,
                       int64_t* bytes);
// Gated DeltaNet: in_proj_qkvz and in_proj_ba fused, their per-key-head grouping undone, so the
// GEMM output is [q | k | v | z | b | a].
Status UploadDelta(DeviceContext& ctx, const GatedDeltaNetWeights& d, DeltaLayer* L,
                   int64_t* bytes);
// MoE: every held expert's gate_up (and down) stacked into one [E_local, 2I, H] ([E_local, H, I])
// buffer, the router whole; a shard (MoeWeights::first_expert) keeps its first expert's index.
Status UploadMoe(DeviceContext& ctx, const MoeWeights& m, MoeLayer* L, int64_t* bytes);

}  // namespace uniprefill::cuda_backend
