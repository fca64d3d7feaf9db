// Qwen3-Next: its configuration and tensor names, as a model definition.
#include "model/qwen3_next.h"

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/dequant.h"
#include "model/blocks/attention_block.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"
#include "model/hf_checkpoint.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

// Shapes the config does not hold.
struct Qwen3NextExtras {
  int rot_dims = 0, n_experts = 0, top_k = 0, moe_ffn = 0, shared_ffn = 0;
  bool norm_topk = true;
};

// Fills `d` (config set) with the weights of a Hugging Face checkpoint.
Status LoadQwen3NextWeights(DeviceContext& ctx, const WeightSource& src, const Qwen3NextExtras& x,
                            const LoadOptions& options, ModelDefinition& d) {
  ModelConfig& c = d.config;
  // A linear weight, counted in host_copy_bytes, with the decode activation choice applied.
  const bool int16_gemm = options.int16_prefill_gemm && !options.f32_decode;
  auto Linear = [&](const std::vector<std::string>& names,
                    const std::vector<std::vector<int64_t>>& shapes,
                    bool f32) -> Result<ops::LinearWeight> {
    UP_ASSIGN_OR_RETURN(ops::LinearWeight w, LoadLinear(ctx, src, names, shapes, f32,
                                                        int16_gemm));
    d.host_copy_bytes += w.f32.size();
    w.int16_decode_activations = !options.f32_decode;
    w.int8_rows_activations = options.int8_rows_activations && !options.f32_decode;
    w.bf16_prefill_gemm = options.bf16_prefill_gemm && !options.f32_decode;
    return w;
  };
  const int64_t H = c.hidden, V = c.vocab_size, D = c.head_dim;
  const int64_t Hq = c.n_heads, Hkv = c.n_kv_heads;
  UP_ASSIGN_OR_RETURN(d.token_embedding,
                      LoadLinear(ctx, src, {"model.embed_tokens.weight"}, {{V, H}}, false));
  UP_ASSIGN_OR_RETURN(d.output_norm, LoadVector(src, "model.norm.weight", H, 1.0f));
  const bool tied = !src.Has("lm_head.weight");
  c.tied_embeddings = tied;
  const std::string head_name = tied ? "model.embed_tokens.weight" : "lm_head.weight";
  UP_ASSIGN_OR_RETURN(d.head, LoadLinear(ctx, src, {head_name}, {{V, H}}, false));
  d.head.int16_decode_activations = !options.f32_decode;
  d.head.int8_rows_activations = options.int8_rows_activations && !options.f32_decode;
  d.head.bf16_prefill_gemm = options.bf16_prefill_gemm && !options.f32_decode;
  const bool f32 = options.f32_prefill_weights;
  const std::vector<float> inv_freq = ops::RopeInvFreq(c.rope_theta_global, x.rot_dims);
  d.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerDefinition& L = d.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    UP_ASSIGN_OR_RETURN(L.mixer_norm, LoadVector(src, p + "input_layernorm.weight", H, 1.0f));
    UP_ASSIGN_OR_RETURN(L.ffn_norm,
                        LoadVector(src, p + "post_attention_layernorm.weight", H, 1.0f));
    if (c.layer_kinds[i] == LayerKind::kLinearAttention) {
      GatedDeltaNetWeights& g = L.delta.emplace();
      g.n_k_heads = c.linear_k_heads;
      g.n_v_heads = c.linear_v_heads;
      g.d_k = c.linear_k_dim;
      g.d_v = c.linear_v_dim;
      g.conv_kernel = c.linear_conv_kernel;
      g.eps = c.rms_eps;
      const std::string q = p + "linear_attn.";
      const int64_t qkvz = 2 * g.key_dim() + 2 * g.value_dim();
      UP_ASSIGN_OR_RETURN(g.in_proj_qkvz,
                          Linear({q + "in_proj_qkvz.weight"}, {{qkvz, H}}, f32));
      UP_ASSIGN_OR_RETURN(g.in_proj_ba, Linear({q + "in_proj_ba.weight"},
                                               {{2 * g.n_v_heads, H}}, f32));
      UP_ASSIGN_OR_RETURN(g.out_proj, Linear({q + "out_proj.weight"},
                                             {{H, g.value_dim()}}, f32));
      UP_ASSIGN_OR_RETURN(TensorView conv,
                          src.Get(q + "conv1d.weight", {g.conv_dim(), 1, g.conv_kernel}));
      g.conv_weight.resize(static_cast<size_t>(g.conv_dim()) * g.conv_kernel);
      UP_RETURN_IF_ERROR(Dequantize(conv.dtype, conv.data, g.conv_weight.data(),
                                    static_cast<int64_t>(g.conv_weight.size())));
      UP_ASSIGN_OR_RETURN(g.dt_bias, LoadVector(src, q + "dt_bias", g.n_v_heads));
      UP_ASSIGN_OR_RETURN(g.a_log, LoadVector(src, q + "A_log", g.n_v_heads));
      UP_ASSIGN_OR_RETURN(g.norm, LoadVector(src, q + "norm.weight", g.d_v));  // plain weight
    } else {
      AttentionWeights& a = L.attention.emplace();
      const std::string q = p + "self_attn.";
      UP_ASSIGN_OR_RETURN(a.q, Linear({q + "q_proj.weight"}, {{2 * Hq * D, H}}, f32));
      UP_ASSIGN_OR_RETURN(a.k, Linear({q + "k_proj.weight"}, {{Hkv * D, H}}, f32));
      UP_ASSIGN_OR_RETURN(a.v, Linear({q + "v_proj.weight"}, {{Hkv * D, H}}, f32));
      UP_ASSIGN_OR_RETURN(a.o, Linear({q + "o_proj.weight"}, {{H, Hq * D}}, f32));
      UP_ASSIGN_OR_RETURN(a.q_norm, LoadVector(src, q + "q_norm.weight", D, 1.0f));
      UP_ASSIGN_OR_RETURN(a.k_norm, LoadVector(src, q + "k_norm.weight", D, 1.0f));
      a.rope_inv_freq = inv_freq;
      a.rot_dims = x.rot_dims;
      a.rope_style = ops::RopeStyle::kNeox;
      a.n_heads = c.n_heads;
      a.n_kv_heads = c.n_kv_heads;
      a.head_dim = c.head_dim;
      a.scale = c.attention_scale;
      a.norm_eps = c.rms_eps;
      a.gated_output = true;
    }
    MoeWeights& m = L.moe.emplace();
    const std::string e = p + "mlp.";
    m.n_experts = x.n_experts;
    m.top_k = x.top_k;
    m.norm_topk_prob = x.norm_topk;
    UP_ASSIGN_OR_RETURN(m.router, Linear({e + "gate.weight"}, {{x.n_experts, H}}, f32));
    for (int j = 0; j < x.n_experts; ++j) {
      const std::string ex = e + "experts." + std::to_string(j) + ".";
      UP_ASSIGN_OR_RETURN(ops::LinearWeight gu,
                          Linear({ex + "gate_proj.weight", ex + "up_proj.weight"},
                                 {{x.moe_ffn, H}, {x.moe_ffn, H}}, f32));
      UP_ASSIGN_OR_RETURN(ops::LinearWeight dn, Linear({ex + "down_proj.weight"},
                                                       {{H, x.moe_ffn}}, f32));
      m.expert_gate_up.push_back(std::move(gu));
      m.expert_down.push_back(std::move(dn));
    }
    const std::string sh = e + "shared_expert.";
    UP_ASSIGN_OR_RETURN(m.shared_gate_up,
                        Linear({sh + "gate_proj.weight", sh + "up_proj.weight"},
                               {{x.shared_ffn, H}, {x.shared_ffn, H}}, f32));
    UP_ASSIGN_OR_RETURN(m.shared_down, Linear({sh + "down_proj.weight"},
                                              {{H, x.shared_ffn}}, f32));
    UP_ASSIGN_OR_RETURN(m.shared_expert_gate, Linear({e + "shared_expert_gate.weight"},
                                                     {{1, H}}, f32));
    if (options.progress) options.progress(i + 1, c.n_layers);
  }
  return OkStatus();
}

}  // namespace

Result<ModelDefinition> LoadQwen3Next(const HfConfig& hf, std::shared_ptr<void> owner,
                                             const WeightSource& src, DeviceContext& ctx,
                                             const LoadOptions& options) {
  HfCommonDefaults defaults;
  defaults.context = 262144;
  defaults.rope_theta = 1e7;
  defaults.ffn = false;  // experts: moe_intermediate_size
  UP_ASSIGN_OR_RETURN(ModelConfig c, ReadHfCommonConfig(hf, "qwen3_next", defaults));
  c.name = "qwen3_next (" + src.path() + ")";
  const int64_t heads = c.n_heads, kv_heads = c.n_kv_heads, head_dim = c.head_dim;
  auto geti = [&](const char* k) { return hf.GetInt(k); };
  UP_ASSIGN_OR_RETURN(int64_t interval, hf.GetIntOr("full_attention_interval", 4));
  UP_ASSIGN_OR_RETURN(int64_t lk, geti("linear_num_key_heads"));
  UP_ASSIGN_OR_RETURN(int64_t lv, geti("linear_num_value_heads"));
  UP_ASSIGN_OR_RETURN(int64_t dk, geti("linear_key_head_dim"));
  UP_ASSIGN_OR_RETURN(int64_t dv, geti("linear_value_head_dim"));
  UP_ASSIGN_OR_RETURN(int64_t kernel, hf.GetIntOr("linear_conv_kernel_dim", 4));
  UP_ASSIGN_OR_RETURN(int64_t experts, geti("num_experts"));
  UP_ASSIGN_OR_RETURN(int64_t top_k, geti("num_experts_per_tok"));
  UP_ASSIGN_OR_RETURN(bool norm_topk, hf.GetBoolOr("norm_topk_prob", true));
  UP_ASSIGN_OR_RETURN(int64_t moe_ffn, geti("moe_intermediate_size"));
  UP_ASSIGN_OR_RETURN(int64_t shared_ffn, geti("shared_expert_intermediate_size"));
  UP_ASSIGN_OR_RETURN(double partial, hf.GetFloatOr("partial_rotary_factor", 0.25));
  if (hf.Has("rope_scaling") && !hf.json().at("rope_scaling").is_null()) {
    return Unimplemented(hf.Where() + ": rope_scaling is not supported for qwen3_next");
  }
  if (hf.Has("mlp_only_layers")) {
    UP_ASSIGN_OR_RETURN(std::vector<int64_t> dense, hf.GetIntList("mlp_only_layers"));
    if (!dense.empty()) {
      return Unimplemented(hf.Where() + ": mlp_only_layers (dense FFN layers) is not supported");
    }
  }
  c.linear_k_heads = static_cast<int>(lk);
  c.linear_v_heads = static_cast<int>(lv);
  c.linear_k_dim = static_cast<int>(dk);
  c.linear_v_dim = static_cast<int>(dv);
  c.linear_conv_kernel = static_cast<int>(kernel);
  c.ffn_hidden = static_cast<int>(moe_ffn);
  c.n_experts = static_cast<int>(experts);
  c.shared_ffn_hidden = static_cast<int>(shared_ffn);
  const int rot_dims = static_cast<int>(head_dim * partial);
  if (c.n_layers < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || lk < 1 ||
      lv % lk != 0 || rot_dims < 2 || rot_dims % 2 != 0 || interval < 1 || top_k < 1 ||
      top_k > experts) {
    return InvalidArgument(hf.Where() + ": unsupported qwen3_next shape");
  }
  for (int i = 0; i < c.n_layers; ++i) {
    c.layer_kinds.push_back((i + 1) % interval == 0 ? LayerKind::kFullAttention
                                                    : LayerKind::kLinearAttention);
  }
  Qwen3NextExtras x;
  x.rot_dims = rot_dims;
  x.n_experts = static_cast<int>(experts);
  x.top_k = static_cast<int>(top_k);
  x.norm_topk = norm_topk;
  x.moe_ffn = static_cast<int>(moe_ffn);
  x.shared_ffn = static_cast<int>(shared_ffn);
  ModelDefinition d;
  d.config = c;
  UP_RETURN_IF_ERROR(LoadQwen3NextWeights(ctx, src, x, options, d));
  d.owners.push_back(std::move(owner));
  return d;
}

}  // namespace uniprefill
