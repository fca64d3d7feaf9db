// SyntheticTransformer: an attention-family model (Llama / Gemma 3 shapes) with random bf16
// weights made on the GPU from a shape and a seed, no files, for prefill benchmarks of 8B-12B
// class models (issue 6: "synthetic weights in memory"). Its prefill is the real CUDA layer stack
// (embedding, fused add + RMSNorm, fused QKV GEMM, optional q/k-norm, RoPE, varlen flash attention
// with sliding windows, O projection, gated FFN, final norm, logits of each request's last token)
// over a packed batch, with UniPrefill at the shape's drop layers: device scoring, selection and
// compaction; the kept counts come back to the host once per drop layer (one small sync, timed in
// PrefillTiming::uniprefill_ms).
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

  bool IsFullAttention(int layer) const {
    return sliding_window == 0 || (full_every > 0 && (layer + 1) % full_every == 0);
  }
  // Parameters (weights) and the dense prefill FLOPs of one request of n tokens (linear layers +
  // causal attention, windows counted; the logits GEMM of the last token included).
  int64_t Parameters() const;
  double DensePrefillFlops(int64_t n_tokens) const;
  double LinearPrefillFlops(int64_t n_tokens) const;  // the linear layers' part of it
};

// "llama-3.1-8b", "gemma-3-12b", or "tiny" (a small shape for tests); an error lists them.
Result<SyntheticShape> SyntheticShapeByName(const std::string& name);

struct PrefillTiming {
  double total_ms = 0;       // device time of the whole prefill (events), host syncs included
  double uniprefill_ms = 0;  // scoring + selection + count sync + compaction, all drop layers
  double attention_ms = 0;   // flash attention kernels, all layers (measured only if asked)
  std::vector<std::vector<int64_t>> kept;  // [request][drop layer] alive tokens after the drop
};

struct UniPrefillRun {
  bool enabled = false;
  sparsity::SelectionParams selection;  // mode, p or keep ratio, G, S, n
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
  // time_attention adds events around every attention launch (a little slower; off for TTFT).
  virtual Result<PrefillTiming> Prefill(const std::vector<int64_t>& prompt_lengths,
                                        const UniPrefillRun& uniprefill, uint64_t seed,
                                        bool time_attention, std::vector<float>* logits_out) = 0;

  virtual const SyntheticShape& shape() const = 0;
  virtual int64_t weight_bytes() const = 0;
};

}  // namespace uniprefill
