// Gemma 3 (sliding-window / full-attention hybrid): its configuration and weights, as a model
// definition.
#include "model/gemma3.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "model/hf_checkpoint.h"
#include "model/weight_source.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

// Fills `d` (config set) with the weights of `src` named by `n`; norm_offset: 0 for GGUF (the +1 is
// baked in), 1 for Hugging Face.
Status LoadGemma3Weights(DeviceContext& ctx, const WeightSource& src, const Gemma3TensorNames& n,
                         float norm_offset, const LoadOptions& options, ModelDefinition& d) {
  ModelConfig& c = d.config;
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden;
  const int64_t D = c.head_dim, V = c.vocab_size;
  UP_ASSIGN_OR_RETURN(d.token_embedding, LoadLinear(ctx, src, {n.embedding}, {{V, H}}, false));
  UP_ASSIGN_OR_RETURN(d.output_norm, LoadVector(src, n.output_norm, H, norm_offset));
  c.tied_embeddings = !src.Has(n.output);
  UP_ASSIGN_OR_RETURN(d.head, LoadLinear(ctx, src, {c.tied_embeddings ? n.embedding : n.output},
                                        {{V, H}}, /*make_f32_copy=*/false));
  d.head.int16_decode_activations = !options.f32_decode;
  d.head.int8_rows_activations = options.int8_rows_activations && !options.f32_decode;
  d.head.bf16_prefill_gemm = options.bf16_prefill_gemm && !options.f32_decode;

  d.layers.resize(c.n_layers);
  const bool f32 = options.f32_prefill_weights;
  const bool int16_gemm = options.int16_prefill_gemm && !options.f32_decode;
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition& L = d.layers[i];
    auto name = [&](const std::string& pattern) { return n.Layer(pattern, i); };
    UP_ASSIGN_OR_RETURN(L.mixer_norm, LoadVector(src, name(n.attn_norm), H, norm_offset));
    UP_ASSIGN_OR_RETURN(L.post_mixer_norm, LoadVector(src, name(n.post_attn_norm), H, norm_offset));
    UP_ASSIGN_OR_RETURN(L.ffn_norm, LoadVector(src, name(n.ffn_norm), H, norm_offset));
    UP_ASSIGN_OR_RETURN(L.post_ffn_norm, LoadVector(src, name(n.post_ffn_norm), H, norm_offset));
    AttentionWeights& a = L.attention.emplace();
    GatedFfnWeights& ffn = L.ffn.emplace();
    UP_ASSIGN_OR_RETURN(a.q_norm, LoadVector(src, name(n.q_norm), D, norm_offset));
    UP_ASSIGN_OR_RETURN(a.k_norm, LoadVector(src, name(n.k_norm), D, norm_offset));
    UP_ASSIGN_OR_RETURN(a.q, LoadLinear(ctx, src, {name(n.q)}, {{Q, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(a.k, LoadLinear(ctx, src, {name(n.k)}, {{KV, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(a.v, LoadLinear(ctx, src, {name(n.v)}, {{KV, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(a.o, LoadLinear(ctx, src, {name(n.o)}, {{H, Q}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(ffn.gate_up, LoadLinear(ctx, src, {name(n.gate), name(n.up)},
                                                  {{F, H}, {F, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(ffn.down, LoadLinear(ctx, src, {name(n.down)}, {{H, F}}, f32, int16_gemm));
    ffn.activation = ops::Activation::kGeluTanh;
    for (ops::LinearWeight* w : {&a.q, &a.k, &a.v, &a.o, &ffn.gate_up, &ffn.down}) {
      d.host_copy_bytes += w->f32.size();
      w->int16_decode_activations = !options.f32_decode;
      w->int8_rows_activations = options.int8_rows_activations && !options.f32_decode;
      w->bf16_prefill_gemm = options.bf16_prefill_gemm && !options.f32_decode;
    }
    const bool global = c.layer_kinds[i] == LayerKind::kFullAttention;
    a.rope_inv_freq = ops::RopeInvFreq(global ? c.rope_theta_global : c.rope_theta_local, D);
    if (global && c.rope_scale_global != 1.0f) {
      for (float& f : a.rope_inv_freq) f /= c.rope_scale_global;
    }
    a.rot_dims = static_cast<int>(D);
    a.rope_style = ops::RopeStyle::kNeox;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = c.attention_scale;
    a.norm_eps = c.rms_eps;
    a.window = global ? 0 : c.sliding_window;
    if (options.progress) options.progress(i + 1, c.n_layers);
  }
  return OkStatus();
}

}  // namespace

std::string Gemma3TensorNames::Layer(const std::string& pattern, int i) const {
  std::string s = pattern;
  const size_t at = s.find("{}");
  if (at != std::string::npos) s.replace(at, 2, std::to_string(i));
  return s;
}

Gemma3TensorNames Gemma3TensorNames::Gguf() {
  Gemma3TensorNames n;
  n.embedding = "token_embd.weight";
  n.output_norm = "output_norm.weight";
  n.output = "output.weight";
  n.attn_norm = "blk.{}.attn_norm.weight";
  n.post_attn_norm = "blk.{}.post_attention_norm.weight";
  n.ffn_norm = "blk.{}.ffn_norm.weight";
  n.post_ffn_norm = "blk.{}.post_ffw_norm.weight";
  n.q_norm = "blk.{}.attn_q_norm.weight";
  n.k_norm = "blk.{}.attn_k_norm.weight";
  n.q = "blk.{}.attn_q.weight";
  n.k = "blk.{}.attn_k.weight";
  n.v = "blk.{}.attn_v.weight";
  n.o = "blk.{}.attn_output.weight";
  n.gate = "blk.{}.ffn_gate.weight";
  n.up = "blk.{}.ffn_up.weight";
  n.down = "blk.{}.ffn_down.weight";
  return n;
}

Gemma3TensorNames Gemma3TensorNames::HuggingFace() {
  Gemma3TensorNames n;
  n.embedding = "model.embed_tokens.weight";
  n.output_norm = "model.norm.weight";
  n.output = "lm_head.weight";
  n.attn_norm = "model.layers.{}.input_layernorm.weight";
  n.post_attn_norm = "model.layers.{}.post_attention_layernorm.weight";
  n.ffn_norm = "model.layers.{}.pre_feedforward_layernorm.weight";
  n.post_ffn_norm = "model.layers.{}.post_feedforward_layernorm.weight";
  n.q_norm = "model.layers.{}.self_attn.q_norm.weight";
  n.k_norm = "model.layers.{}.self_attn.k_norm.weight";
  n.q = "model.layers.{}.self_attn.q_proj.weight";
  n.k = "model.layers.{}.self_attn.k_proj.weight";
  n.v = "model.layers.{}.self_attn.v_proj.weight";
  n.o = "model.layers.{}.self_attn.o_proj.weight";
  n.gate = "model.layers.{}.mlp.gate_proj.weight";
  n.up = "model.layers.{}.mlp.up_proj.weight";
  n.down = "model.layers.{}.mlp.down_proj.weight";
  return n;
}

Result<ModelConfig> Gemma3ConfigFromGguf(const gguf::GgufFile& f) {
  ModelConfig c;
  c.architecture = "gemma3";
  auto name = f.GetString("general.name");
  c.name = name.ok() ? name.value() : "gemma3";
  auto need_int = [&](const char* key, int* out, int64_t lo, int64_t hi) -> Status {
    auto v = f.GetInt(std::string("gemma3.") + key);
    if (!v.ok()) return DataLoss("model metadata: " + v.status().message());
    if (*v < lo || *v > hi) {
      return DataLoss("model metadata: gemma3." + std::string(key) + " = " +
                      std::to_string(*v) + " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    }
    *out = static_cast<int>(*v);
    return OkStatus();
  };
  UP_RETURN_IF_ERROR(need_int("block_count", &c.n_layers, 1, 1024));
  UP_RETURN_IF_ERROR(need_int("embedding_length", &c.hidden, 1, 1 << 16));
  UP_RETURN_IF_ERROR(need_int("feed_forward_length", &c.ffn_hidden, 1, 1 << 18));
  UP_RETURN_IF_ERROR(need_int("attention.head_count", &c.n_heads, 1, 1024));
  UP_RETURN_IF_ERROR(need_int("attention.head_count_kv", &c.n_kv_heads, 1, 1024));
  UP_RETURN_IF_ERROR(need_int("attention.key_length", &c.head_dim, 2, 1024));
  UP_RETURN_IF_ERROR(need_int("context_length", &c.context_length, 1, 1 << 24));
  UP_RETURN_IF_ERROR(need_int("attention.sliding_window", &c.sliding_window, 1, 1 << 24));
  int value_len = c.head_dim;
  UP_RETURN_IF_ERROR(need_int("attention.value_length", &value_len, 1, 1024));
  if (value_len != c.head_dim || c.n_heads % c.n_kv_heads != 0 || c.head_dim % 2 != 0) {
    return Unimplemented("gemma3 with key_length " + std::to_string(c.head_dim) +
                         ", value_length " + std::to_string(value_len) + ", " +
                         std::to_string(c.n_heads) + " heads and " +
                         std::to_string(c.n_kv_heads) + " kv heads is not supported");
  }
  auto eps = f.GetFloat("gemma3.attention.layer_norm_rms_epsilon");
  c.rms_eps = eps.ok() ? static_cast<float>(*eps) : 1e-6f;
  auto theta = f.GetFloat("gemma3.rope.freq_base");
  c.rope_theta_global = theta.ok() ? *theta : 1e6;
  c.rope_theta_local = 1e4;  // not in GGUF metadata; fixed for Gemma 3 (as in llama.cpp)
  auto scaling = f.GetString("gemma3.rope.scaling.type");
  if (scaling.ok() && *scaling == "linear") {
    auto factor = f.GetFloat("gemma3.rope.scaling.factor");
    if (factor.ok() && *factor > 0) c.rope_scale_global = static_cast<float>(*factor);
  } else if (scaling.ok() && *scaling != "none") {
    return Unimplemented("gemma3 rope scaling '" + *scaling + "' is not supported (only linear)");
  }
  auto tokens = f.Find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::kArray) {
    return DataLoss("model metadata lacks the tokenizer.ggml.tokens array");
  }
  c.vocab_size = static_cast<int>(std::get<gguf::Array>(tokens->data).elements.size());
  c.embedding_scale = std::sqrt(static_cast<float>(c.hidden));
  // Gemma 3 scales queries by query_pre_attn_scalar^-0.5: head_dim for all sizes but 27B
  // (hidden / heads), as llama.cpp does.
  c.attention_scale = c.n_layers == 62 ? 1.0f / std::sqrt(float(c.hidden) / c.n_heads)
                                       : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int i = 0; i < c.n_layers; ++i) {
    c.layer_kinds.push_back((i + 1) % 6 == 0 ? LayerKind::kFullAttention
                                             : LayerKind::kSlidingAttention);
  }
  return c;
}

Result<ModelConfig> Gemma3ConfigFromHf(const HfConfig& hf) {
  HfCommonDefaults defaults;
  defaults.head_dim = 256;
  defaults.vocab = 262208;
  defaults.context = 131072;
  defaults.rope_theta = 1e6;
  UP_ASSIGN_OR_RETURN(ModelConfig c, ReadHfCommonConfig(hf, "gemma3", defaults));
  UP_ASSIGN_OR_RETURN(int64_t window, hf.GetIntOr("sliding_window", 4096));
  UP_ASSIGN_OR_RETURN(double local, hf.GetFloatOr("rope_local_base_freq", 1e4));
  UP_ASSIGN_OR_RETURN(double qpas, hf.GetFloatOr("query_pre_attn_scalar", double(c.head_dim)));
  for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (hf.Has(cap) && !hf.json().at(cap).is_null()) {
      return Unimplemented(hf.Where() + ": " + cap + " is set; Gemma 3 has none and this engine "
                           "does not implement it");
    }
  }
  c.sliding_window = static_cast<int>(window);
  c.rope_theta_local = local;
  c.embedding_scale = std::sqrt(static_cast<float>(c.hidden));
  c.attention_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  if (c.n_layers < 1 || c.n_heads < 1 || c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads != 0 ||
      c.head_dim % 2 != 0) {
    return InvalidArgument(hf.Where() + ": unsupported gemma3 shape");
  }
  if (hf.Has("rope_scaling") && !hf.json().at("rope_scaling").is_null()) {
    UP_ASSIGN_OR_RETURN(HfConfig rs, hf.Sub("rope_scaling"));
    UP_ASSIGN_OR_RETURN(std::string type, rs.GetStringOr("rope_type", "linear"));
    if (type != "linear") {
      return Unimplemented(hf.Where() + ": gemma3 rope scaling '" + type + "' (only linear)");
    }
    UP_ASSIGN_OR_RETURN(double factor, rs.GetFloat("factor"));
    c.rope_scale_global = static_cast<float>(factor);
  }
  if (hf.Has("layer_types")) {
    UP_ASSIGN_OR_RETURN(std::vector<std::string> types, hf.GetStringList("layer_types"));
    if (static_cast<int>(types.size()) != c.n_layers) {
      return InvalidArgument(hf.Where() + ": layer_types has " + std::to_string(types.size()) +
                             " entries for " + std::to_string(c.n_layers) + " layers");
    }
    for (const std::string& t : types) {
      if (t == "full_attention") {
        c.layer_kinds.push_back(LayerKind::kFullAttention);
      } else if (t == "sliding_attention") {
        c.layer_kinds.push_back(LayerKind::kSlidingAttention);
      } else {
        return InvalidArgument(hf.Where() + ": unknown layer type '" + t + "'");
      }
    }
  } else {
    UP_ASSIGN_OR_RETURN(int64_t pattern, hf.GetIntOr("sliding_window_pattern", 6));
    for (int i = 0; i < c.n_layers; ++i) {
      c.layer_kinds.push_back((i + 1) % pattern == 0 ? LayerKind::kFullAttention
                                                     : LayerKind::kSlidingAttention);
    }
  }
  return c;
}

Result<ModelDefinition> LoadGemma3(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                          const LoadOptions& options) {
  UP_ASSIGN_OR_RETURN(ModelConfig cfg, Gemma3ConfigFromGguf(*file));
  ModelDefinition d;
  d.config = std::move(cfg);
  // The config is read; the model keeps the file for its weights only (the tokenizer was built
  // from the vocabulary before the file came here).
  file->ReleaseArrays();
  std::shared_ptr<gguf::GgufFile> owner(std::move(file));
  UP_RETURN_IF_ERROR(LoadGemma3Weights(ctx, *GgufWeightSource(*owner), Gemma3TensorNames::Gguf(),
                                       /*norm_offset=*/0.0f, options, d));
  d.mapped_files.push_back(owner->mapping());
  d.owners.push_back(std::move(owner));
  return d;
}

Result<ModelDefinition> LoadGemma3(const ModelConfig& config, std::shared_ptr<void> owner,
                                          const WeightSource& src, DeviceContext& ctx,
                                          const LoadOptions& options) {
  ModelDefinition d;
  d.config = config;
  UP_RETURN_IF_ERROR(LoadGemma3Weights(ctx, src, Gemma3TensorNames::HuggingFace(),
                                       /*norm_offset=*/1.0f, options, d));
  d.owners.push_back(std::move(owner));
  return d;
}

}  // namespace uniprefill
