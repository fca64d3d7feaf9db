// Qwen3-Next: its configuration, tensor names and layer.
#include "model/qwen3_next.h"

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/dequant.h"
#include "model/blocks/attention_block.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

struct Qwen3NextLayer {
  std::vector<float> input_norm, post_attn_norm;  // f32 [hidden], 1 + w
  bool linear = false;
  AttentionWeights attn;       // full-attention layers
  GatedDeltaNetWeights delta;  // linear-attention layers
  MoeWeights moe;
};

class Qwen3NextModel final : public LayeredModel {
 public:
  Qwen3NextModel(ModelConfig cfg, int rot_dims, int n_experts, int top_k, bool norm_topk,
                 int moe_ffn, int shared_ffn)
      : cfg_(std::move(cfg)), rot_dims_(rot_dims), n_experts_(n_experts), top_k_(top_k),
        norm_topk_(norm_topk), moe_ffn_(moe_ffn), shared_ffn_(shared_ffn) {}

  Status Load(DeviceContext& ctx, const WeightSource& src, const LoadOptions& options);
  void KeepAlive(std::shared_ptr<void> owner) { owner_ = std::move(owner); }
  const ModelConfig& config() const override { return cfg_; }
  size_t resident_weight_bytes() const override { return resident_bytes_; }
  Result<ModelExport> Export() const override {
    ModelExport e;
    e.token_embedding = token_embd_;
    e.output_norm = &output_norm_;
    e.head = &head_;
    for (const Qwen3NextLayer& L : layers_) {
      ExportedLayer x;
      x.mixer_norm = &L.input_norm;
      x.ffn_norm = &L.post_attn_norm;  // the pre-MoE norm
      if (L.linear) {
        x.delta = &L.delta;
      } else {
        x.attention = &L.attn;
      }
      x.moe = &L.moe;
      e.layers.push_back(x);
    }
    return e;
  }

 protected:
  void Embed(DeviceContext& ctx, const int32_t* ids, TensorView x) override {
    ops::Embedding(ctx, x, token_embd_, ids, 1.0f);
  }
  Status RunLayer(DeviceContext& ctx, int i, PackedBatch& batch, const DropLayer* drop,
                  WindowMode window_mode) override;
  void Head(DeviceContext& ctx, TensorView x, TensorView logits) override {
    ops::RmsNorm(ctx, x, x, output_norm_.data(), cfg_.rms_eps);
    ops::Linear(ctx, logits, x, head_);
  }

 private:
  Result<ops::LinearWeight> Linear(DeviceContext& ctx, const WeightSource& src,
                                   std::vector<std::string> names,
                                   std::vector<std::vector<int64_t>> shapes, bool f32,
                                   const LoadOptions& options) {
    UP_ASSIGN_OR_RETURN(ops::LinearWeight w, LoadLinear(ctx, src, names, shapes, f32));
    resident_bytes_ += w.f32.size();
    w.int16_decode_activations = !options.f32_decode;
    return w;
  }

  ModelConfig cfg_;
  int rot_dims_, n_experts_, top_k_;
  bool norm_topk_;
  int moe_ffn_, shared_ffn_;
  std::shared_ptr<void> owner_;
  TensorView token_embd_;
  ops::LinearWeight head_;
  std::vector<float> output_norm_;
  std::vector<Qwen3NextLayer> layers_;
  size_t resident_bytes_ = 0;
};

Status Qwen3NextModel::Load(DeviceContext& ctx, const WeightSource& src,
                            const LoadOptions& options) {
  const int64_t H = cfg_.hidden, V = cfg_.vocab_size, D = cfg_.head_dim;
  const int64_t Hq = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  UP_ASSIGN_OR_RETURN(token_embd_, src.Get("model.embed_tokens.weight", {V, H}));
  UP_ASSIGN_OR_RETURN(output_norm_, LoadVector(src, "model.norm.weight", H, 1.0f));
  const bool tied = !src.Has("lm_head.weight");
  cfg_.tied_embeddings = tied;
  UP_ASSIGN_OR_RETURN(head_, LoadLinear(ctx, src, {tied ? "model.embed_tokens.weight" : "lm_head.weight"},
                                        {{V, H}}, false));
  head_.int16_decode_activations = !options.f32_decode;
  const bool f32 = options.f32_prefill_weights;
  const std::vector<float> inv_freq = ops::RopeInvFreq(cfg_.rope_theta_global, rot_dims_);
  layers_.resize(cfg_.n_layers);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    Qwen3NextLayer& L = layers_[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    UP_ASSIGN_OR_RETURN(L.input_norm, LoadVector(src, p + "input_layernorm.weight", H, 1.0f));
    UP_ASSIGN_OR_RETURN(L.post_attn_norm,
                        LoadVector(src, p + "post_attention_layernorm.weight", H, 1.0f));
    L.linear = cfg_.layer_kinds[i] == LayerKind::kLinearAttention;
    if (L.linear) {
      GatedDeltaNetWeights& d = L.delta;
      d.n_k_heads = cfg_.linear_k_heads;
      d.n_v_heads = cfg_.linear_v_heads;
      d.d_k = cfg_.linear_k_dim;
      d.d_v = cfg_.linear_v_dim;
      d.conv_kernel = cfg_.linear_conv_kernel;
      d.eps = cfg_.rms_eps;
      const std::string q = p + "linear_attn.";
      const int64_t qkvz = 2 * d.key_dim() + 2 * d.value_dim();
      UP_ASSIGN_OR_RETURN(d.in_proj_qkvz,
                          Linear(ctx, src, {q + "in_proj_qkvz.weight"}, {{qkvz, H}}, f32, options));
      UP_ASSIGN_OR_RETURN(d.in_proj_ba, Linear(ctx, src, {q + "in_proj_ba.weight"},
                                               {{2 * d.n_v_heads, H}}, f32, options));
      UP_ASSIGN_OR_RETURN(d.out_proj, Linear(ctx, src, {q + "out_proj.weight"},
                                             {{H, d.value_dim()}}, f32, options));
      UP_ASSIGN_OR_RETURN(TensorView conv,
                          src.Get(q + "conv1d.weight", {d.conv_dim(), 1, d.conv_kernel}));
      d.conv_weight.resize(static_cast<size_t>(d.conv_dim()) * d.conv_kernel);
      UP_RETURN_IF_ERROR(Dequantize(conv.dtype, conv.data, d.conv_weight.data(),
                                    static_cast<int64_t>(d.conv_weight.size())));
      UP_ASSIGN_OR_RETURN(d.dt_bias, LoadVector(src, q + "dt_bias", d.n_v_heads));
      UP_ASSIGN_OR_RETURN(d.a_log, LoadVector(src, q + "A_log", d.n_v_heads));
      UP_ASSIGN_OR_RETURN(d.norm, LoadVector(src, q + "norm.weight", d.d_v));  // plain weight
    } else {
      AttentionWeights& a = L.attn;
      const std::string q = p + "self_attn.";
      UP_ASSIGN_OR_RETURN(a.q, Linear(ctx, src, {q + "q_proj.weight"}, {{2 * Hq * D, H}}, f32,
                                      options));
      UP_ASSIGN_OR_RETURN(a.k, Linear(ctx, src, {q + "k_proj.weight"}, {{Hkv * D, H}}, f32, options));
      UP_ASSIGN_OR_RETURN(a.v, Linear(ctx, src, {q + "v_proj.weight"}, {{Hkv * D, H}}, f32, options));
      UP_ASSIGN_OR_RETURN(a.o, Linear(ctx, src, {q + "o_proj.weight"}, {{H, Hq * D}}, f32, options));
      UP_ASSIGN_OR_RETURN(a.q_norm, LoadVector(src, q + "q_norm.weight", D, 1.0f));
      UP_ASSIGN_OR_RETURN(a.k_norm, LoadVector(src, q + "k_norm.weight", D, 1.0f));
      a.rope_inv_freq = inv_freq;
      a.rot_dims = rot_dims_;
      a.rope_style = ops::RopeStyle::kNeox;
      a.n_heads = cfg_.n_heads;
      a.n_kv_heads = cfg_.n_kv_heads;
      a.head_dim = cfg_.head_dim;
      a.scale = cfg_.attention_scale;
      a.norm_eps = cfg_.rms_eps;
      a.gated_output = true;
    }
    MoeWeights& m = L.moe;
    const std::string e = p + "mlp.";
    m.n_experts = n_experts_;
    m.top_k = top_k_;
    m.norm_topk_prob = norm_topk_;
    UP_ASSIGN_OR_RETURN(m.router, Linear(ctx, src, {e + "gate.weight"}, {{n_experts_, H}}, f32,
                                         options));
    for (int x = 0; x < n_experts_; ++x) {
      const std::string ex = e + "experts." + std::to_string(x) + ".";
      UP_ASSIGN_OR_RETURN(ops::LinearWeight gu,
                          Linear(ctx, src, {ex + "gate_proj.weight", ex + "up_proj.weight"},
                                 {{moe_ffn_, H}, {moe_ffn_, H}}, f32, options));
      UP_ASSIGN_OR_RETURN(ops::LinearWeight dn, Linear(ctx, src, {ex + "down_proj.weight"},
                                                       {{H, moe_ffn_}}, f32, options));
      m.expert_gate_up.push_back(std::move(gu));
      m.expert_down.push_back(std::move(dn));
    }
    const std::string sh = e + "shared_expert.";
    UP_ASSIGN_OR_RETURN(m.shared_gate_up,
                        Linear(ctx, src, {sh + "gate_proj.weight", sh + "up_proj.weight"},
                               {{shared_ffn_, H}, {shared_ffn_, H}}, f32, options));
    UP_ASSIGN_OR_RETURN(m.shared_down, Linear(ctx, src, {sh + "down_proj.weight"},
                                              {{H, shared_ffn_}}, f32, options));
    UP_ASSIGN_OR_RETURN(m.shared_expert_gate, Linear(ctx, src, {e + "shared_expert_gate.weight"},
                                                     {{1, H}}, f32, options));
    if (options.progress) options.progress(i + 1, cfg_.n_layers);
  }
  return OkStatus();
}

Status Qwen3NextModel::RunLayer(DeviceContext& ctx, int i, PackedBatch& batch,
                                const DropLayer* drop, WindowMode window_mode) {
  const Qwen3NextLayer& L = layers_[i];
  const int64_t H = cfg_.hidden;
  {
    Buffer h_buf(sizeof(float) * batch.rows() * H);
    TensorView h = h_buf.View(DType::kF32, {batch.rows(), H});  // f32 [rows, hidden]
    ops::RmsNorm(ctx, h, batch.x(), L.input_norm.data(), cfg_.rms_eps);
    Buffer a_buf;
    if (L.linear) {
      // The recurrence runs per request over its alive rows, carrying its state.
      std::vector<SequenceRows> rows;
      std::vector<LinearAttentionState*> states;
      for (int r = 0; r < batch.n_seqs(); ++r) {
        rows.push_back({batch.seq(r).begin, batch.seq(r).end});
        states.push_back(batch.seq(r).cache->Linear(i));
      }
      a_buf = Buffer(sizeof(float) * batch.rows() * H);
      GatedDeltaNetForward(ctx, L.delta, h, rows, states,
                           a_buf.View(DType::kF32, {batch.rows(), H}));
    } else {
      UP_RETURN_IF_ERROR(AttentionForward(ctx, L.attn, i, batch, h, drop, window_mode, &a_buf));
    }
    ops::Add(ctx, batch.x(), batch.x(), a_buf.View(DType::kF32, {batch.rows(), H}));
  }
  Buffer h_buf(sizeof(float) * batch.rows() * H), f_buf(sizeof(float) * batch.rows() * H);
  TensorView h = h_buf.View(DType::kF32, {batch.rows(), H});
  TensorView f = f_buf.View(DType::kF32, {batch.rows(), H});
  ops::RmsNorm(ctx, h, batch.x(), L.post_attn_norm.data(), cfg_.rms_eps);
  MoeForward(ctx, L.moe, h, f);
  ops::Add(ctx, batch.x(), batch.x(), f);
  return OkStatus();
}

}  // namespace

Result<std::unique_ptr<Model>> LoadQwen3Next(const HfConfig& hf, std::shared_ptr<void> owner,
                                             const WeightSource& src, DeviceContext& ctx,
                                             const LoadOptions& options) {
  ModelConfig c;
  c.architecture = "qwen3_next";
  c.name = "qwen3_next (" + src.path() + ")";
  auto geti = [&](const char* k) { return hf.GetInt(k); };
  UP_ASSIGN_OR_RETURN(int64_t layers, geti("num_hidden_layers"));
  UP_ASSIGN_OR_RETURN(int64_t hidden, geti("hidden_size"));
  UP_ASSIGN_OR_RETURN(int64_t heads, geti("num_attention_heads"));
  UP_ASSIGN_OR_RETURN(int64_t kv_heads, geti("num_key_value_heads"));
  UP_ASSIGN_OR_RETURN(int64_t head_dim, hf.GetIntOr("head_dim", heads ? hidden / heads : 0));
  UP_ASSIGN_OR_RETURN(int64_t vocab, geti("vocab_size"));
  UP_ASSIGN_OR_RETURN(int64_t ctx_len, hf.GetIntOr("max_position_embeddings", 262144));
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
  UP_ASSIGN_OR_RETURN(double eps, hf.GetFloatOr("rms_norm_eps", 1e-6));
  UP_ASSIGN_OR_RETURN(double theta, hf.GetFloatOr("rope_theta", 1e7));
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
  c.n_layers = static_cast<int>(layers);
  c.hidden = static_cast<int>(hidden);
  c.n_heads = static_cast<int>(heads);
  c.n_kv_heads = static_cast<int>(kv_heads);
  c.head_dim = static_cast<int>(head_dim);
  c.vocab_size = static_cast<int>(vocab);
  c.context_length = static_cast<int>(ctx_len);
  c.rms_eps = static_cast<float>(eps);
  c.rope_theta_global = theta;
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.linear_k_heads = static_cast<int>(lk);
  c.linear_v_heads = static_cast<int>(lv);
  c.linear_k_dim = static_cast<int>(dk);
  c.linear_v_dim = static_cast<int>(dv);
  c.linear_conv_kernel = static_cast<int>(kernel);
  c.ffn_hidden = static_cast<int>(moe_ffn);
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
  auto model = std::make_unique<Qwen3NextModel>(c, rot_dims, static_cast<int>(experts),
                                                static_cast<int>(top_k), norm_topk,
                                                static_cast<int>(moe_ffn),
                                                static_cast<int>(shared_ffn));
  UP_RETURN_IF_ERROR(model->Load(ctx, src, options));
  model->KeepAlive(std::move(owner));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace uniprefill
