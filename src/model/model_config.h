// ModelConfig: the architecture hyper-parameters a forward needs, read from a model file's
// metadata and validated once, so layer code never re-reads metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uniprefill {

enum class LayerKind { kFullAttention, kSlidingAttention, kLinearAttention };

struct ModelConfig {
  std::string architecture;  // e.g. "gemma3"
  std::string name;          // general.name, for display
  int n_layers = 0;
  int hidden = 0;
  int ffn_hidden = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int context_length = 0;
  int sliding_window = 0;    // W: key k visible to query q when q - W < k <= q
  float rms_eps = 1e-6f;
  double rope_theta_global = 10000.0;
  double rope_theta_local = 10000.0;
  float rope_scale_global = 1.0f;  // linear rope scaling on full layers (positions / factor)
  float embedding_scale = 1.0f;
  float attention_scale = 1.0f;
  bool tied_embeddings = true;
  std::vector<LayerKind> layer_kinds;
  // Linear-attention (Gated DeltaNet) layers, where layer_kinds has any.
  int linear_k_heads = 0, linear_v_heads = 0, linear_k_dim = 0, linear_v_dim = 0;
  int linear_conv_kernel = 0;
  // MoE layers (every layer of a family that has them): routed experts, each of ffn_hidden
  // columns, and the shared expert's columns. Tensor parallel: n_experts stays the model's (every
  // rank routes over all of them); shared_ffn_hidden is the rank's share.
  int n_experts = 0, shared_ffn_hidden = 0;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int linear_conv_dim() const {
    return 2 * linear_k_heads * linear_k_dim + linear_v_heads * linear_v_dim;
  }
};

}  // namespace uniprefill
