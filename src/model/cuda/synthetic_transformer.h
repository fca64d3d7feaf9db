// SyntheticTransformer: a model of Llama / Gemma 3 / Qwen3-Next shape with random bf16 weights
// made on the GPU from a shape and a seed, no files, for prefill benchmarks (issue 6: "synthetic
// weights in memory"). Its prefill is the real CUDA layer stack (embedding, fused add + RMSNorm,
// fused QKV GEMM, optional q/k-norm, (partial) RoPE, varlen flash attention with sliding windows,
// optional sigmoid output gate, O projection, gated FFN or sparse MoE, final norm, logits of each
// request's last token) over a packed batch; hybrid shapes (Qwen3-Next) run Gated DeltaNet layers
// (fused in-projection, causal conv + SiLU, l2 norm, chunked delta rule, gated per-head RMSNorm,
// out-projection) between the full-attention ones. UniPrefill at the shape's drop layers: device
// scoring, selection and compaction. Fixed-ratio mode never syncs: every later launch is sized by
// each request's capacity (FixedRatioCapacity) and the true kept counts stay on the device
// (bounded segments, cuda_uniprefill.h); top-p mode brings the kept counts back once per drop
// layer (one small sync, timed in PrefillTiming::uniprefill_ms). The MoE never syncs.
//
// The header is CUDA-free; the class exists only in builds with the CUDA backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "sparsity/token_selection.h"

namespace uniprefill {

struct SyntheticShape {
  std::string name;
  int n_layers = 0;
  int hidden = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  int vocab = 0;
  float rope_theta = 10000.0f;
  float rope_theta_local = 0;  // sliding-window layers' theta (Gemma 3: 1e4); 0 = rope_theta
  bool qk_norm = false;
  bool gelu = false;           // gated GELU-tanh (Gemma) instead of SiLU (Llama)
  int sliding_window = 0;      // 0: every layer full attention
  int full_every = 0;          // with a window: layer l is full iff (l + 1) % full_every == 0
  std::vector<int> drop_layers;  // UniPrefill's reference drop layers for the model
  // Qwen3-Next: layers that are not full attention ((l + 1) % full_every == 0) are Gated DeltaNet
  // (lin_k_heads key heads, lin_v_heads value heads, head dim lin_head_dim for keys and values,
  // depthwise causal conv of conv_kernel taps).
  bool linear_attention = false;
  int lin_k_heads = 0, lin_v_heads = 0, lin_head_dim = 0, conv_kernel = 4;
  bool attn_output_gate = false;  // q_proj also gives a per-head gate: out *= sigmoid(gate)
  int rotary_dims = 0;            // partial RoPE (first rotary_dims of each head); 0 = head_dim
  // Sparse MoE FFN when n_experts > 0 (intermediate is then unused): softmax router, top_k experts
  // of moe_intermediate, one shared expert of shared_intermediate with a sigmoid gate.
  int n_experts = 0, top_k = 0, moe_intermediate = 0, shared_intermediate = 0;
  std::string note;  // how the shape departs from the real model (recorded in the bench JSON)

  bool IsFullAttention(int layer) const {
    if (linear_attention) return full_every > 0 && (layer + 1) % full_every == 0;
    return sliding_window == 0 || (full_every > 0 && (layer + 1) % full_every == 0);
  }
  bool IsLinearAttention(int layer) const { return linear_attention && !IsFullAttention(layer); }
  int RotaryDims() const { return rotary_dims > 0 ? rotary_dims : head_dim; }
  // Parameters (weights) and the dense prefill FLOPs of one request of n tokens (linear layers +
  // causal attention, windows counted; MoE: router + the top_k experts + the shared expert per
  // token; Gated DeltaNet: projections, conv and 6 dk dv per value head and token for the delta
  // rule, counted as "linear").
  int64_t Parameters() const;
  double DensePrefillFlops(int64_t n_tokens) const;
  double LinearPrefillFlops(int64_t n_tokens) const;  // the linear layers' part of it
};

// "llama-3.1-8b", "gemma-3-12b", "qwen3-next-80b-a3b" (48 layers, 256 of the 512 experts: see
// its note), "tiny" or "tiny-hybrid" (small shapes for tests); an error lists them.
Result<SyntheticShape> SyntheticShapeByName(const std::string& name);

struct PrefillTiming {
  double total_ms = 0;       // device time of the whole prefill (events), host syncs included
  double uniprefill_ms = 0;  // scoring + selection + count sync + compaction, all drop layers
  double attention_ms = 0;   // flash attention kernels, all layers (measured only if asked)
  double linear_attention_ms = 0;  // DeltaNet conv .. gated norm, all layers (likewise)
  double moe_ms = 0;               // MoeForward, all layers (likewise)
  std::vector<std::vector<int64_t>> kept;  // [request][drop layer] alive tokens after the drop
};

struct UniPrefillRun {
  bool enabled = false;
  sparsity::SelectionParams selection;  // mode, p or keep ratio, G, S, n
  std::vector<int> drop_layers;         // ascending attention layers; empty: the shape's own
  // Fixed ratio only: learn the kept counts by a host sync at each drop and lay the rows out
  // exactly, as top-p must (for tests and for measuring what the sync-free path saves).
  bool sync_each_drop = false;
};

class SyntheticTransformer {
 public:
  // Allocates and fills the weights (seeded) and work buffers for up to max_tokens packed tokens.
  static Result<std::unique_ptr<SyntheticTransformer>> Create(DeviceContext& ctx,
                                                              const SyntheticShape& shape,
                                                              int64_t max_tokens, uint64_t seed);
  virtual ~SyntheticTransformer() = default;

  // Prefills one packed batch of requests with the given prompt lengths (random token ids from
  // `seed`), returning the device timing. logits_out (optional) receives f32 [batch, vocab].
  // time_attention adds events around every attention launch, every DeltaNet core (conv to gated
  // norm) and every MoE (a little slower; off for TTFT).
  virtual Result<PrefillTiming> Prefill(const std::vector<int64_t>& prompt_lengths,
                                        const UniPrefillRun& uniprefill, uint64_t seed,
                                        bool time_attention, std::vector<float>* logits_out) = 0;

  virtual const SyntheticShape& shape() const = 0;
  virtual int64_t weight_bytes() const = 0;
};

}  // namespace uniprefill
