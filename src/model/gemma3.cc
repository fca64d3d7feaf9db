#include "model/gemma3.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/linear_loader.h"
#include "model/weight_table.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

constexpr int kMaxChunk = 512;  // prefill tokens per pass: bounds activation memory

struct Gemma3Layer {
  std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  ops::LinearWeight q, k, v, o, gate_up, down;
  std::vector<float> rope_inv_freq;
  LayerKind kind = LayerKind::kSlidingAttention;
};

class Gemma3Model final : public Model {
 public:
  Gemma3Model(std::unique_ptr<gguf::GgufFile> file, ModelConfig cfg)
      : file_(std::move(file)), cfg_(std::move(cfg)) {}

  Status Load(DeviceContext& ctx, const LoadOptions& options);

  const ModelConfig& config() const override { return cfg_; }
  int max_chunk() const override { return kMaxChunk; }
  KvCache NewCache(int max_tokens) const override {
    std::vector<LayerCacheSpec> specs;
    for (LayerKind kind : cfg_.layer_kinds) {
      specs.push_back({cfg_.kv_dim(), kind == LayerKind::kSlidingAttention ? cfg_.sliding_window : 0});
    }
    return KvCache(std::move(specs), max_tokens, kMaxChunk);
  }
  Status Forward(DeviceContext& ctx, std::span<const int32_t> tokens, KvCache& cache, float* logits,
                 const ProgressFn& progress) override;
  size_t resident_weight_bytes() const override { return resident_bytes_; }

 private:
  Status ForwardChunk(DeviceContext& ctx, std::span<const int32_t> tokens, KvCache& cache,
                      float* logits);
  void AttentionBlock(DeviceContext& ctx, const Gemma3Layer& L, int layer, TensorView x, int T,
                      KvCache& cache, const int32_t* pos);
  void FeedForwardBlock(DeviceContext& ctx, const Gemma3Layer& L, TensorView x, int T);

  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig cfg_;
  TensorView token_embd_;  // [vocab, hidden], as stored (Q8_0 in the default model)
  ops::LinearWeight head_;  // tied: the same tensor, read in place
  std::vector<float> output_norm_;
  std::vector<Gemma3Layer> layers_;
  size_t resident_bytes_ = 0;
};

Status Gemma3Model::Load(DeviceContext& ctx, const LoadOptions& options) {
  const int64_t H = cfg_.hidden, Q = cfg_.q_dim(), KV = cfg_.kv_dim(), F = cfg_.ffn_hidden;
  const int64_t D = cfg_.head_dim;
  auto get = [&](const std::string& name, std::vector<int64_t> shape,
                 bool required = true) -> Result<const gguf::TensorInfo*> {
    return LookupWeight(*file_, WeightSpec{name, std::move(shape), required});
  };
  UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* embd, get("token_embd.weight", {cfg_.vocab_size, H}));
  UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* out_norm, get("output_norm.weight", {H}));
  UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* output, get("output.weight", {cfg_.vocab_size, H}, false));
  token_embd_ = embd->View();
  UP_RETURN_IF_ERROR(LoadVector(*out_norm, &output_norm_));
  cfg_.tied_embeddings = output == nullptr;
  UP_ASSIGN_OR_RETURN(head_, LoadLinear(ctx, {output ? output : embd}, /*make_f32_copy=*/false));
  head_.int16_decode_activations = !options.f32_decode;

  layers_.resize(cfg_.n_layers);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    Gemma3Layer& L = layers_[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    L.kind = cfg_.layer_kinds[i];
    const bool f32 = options.f32_prefill_weights;
    std::pair<const char*, std::vector<float>*> norms[] = {
        {"attn_norm", &L.attn_norm}, {"post_attention_norm", &L.post_attn_norm},
        {"ffn_norm", &L.ffn_norm}, {"post_ffw_norm", &L.post_ffn_norm}};
    for (auto& [name, dst] : norms) {
      UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, get(p + name + ".weight", {H}));
      UP_RETURN_IF_ERROR(LoadVector(*t, dst));
    }
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* qn, get(p + "attn_q_norm.weight", {D}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* kn, get(p + "attn_k_norm.weight", {D}));
    UP_RETURN_IF_ERROR(LoadVector(*qn, &L.q_norm));
    UP_RETURN_IF_ERROR(LoadVector(*kn, &L.k_norm));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wq, get(p + "attn_q.weight", {Q, H}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wk, get(p + "attn_k.weight", {KV, H}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wv, get(p + "attn_v.weight", {KV, H}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wo, get(p + "attn_output.weight", {H, Q}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wg, get(p + "ffn_gate.weight", {F, H}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wu, get(p + "ffn_up.weight", {F, H}));
    UP_ASSIGN_OR_RETURN(const gguf::TensorInfo* wd, get(p + "ffn_down.weight", {H, F}));
    UP_ASSIGN_OR_RETURN(L.q, LoadLinear(ctx, {wq}, f32));
    UP_ASSIGN_OR_RETURN(L.k, LoadLinear(ctx, {wk}, f32));
    UP_ASSIGN_OR_RETURN(L.v, LoadLinear(ctx, {wv}, f32));
    UP_ASSIGN_OR_RETURN(L.o, LoadLinear(ctx, {wo}, f32));
    UP_ASSIGN_OR_RETURN(L.gate_up, LoadLinear(ctx, {wg, wu}, f32));
    UP_ASSIGN_OR_RETURN(L.down, LoadLinear(ctx, {wd}, f32));
    for (ops::LinearWeight* w : {&L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.down}) {
      resident_bytes_ += w->f32.size();
      w->int16_decode_activations = !options.f32_decode;
    }
    const bool global = L.kind == LayerKind::kFullAttention;
    L.rope_inv_freq = ops::RopeInvFreq(global ? cfg_.rope_theta_global : cfg_.rope_theta_local, D);
    if (global && cfg_.rope_scale_global != 1.0f) {
      for (float& f : L.rope_inv_freq) f /= cfg_.rope_scale_global;
    }
    if (options.progress) options.progress(i + 1, cfg_.n_layers);
  }
  return OkStatus();
}

void Gemma3Model::AttentionBlock(DeviceContext& ctx, const Gemma3Layer& L, int layer,
                                 TensorView x, int T, KvCache& cache, const int32_t* pos) {
  const int Hq = cfg_.n_heads, Hkv = cfg_.n_kv_heads, D = cfg_.head_dim;
  Buffer h_buf(sizeof(float) * T * cfg_.hidden), q_buf(sizeof(float) * T * cfg_.q_dim()),
      attn_buf(sizeof(float) * T * cfg_.q_dim());
  TensorView h = h_buf.View(DType::kF32, {T, cfg_.hidden});         // f32 [T, hidden]
  TensorView q = q_buf.View(DType::kF32, {T, cfg_.q_dim()});        // f32 [T, Hq * D]
  TensorView k = cache.NewKeys(layer, T);                           // f32 [T, Hkv * D]
  TensorView v = cache.NewValues(layer, T);                         // f32 [T, Hkv * D]
  ops::RmsNorm(ctx, h, x, L.attn_norm.data(), cfg_.rms_eps);
  ops::Linear(ctx, q, h, L.q);
  ops::Linear(ctx, k, h, L.k);
  ops::Linear(ctx, v, h, L.v);
  // Per-head q/k norms: view rows as heads.
  ops::RmsNorm(ctx, q_buf.View(DType::kF32, {int64_t(T) * Hq, D}),
               q_buf.View(DType::kF32, {int64_t(T) * Hq, D}), L.q_norm.data(), cfg_.rms_eps);
  TensorView k_heads = TensorView::Contiguous(k.data, DType::kF32, {int64_t(T) * Hkv, D});
  ops::RmsNorm(ctx, k_heads, k_heads, L.k_norm.data(), cfg_.rms_eps);
  TensorView q3 = q_buf.View(DType::kF32, {T, Hq, D});
  TensorView k3 = TensorView::Contiguous(k.data, DType::kF32, {T, Hkv, D});
  ops::Rope(ctx, q3, pos, L.rope_inv_freq.data(), D, ops::RopeStyle::kNeox);
  ops::Rope(ctx, k3, pos, L.rope_inv_freq.data(), D, ops::RopeStyle::kNeox);

  const int n_keys = cache.Count(layer) + T;
  TensorView keys = TensorView::Contiguous(cache.Keys(layer).data, DType::kF32, {n_keys, Hkv, D});
  TensorView vals = TensorView::Contiguous(cache.Values(layer).data, DType::kF32, {n_keys, Hkv, D});
  TensorView attn3 = attn_buf.View(DType::kF32, {T, Hq, D});
  ops::AttentionParams ap;
  ap.scale = cfg_.attention_scale;
  ap.window = L.kind == LayerKind::kSlidingAttention ? cfg_.sliding_window : 0;
  ops::Attention(ctx, attn3, q3, keys, vals, pos, cache.Positions(layer), ap);

  ops::Linear(ctx, h, attn_buf.View(DType::kF32, {T, cfg_.q_dim()}), L.o);
  ops::RmsNorm(ctx, h, h, L.post_attn_norm.data(), cfg_.rms_eps);
  ops::Add(ctx, x, x, h);
}

void Gemma3Model::FeedForwardBlock(DeviceContext& ctx, const Gemma3Layer& L, TensorView x, int T) {
  const int64_t F = cfg_.ffn_hidden;
  Buffer h_buf(sizeof(float) * T * cfg_.hidden), gu_buf(sizeof(float) * T * 2 * F),
      act_buf(sizeof(float) * T * F);
  TensorView h = h_buf.View(DType::kF32, {T, cfg_.hidden});  // f32 [T, hidden]
  TensorView gu = gu_buf.View(DType::kF32, {T, 2 * F});      // f32 [T, 2F]: gate | up
  TensorView act = act_buf.View(DType::kF32, {T, F});        // f32 [T, F]
  ops::RmsNorm(ctx, h, x, L.ffn_norm.data(), cfg_.rms_eps);
  ops::Linear(ctx, gu, h, L.gate_up);
  TensorView gate = gu, up = gu;
  gate.shape[1] = F;
  up.shape[1] = F;
  up.data = gu.as<float>() + F;
  ops::GatedActivation(ctx, act, gate, up, ops::Activation::kGeluTanh);
  ops::Linear(ctx, h, act, L.down);
  ops::RmsNorm(ctx, h, h, L.post_ffn_norm.data(), cfg_.rms_eps);
  ops::Add(ctx, x, x, h);
}

Status Gemma3Model::ForwardChunk(DeviceContext& ctx, std::span<const int32_t> tokens,
                                 KvCache& cache, float* logits) {
  const int T = static_cast<int>(tokens.size());
  for (int32_t id : tokens) {
    if (id < 0 || id >= cfg_.vocab_size) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(cfg_.vocab_size) + ")");
    }
  }
  UP_RETURN_IF_ERROR(cache.BeginAppend(T));
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = cache.length() + t;

  Buffer x_buf(sizeof(float) * T * cfg_.hidden);
  TensorView x = x_buf.View(DType::kF32, {T, cfg_.hidden});  // f32 [T, hidden]: the residual
  ops::Embedding(ctx, x, token_embd_, tokens.data(), cfg_.embedding_scale);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    AttentionBlock(ctx, layers_[i], i, x, T, cache, pos.data());
    FeedForwardBlock(ctx, layers_[i], x, T);
  }
  cache.EndAppend(T);
  if (logits) {
    TensorView last = x.Slice0(T - 1, 1);  // f32 [1, hidden]
    ops::RmsNorm(ctx, last, last, output_norm_.data(), cfg_.rms_eps);
    ops::Linear(ctx, TensorView::Contiguous(logits, DType::kF32, {1, cfg_.vocab_size}), last, head_);
  }
  return OkStatus();
}

Status Gemma3Model::Forward(DeviceContext& ctx, std::span<const int32_t> tokens, KvCache& cache,
                            float* logits, const ProgressFn& progress) {
  if (tokens.empty()) return InvalidArgument("Forward needs at least one token");
  if (cache.length() + static_cast<int64_t>(tokens.size()) > cache.max_tokens()) {
    return OutOfRange("the input has " + std::to_string(cache.length() + tokens.size()) +
                      " tokens but the context holds " + std::to_string(cache.max_tokens()) +
                      "; shorten the prompt or raise --ctx-size (the model supports up to " +
                      std::to_string(cfg_.context_length) + ")");
  }
  const size_t n = tokens.size();
  for (size_t b = 0; b < n; b += kMaxChunk) {
    const size_t len = std::min<size_t>(kMaxChunk, n - b);
    const bool last = b + len == n;
    UP_RETURN_IF_ERROR(ForwardChunk(ctx, tokens.subspan(b, len), cache, last ? logits : nullptr));
    if (progress) progress(static_cast<int64_t>(b + len), static_cast<int64_t>(n));
  }
  return OkStatus();
}

}  // namespace

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

Result<std::unique_ptr<Model>> LoadGemma3(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                          const LoadOptions& options) {
  UP_ASSIGN_OR_RETURN(ModelConfig cfg, Gemma3ConfigFromGguf(*file));
  auto model = std::make_unique<Gemma3Model>(std::move(file), std::move(cfg));
  UP_RETURN_IF_ERROR(model->Load(ctx, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace uniprefill
