// Llama 3.x: its configuration and tensor names, as a model definition.
#include "model/llama.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "model/hf_checkpoint.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

struct LlamaTensorNames {
  std::string embedding, output_norm, output, attn_norm, ffn_norm, q, k, v, o, gate, up, down;
  std::string Layer(const std::string& pattern, int i) const {
    std::string s = pattern;
    s.replace(s.find("{}"), 2, std::to_string(i));
    return s;
  }
};

LlamaTensorNames GgufNames() {
  return {"token_embd.weight", "output_norm.weight", "output.weight",
          "blk.{}.attn_norm.weight", "blk.{}.ffn_norm.weight", "blk.{}.attn_q.weight",
          "blk.{}.attn_k.weight", "blk.{}.attn_v.weight", "blk.{}.attn_output.weight",
          "blk.{}.ffn_gate.weight", "blk.{}.ffn_up.weight", "blk.{}.ffn_down.weight"};
}

LlamaTensorNames HfNames() {
  return {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
          "model.layers.{}.input_layernorm.weight", "model.layers.{}.post_attention_layernorm.weight",
          "model.layers.{}.self_attn.q_proj.weight", "model.layers.{}.self_attn.k_proj.weight",
          "model.layers.{}.self_attn.v_proj.weight", "model.layers.{}.self_attn.o_proj.weight",
          "model.layers.{}.mlp.gate_proj.weight", "model.layers.{}.mlp.up_proj.weight",
          "model.layers.{}.mlp.down_proj.weight"};
}

// Fills `d` (config set) with the Llama weights of `src`, named by `n`.
Status LoadLlamaWeights(DeviceContext& ctx, const WeightSource& src, const LlamaTensorNames& n,
                        const std::vector<float>& inv_freq, ops::RopeStyle rope_style,
                        const LoadOptions& options, ModelDefinition& d) {
  ModelConfig& c = d.config;
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden;
  const int64_t V = c.vocab_size;
  UP_ASSIGN_OR_RETURN(d.token_embedding, LoadLinear(ctx, src, {n.embedding}, {{V, H}}, false));
  UP_ASSIGN_OR_RETURN(d.output_norm, LoadVector(src, n.output_norm, H));
  c.tied_embeddings = !src.Has(n.output);
  UP_ASSIGN_OR_RETURN(d.head, LoadLinear(ctx, src, {c.tied_embeddings ? n.embedding : n.output},
                                         {{V, H}}, /*make_f32_copy=*/false));
  d.head.int16_decode_activations = !options.f32_decode;
  d.head.int8_rows_activations = options.int8_rows_activations && !options.f32_decode;
  d.head.bf16_prefill_gemm = options.bf16_prefill_gemm && !options.f32_decode;
  const bool f32 = options.f32_prefill_weights;
  const bool int16_gemm = options.int16_prefill_gemm && !options.f32_decode;
  d.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition& L = d.layers[i];
    auto name = [&](const std::string& p) { return n.Layer(p, i); };
    UP_ASSIGN_OR_RETURN(L.mixer_norm, LoadVector(src, name(n.attn_norm), H));
    UP_ASSIGN_OR_RETURN(L.ffn_norm, LoadVector(src, name(n.ffn_norm), H));
    AttentionWeights& a = L.attention.emplace();
    UP_ASSIGN_OR_RETURN(a.q, LoadLinear(ctx, src, {name(n.q)}, {{Q, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(a.k, LoadLinear(ctx, src, {name(n.k)}, {{KV, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(a.v, LoadLinear(ctx, src, {name(n.v)}, {{KV, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(a.o, LoadLinear(ctx, src, {name(n.o)}, {{H, Q}}, f32, int16_gemm));
    GatedFfnWeights& ffn = L.ffn.emplace();
    UP_ASSIGN_OR_RETURN(ffn.gate_up, LoadLinear(ctx, src, {name(n.gate), name(n.up)},
                                                {{F, H}, {F, H}}, f32, int16_gemm));
    UP_ASSIGN_OR_RETURN(ffn.down, LoadLinear(ctx, src, {name(n.down)}, {{H, F}}, f32, int16_gemm));
    ffn.activation = ops::Activation::kSilu;
    for (ops::LinearWeight* w : {&a.q, &a.k, &a.v, &a.o, &ffn.gate_up, &ffn.down}) {
      d.host_copy_bytes += w->f32.size();
      w->int16_decode_activations = !options.f32_decode;
      w->int8_rows_activations = options.int8_rows_activations && !options.f32_decode;
      w->bf16_prefill_gemm = options.bf16_prefill_gemm && !options.f32_decode;
    }
    a.rope_inv_freq = inv_freq;
    a.rot_dims = c.head_dim;
    a.rope_style = rope_style;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = c.attention_scale;
    a.norm_eps = c.rms_eps;
    if (options.progress) options.progress(i + 1, c.n_layers);
  }
  return OkStatus();
}

Status CheckShape(const ModelConfig& c, const std::string& where) {
  if (c.n_layers < 1 || c.hidden < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
      c.n_heads % c.n_kv_heads != 0 || c.head_dim < 2 || c.head_dim % 2 != 0 ||
      c.ffn_hidden < 1 || c.vocab_size < 1) {
    return InvalidArgument(where + ": unsupported llama shape (layers " +
                           std::to_string(c.n_layers) + ", hidden " + std::to_string(c.hidden) +
                           ", heads " + std::to_string(c.n_heads) + "/" +
                           std::to_string(c.n_kv_heads) + ", head_dim " +
                           std::to_string(c.head_dim) + ")");
  }
  return OkStatus();
}

}  // namespace

std::vector<float> Llama3RopeInvFreq(double theta, int dims, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_positions) {
  std::vector<float> inv = ops::RopeInvFreq(theta, dims);
  const double low_wavelen = original_max_positions / low_freq_factor;
  const double high_wavelen = original_max_positions / high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / factor);
    } else {
      const double s = (original_max_positions / wavelen - low_freq_factor) /
                       (high_freq_factor - low_freq_factor);
      f = static_cast<float>((1.0 - s) * f / factor + s * f);
    }
  }
  return inv;
}

Result<ModelDefinition> LoadLlama(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options) {
  const gguf::GgufFile& f = *file;
  ModelConfig c;
  c.architecture = "llama";
  auto name = f.GetString("general.name");
  c.name = name.ok() ? *name : "llama";
  auto need = [&](const char* key, int* out) -> Status {
    auto v = f.GetInt(std::string("llama.") + key);
    if (!v.ok()) return DataLoss("model metadata: " + v.status().message());
    if (*v < 1 || *v > (1 << 24)) return DataLoss(std::string("model metadata: llama.") + key + " out of range");
    *out = static_cast<int>(*v);
    return OkStatus();
  };
  UP_RETURN_IF_ERROR(need("block_count", &c.n_layers));
  UP_RETURN_IF_ERROR(need("embedding_length", &c.hidden));
  UP_RETURN_IF_ERROR(need("feed_forward_length", &c.ffn_hidden));
  UP_RETURN_IF_ERROR(need("attention.head_count", &c.n_heads));
  UP_RETURN_IF_ERROR(need("attention.head_count_kv", &c.n_kv_heads));
  UP_RETURN_IF_ERROR(need("context_length", &c.context_length));
  c.head_dim = c.hidden / c.n_heads;
  auto key_len = f.GetInt("llama.attention.key_length");
  if (key_len.ok()) c.head_dim = static_cast<int>(*key_len);
  auto eps = f.GetFloat("llama.attention.layer_norm_rms_epsilon");
  c.rms_eps = eps.ok() ? static_cast<float>(*eps) : 1e-5f;
  auto theta = f.GetFloat("llama.rope.freq_base");
  c.rope_theta_global = theta.ok() ? *theta : 10000.0;
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) {
    return NotFound("model file " + f.path() + " lacks a 2-D token_embd.weight");
  }
  c.vocab_size = static_cast<int>(embd->dims[1]);
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.layer_kinds.assign(c.n_layers, LayerKind::kFullAttention);
  UP_RETURN_IF_ERROR(CheckShape(c, f.path()));
  std::vector<float> inv = ops::RopeInvFreq(c.rope_theta_global, c.head_dim);
  // llama.cpp stores the llama3 scaling as per-frequency divisors in rope_freqs.weight.
  if (const gguf::TensorInfo* rf = f.FindTensor("rope_freqs.weight")) {
    if (rf->numel() != c.head_dim / 2 || rf->type != DType::kF32) {
      return DataLoss("rope_freqs.weight in " + f.path() + " should be f32 [" +
                      std::to_string(c.head_dim / 2) + "]");
    }
    const float* div = reinterpret_cast<const float*>(rf->data);
    for (int i = 0; i < c.head_dim / 2; ++i) inv[i] /= div[i];
  }
  ModelDefinition d;
  d.config = c;
  // The config is read; the model keeps the file for its weights only (the tokenizer was built
  // from the vocabulary before the file came here).
  file->ReleaseArrays();
  std::shared_ptr<gguf::GgufFile> owner(std::move(file));
  UP_RETURN_IF_ERROR(LoadLlamaWeights(ctx, *GgufWeightSource(*owner), GgufNames(), inv,
                                      ops::RopeStyle::kAdjacent, options, d));
  d.mapped_files.push_back(owner->mapping());
  d.owners.push_back(std::move(owner));
  return d;
}

Result<ModelDefinition> LoadLlama(const HfConfig& hf, std::shared_ptr<void> owner,
                                         const WeightSource& src, DeviceContext& ctx,
                                         const LoadOptions& options) {
  HfCommonDefaults defaults;
  defaults.rms_eps = 1e-5;
  UP_ASSIGN_OR_RETURN(ModelConfig c, ReadHfCommonConfig(hf, "llama", defaults));
  c.name = "llama (" + src.path() + ")";
  const double theta = c.rope_theta_global;
  UP_ASSIGN_OR_RETURN(bool tied, hf.GetBoolOr("tie_word_embeddings", false));
  c.layer_kinds.assign(c.n_layers, LayerKind::kFullAttention);
  UP_RETURN_IF_ERROR(CheckShape(c, hf.Where()));
  std::vector<float> inv = ops::RopeInvFreq(theta, c.head_dim);
  if (hf.Has("rope_scaling") && !hf.json().at("rope_scaling").is_null()) {
    UP_ASSIGN_OR_RETURN(HfConfig rs, hf.Sub("rope_scaling"));
    UP_ASSIGN_OR_RETURN(std::string type, rs.GetStringOr("rope_type", ""));
    if (type.empty()) {
      UP_ASSIGN_OR_RETURN(type, rs.GetStringOr("type", "default"));
    }
    if (type == "llama3") {
      UP_ASSIGN_OR_RETURN(double factor, rs.GetFloat("factor"));
      UP_ASSIGN_OR_RETURN(double lo, rs.GetFloatOr("low_freq_factor", 1.0));
      UP_ASSIGN_OR_RETURN(double hi, rs.GetFloatOr("high_freq_factor", 4.0));
      UP_ASSIGN_OR_RETURN(double orig, rs.GetFloatOr("original_max_position_embeddings", 8192));
      inv = Llama3RopeInvFreq(theta, c.head_dim, factor, lo, hi, orig);
    } else if (type == "linear") {
      UP_ASSIGN_OR_RETURN(double factor, rs.GetFloat("factor"));
      for (float& f : inv) f = static_cast<float>(f / factor);
    } else if (type != "default") {
      return Unimplemented(hf.Where() + ": rope_scaling type '" + type +
                           "' is not supported (llama3, linear)");
    }
  }
  LlamaTensorNames names = HfNames();
  if (tied) names.output = "(tied)";
  ModelDefinition d;
  d.config = c;
  UP_RETURN_IF_ERROR(LoadLlamaWeights(ctx, src, names, inv, ops::RopeStyle::kNeox, options, d));
  d.owners.push_back(std::move(owner));
  return d;
}

}  // namespace uniprefill
