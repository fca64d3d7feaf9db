// Random-weight preset models (model_presets.h): a preset table, one random-value maker, and one
// builder per family that fills the definition as that family's loader does.
#include "model/model_presets.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "core/buffer.h"
#include "core/random_bf16.h"
#include "core/thread_pool.h"
#include "model/llama.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

// Uniform in +-scale has std scale / sqrt(3): std 0.02, as the PyTorch anchor's weights.
constexpr float kWeightScale = 0.02f * 1.7320508f;

// What a preset's config.json would say (the family loaders' fields); 0 = not this family's.
struct Preset {
  const char* name = "";
  const char* family = "";  // ModelConfig::architecture: "llama", "gemma3", "qwen3_next"
  int n_layers = 0, hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int context = 131072;
  float rms_eps = 1e-6f;
  double rope_theta = 10000.0;
  bool llama3_rope = false;        // Llama 3.1's rope_scaling (llama3, factor 8, 1 / 4, 8192)
  int sliding_window = 0;          // Gemma 3: sliding layers' window (pattern: 5 sliding, 1 full)
  float rope_scale_global = 1.0f;  // Gemma 3: linear rope scaling of the full layers
  int full_every = 0;              // Qwen3-Next: full_attention_interval
  int rot_dims = 0;                // Qwen3-Next: head_dim * partial_rotary_factor
  int lin_k_heads = 0, lin_v_heads = 0, lin_head_dim = 0, conv_kernel = 4;
  int n_experts = 0, top_k = 0, moe_ffn = 0, shared_ffn = 0;
  const char* note = "";
};

const std::vector<Preset>& PresetTable() {
  // One preset per paragraph reads better than one field per line.
  // clang-format off
  static const std::vector<Preset> presets = {
      {.name = "llama-3.1-8b", .family = "llama", .n_layers = 32, .hidden = 4096, .n_heads = 32,
       .n_kv_heads = 8, .head_dim = 128, .ffn = 14336, .vocab = 128256, .rms_eps = 1e-5f,
       .rope_theta = 500000.0, .llama3_rope = true,
       .note = "Llama-3.1-8B shapes and config; tied embedding / LM head (the real model's head "
               "is separate: the same prefill FLOPs, 0.53 B parameters fewer)"},
      {.name = "gemma-3-12b", .family = "gemma3", .n_layers = 48, .hidden = 3840, .n_heads = 16,
       .n_kv_heads = 8, .head_dim = 256, .ffn = 15360, .vocab = 262208, .rope_theta = 1e6,
       .sliding_window = 1024, .rope_scale_global = 8.0f},
      // Every GEMM shape of the model; 256 of the 512 experts per layer so that the bf16 weights
      // (77 GiB of experts) fit one H200 beside 128K-token activations. Routing stays top-10 (the
      // per-token FLOPs are the model's; each expert sees about twice the real model's rows).
      {.name = "qwen3-next-80b-a3b", .family = "qwen3_next", .n_layers = 48, .hidden = 2048,
       .n_heads = 16, .n_kv_heads = 2, .head_dim = 256, .vocab = 151936, .context = 262144,
       .rope_theta = 1e7, .full_every = 4, .rot_dims = 64, .lin_k_heads = 16, .lin_v_heads = 32,
       .lin_head_dim = 128, .n_experts = 256, .top_k = 10, .moe_ffn = 512, .shared_ffn = 512,
       .note = "Qwen3-Next-80B-A3B layer mix and GEMM shapes (48 layers, 36 Gated DeltaNet + 12 "
               "gated full attention, MoE top-10 of moe_intermediate 512 + shared 512) with 256 "
               "of the 512 experts per layer (bf16 weights must fit one H200); tied "
               "embedding/LM head"},
      {.name = "tiny", .family = "llama", .n_layers = 4, .hidden = 256, .n_heads = 4,
       .n_kv_heads = 2, .head_dim = 64, .ffn = 512, .vocab = 1000, .rms_eps = 1e-5f,
       .note = "a small Llama-shaped model for tests (no real model)"},
      {.name = "tiny-hybrid", .family = "qwen3_next", .n_layers = 8, .hidden = 256, .n_heads = 4,
       .n_kv_heads = 2, .head_dim = 64, .vocab = 1000, .full_every = 4, .rot_dims = 16,
       .lin_k_heads = 2, .lin_v_heads = 4, .lin_head_dim = 64, .n_experts = 8, .top_k = 2,
       .moe_ffn = 64, .shared_ffn = 64,
       .note = "a small Qwen3-Next-shaped model for tests: Gated DeltaNet, gated attention with "
               "partial RoPE, MoE (no real model)"},
  };
  // clang-format on
  return presets;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : PresetTable()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

// The random values of one definition: a seed per weight, in the order they are asked for.
class RandomValues {
 public:
  RandomValues(const RandomModelOptions& o, ModelDefinition& def)
      : o_(o), def_(def), last_seed_(o.seed * 1000003ull) {
    if (o.materialize) pool_ = std::make_unique<ThreadPool>();
  }

  // A weight [out, in]: described by its seed, or (materialize) filled as one bf16 part plus,
  // with f32_copy and the option on, an f32 copy for prefill GEMMs, as LoadLinear keeps.
  ops::LinearWeight Linear(int64_t out, int64_t in, bool f32_copy = true) {
    ops::LinearWeight w;
    w.out_features = out;
    w.in_features = in;
    w.random_seed = NextSeed();
    w.random_scale = kWeightScale;
    w.int16_decode_activations = !o_.f32_decode;
    if (!o_.materialize) return w;
    const int64_t n = out * in;
    auto bf16 = std::make_shared<Buffer>(static_cast<size_t>(n) * 2);
    uint16_t* bits = bf16->as<uint16_t>();
    Fill(n, [&](int64_t i) { bits[i] = RandomBf16Bits(w.random_seed, i, w.random_scale); });
    w.parts.push_back(TensorView::Contiguous(bits, DType::kBF16, {out, in}));
    def_.owners.push_back(std::move(bf16));
    if (f32_copy && o_.f32_prefill_weights) {
      w.f32 = Buffer(static_cast<size_t>(n) * 4);
      float* f = w.f32.as<float>();
      Fill(n, [&](int64_t i) { f[i] = Bf16ToF32(bits[i]); });
      def_.host_copy_bytes += w.f32.size();
    }
    return w;
  }

  // n host values center + v, v a bf16 value uniform in +-half_width (RandomBf16Bits).
  std::vector<float> Vector(int64_t n, float center, float half_width) {
    const uint64_t seed = NextSeed();
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = center + Bf16ToF32(RandomBf16Bits(seed, i, half_width));
    return v;
  }
  std::vector<float> Norm(int64_t n) { return Vector(n, 1.0f, 0.1f); }

 private:
  static float Bf16ToF32(uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  uint64_t NextSeed() { return ++last_seed_; }
  template <typename F>
  void Fill(int64_t n, const F& f) {
    pool_->ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) f(i);
    });
  }

  const RandomModelOptions& o_;
  ModelDefinition& def_;
  uint64_t last_seed_;
  std::unique_ptr<ThreadPool> pool_;  // materialize: fills the big weights on every core
};

// The same weight again (a tied head): the parts or the seed, never a second f32 copy.
ops::LinearWeight SameWeight(const ops::LinearWeight& w) {
  ops::LinearWeight s;
  s.parts = w.parts;
  s.out_features = w.out_features;
  s.in_features = w.in_features;
  s.int16_decode_activations = w.int16_decode_activations;
  s.random_seed = w.random_seed;
  s.random_scale = w.random_scale;
  return s;
}

// The config the family loader would read from the preset's config.json.
ModelConfig ConfigOf(const Preset& p, int n_layers, uint64_t seed) {
  ModelConfig c;
  c.architecture = p.family;
  c.name = std::string(p.name) + " (random weights, seed " + std::to_string(seed) + ")";
  c.n_layers = n_layers;
  c.hidden = p.hidden;
  c.ffn_hidden = p.n_experts > 0 ? p.moe_ffn : p.ffn;  // qwen3_next: moe_intermediate_size
  c.n_heads = p.n_heads;
  c.n_kv_heads = p.n_kv_heads;
  c.head_dim = p.head_dim;
  c.vocab_size = p.vocab;
  c.context_length = p.context;
  c.rms_eps = p.rms_eps;
  c.rope_theta_global = p.rope_theta;
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  c.tied_embeddings = true;
  const std::string family = p.family;
  for (int i = 0; i < n_layers; ++i) {
    LayerKind kind = LayerKind::kFullAttention;
    if (family == "gemma3" && (i + 1) % 6 != 0) kind = LayerKind::kSlidingAttention;
    if (family == "qwen3_next" && (i + 1) % p.full_every != 0) kind = LayerKind::kLinearAttention;
    c.layer_kinds.push_back(kind);
  }
  if (family == "gemma3") {
    c.sliding_window = p.sliding_window;
    c.rope_theta_local = 1e4;
    c.rope_scale_global = p.rope_scale_global;
    c.embedding_scale = std::sqrt(static_cast<float>(p.hidden));  // Gemma scales embeddings
  }
  if (family == "qwen3_next") {
    c.linear_k_heads = p.lin_k_heads;
    c.linear_v_heads = p.lin_v_heads;
    c.linear_k_dim = c.linear_v_dim = p.lin_head_dim;
    c.linear_conv_kernel = p.conv_kernel;
  }
  return c;
}

// Attention fields every family sets the same way.
void SetAttentionShape(const ModelConfig& c, AttentionWeights& a) {
  a.rope_style = ops::RopeStyle::kNeox;  // HF checkpoints rotate halves
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = c.attention_scale;
  a.norm_eps = c.rms_eps;
}

// As llama.cc: x += attn(attn_norm(x)); x += SwiGLU(ffn_norm(x)).
void BuildLlamaLayer(const Preset& p, const ModelConfig& c, RandomValues& r, LayerDefinition& L) {
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden;
  L.mixer_norm = r.Norm(H);
  L.ffn_norm = r.Norm(H);
  AttentionWeights& a = L.attention.emplace();
  a.q = r.Linear(Q, H);
  a.k = r.Linear(KV, H);
  a.v = r.Linear(KV, H);
  a.o = r.Linear(H, Q);
  a.rope_inv_freq = p.llama3_rope
                        ? Llama3RopeInvFreq(c.rope_theta_global, c.head_dim, 8.0, 1.0, 4.0, 8192)
                        : ops::RopeInvFreq(c.rope_theta_global, c.head_dim);
  a.rot_dims = c.head_dim;
  SetAttentionShape(c, a);
  GatedFfnWeights& f = L.ffn.emplace();
  f.gate_up = r.Linear(2 * F, H);
  f.down = r.Linear(H, F);
  f.activation = ops::Activation::kSilu;
}

// As gemma3.cc: sandwich norms, q/k norms, local RoPE and a window on sliding layers, GeGLU.
void BuildGemma3Layer(const ModelConfig& c, int i, RandomValues& r, LayerDefinition& L) {
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden, D = c.head_dim;
  L.mixer_norm = r.Norm(H);
  L.post_mixer_norm = r.Norm(H);
  L.ffn_norm = r.Norm(H);
  L.post_ffn_norm = r.Norm(H);
  AttentionWeights& a = L.attention.emplace();
  a.q_norm = r.Norm(D);
  a.k_norm = r.Norm(D);
  a.q = r.Linear(Q, H);
  a.k = r.Linear(KV, H);
  a.v = r.Linear(KV, H);
  a.o = r.Linear(H, Q);
  const bool global = c.layer_kinds[i] == LayerKind::kFullAttention;
  a.rope_inv_freq = ops::RopeInvFreq(global ? c.rope_theta_global : c.rope_theta_local, c.head_dim);
  if (global && c.rope_scale_global != 1.0f) {
    for (float& f : a.rope_inv_freq) f /= c.rope_scale_global;
  }
  a.rot_dims = c.head_dim;
  a.window = global ? 0 : c.sliding_window;
  SetAttentionShape(c, a);
  GatedFfnWeights& f = L.ffn.emplace();
  f.gate_up = r.Linear(2 * F, H);
  f.down = r.Linear(H, F);
  f.activation = ops::Activation::kGeluTanh;
}

// As qwen3_next.cc: Gated DeltaNet or gated full attention (q/k norms, partial RoPE), then a MoE.
void BuildQwen3NextLayer(const Preset& p, const ModelConfig& c, int i, int n_experts, int top_k,
                         RandomValues& r, LayerDefinition& L) {
  const int64_t H = c.hidden, Hq = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim;
  L.mixer_norm = r.Norm(H);
  L.ffn_norm = r.Norm(H);  // post_attention_layernorm: the pre-MoE norm
  if (c.layer_kinds[i] == LayerKind::kLinearAttention) {
    GatedDeltaNetWeights& d = L.delta.emplace();
    d.n_k_heads = c.linear_k_heads;
    d.n_v_heads = c.linear_v_heads;
    d.d_k = c.linear_k_dim;
    d.d_v = c.linear_v_dim;
    d.conv_kernel = c.linear_conv_kernel;
    d.eps = c.rms_eps;
    d.in_proj_qkvz = r.Linear(2 * d.key_dim() + 2 * d.value_dim(), H);
    d.in_proj_ba = r.Linear(2 * d.n_v_heads, H);
    d.out_proj = r.Linear(H, d.value_dim());
    d.conv_weight = r.Vector(static_cast<int64_t>(d.conv_dim()) * d.conv_kernel, 0.0f, 0.5f);
    d.dt_bias = r.Vector(d.n_v_heads, 0.0f, 0.5f);
    d.a_log = r.Vector(d.n_v_heads, 0.0f, 0.5f);
    d.norm = r.Norm(d.d_v);  // a plain weight, near 1
  } else {
    AttentionWeights& a = L.attention.emplace();
    a.q = r.Linear(2 * Hq * D, H);  // [query | gate] per head
    a.k = r.Linear(Hkv * D, H);
    a.v = r.Linear(Hkv * D, H);
    a.o = r.Linear(H, Hq * D);
    a.q_norm = r.Norm(D);
    a.k_norm = r.Norm(D);
    a.rope_inv_freq = ops::RopeInvFreq(c.rope_theta_global, p.rot_dims);
    a.rot_dims = p.rot_dims;
    a.gated_output = true;
    SetAttentionShape(c, a);
  }
  MoeWeights& m = L.moe.emplace();
  m.n_experts = n_experts;
  m.top_k = top_k;
  m.norm_topk_prob = true;
  m.router = r.Linear(n_experts, H);
  for (int x = 0; x < n_experts; ++x) {
    m.expert_gate_up.push_back(r.Linear(2LL * p.moe_ffn, H));
    m.expert_down.push_back(r.Linear(H, p.moe_ffn));
  }
  m.shared_gate_up = r.Linear(2LL * p.shared_ffn, H);
  m.shared_down = r.Linear(H, p.shared_ffn);
  m.shared_expert_gate = r.Linear(1, H);
}

std::string PresetList() {
  std::string s;
  for (const Preset& p : PresetTable()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

int64_t Numel(const ops::LinearWeight& w) { return w.out_features * w.in_features; }

// One layer's linear weights: stored, and multiplied per token (2 FLOPs each).
struct LayerLinear {
  int64_t mixer = 0;          // attention q(+gate)/k/v/o, or DeltaNet in/out projections
  int64_t ffn_per_token = 0;  // FFN weights one token multiplies by
  int64_t ffn_stored = 0;     // FFN weights stored
};

LayerLinear LayerLinearOf(const LayerDefinition& L) {
  LayerLinear r;
  if (L.attention) {
    const AttentionWeights& a = *L.attention;
    r.mixer = Numel(a.q) + Numel(a.k) + Numel(a.v) + Numel(a.o);
  } else if (L.delta) {
    const GatedDeltaNetWeights& d = *L.delta;
    r.mixer = Numel(d.in_proj_qkvz) + Numel(d.in_proj_ba) + Numel(d.out_proj);
  }
  if (L.moe) {
    const MoeWeights& m = *L.moe;
    const int64_t always = Numel(m.router) + Numel(m.shared_gate_up) + Numel(m.shared_down) +
                           Numel(m.shared_expert_gate);
    int64_t experts = 0;
    for (size_t x = 0; x < m.expert_gate_up.size(); ++x) {
      experts += Numel(m.expert_gate_up[x]) + Numel(m.expert_down[x]);
    }
    const int64_t one =
        m.expert_gate_up.empty() ? 0 : Numel(m.expert_gate_up[0]) + Numel(m.expert_down[0]);
    r.ffn_per_token = always + m.top_k * one;
    r.ffn_stored = always + experts;
  } else if (L.ffn) {
    r.ffn_per_token = r.ffn_stored = Numel(L.ffn->gate_up) + Numel(L.ffn->down);
  }
  return r;
}

}  // namespace

const std::vector<std::string>& RandomModelPresets() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Preset& p : PresetTable()) v.push_back(p.name);
    return v;
  }();
  return names;
}

std::string RandomModelPresetNote(const std::string& preset) {
  const Preset* p = FindPreset(preset);
  return p ? p->note : "";
}

Result<ModelDefinition> RandomModelDefinition(const std::string& preset,
                                              const RandomModelOptions& o) {
  const Preset* found = FindPreset(preset);
  if (!found) {
    return InvalidArgument("unknown model preset '" + preset + "' (known: " + PresetList() + ")");
  }
  const Preset& p = *found;
  if (o.n_layers < 0 || o.n_experts < 0) {
    return InvalidArgument("a preset's layer and expert counts must be >= 1 (0: the preset's own)");
  }
  if (o.n_experts > 0 && p.n_experts == 0) {
    return InvalidArgument("preset '" + preset +
                           "' has no MoE layers; an expert count applies "
                           "only to MoE presets (qwen3-next-80b-a3b, tiny-hybrid)");
  }
  const int n_layers = o.n_layers > 0 ? o.n_layers : p.n_layers;
  const int n_experts = o.n_experts > 0 ? o.n_experts : p.n_experts;
  const int top_k = std::min(p.top_k, n_experts);

  ModelDefinition def;
  def.config = ConfigOf(p, n_layers, o.seed);
  const ModelConfig& c = def.config;
  RandomValues r(o, def);
  // Model order: embedding, final norm, then the layers, so fewer layers keep the same values.
  def.token_embedding = r.Linear(c.vocab_size, c.hidden, /*f32_copy=*/false);
  def.head = SameWeight(def.token_embedding);  // tied: the loaders read the same tensor
  def.output_norm = r.Norm(c.hidden);
  def.layers.resize(n_layers);
  const std::string family = p.family;
  for (int i = 0; i < n_layers; ++i) {
    if (family == "llama") {
      BuildLlamaLayer(p, c, r, def.layers[i]);
    } else if (family == "gemma3") {
      BuildGemma3Layer(c, i, r, def.layers[i]);
    } else {
      BuildQwen3NextLayer(p, c, i, n_experts, top_k, r, def.layers[i]);
    }
  }
  UP_RETURN_IF_ERROR(def.Check());
  return def;
}

int64_t ParameterCount(const ModelDefinition& def) {
  int64_t p = Numel(def.token_embedding);
  if (!def.config.tied_embeddings) p += Numel(def.head);
  for (const LayerDefinition& L : def.layers) {
    const LayerLinear ll = LayerLinearOf(L);
    p += ll.mixer + ll.ffn_stored;
    if (L.delta) p += static_cast<int64_t>(L.delta->conv_weight.size());
  }
  return p;
}

double LinearPrefillFlops(const ModelDefinition& def, int64_t n_tokens) {
  double per_token = 0;
  for (const LayerDefinition& L : def.layers) {
    const LayerLinear ll = LayerLinearOf(L);
    per_token += 2.0 * (ll.mixer + ll.ffn_per_token);
    if (L.delta) {
      const GatedDeltaNetWeights& d = *L.delta;
      per_token += 2.0 * d.conv_kernel * static_cast<double>(d.conv_dim()) +
                   6.0 * d.n_v_heads * static_cast<double>(d.d_k) * d.d_v;
    }
  }
  return per_token * static_cast<double>(n_tokens);
}

double DensePrefillFlops(const ModelDefinition& def, int64_t n_tokens) {
  double flops = LinearPrefillFlops(def, n_tokens);
  const double n = static_cast<double>(n_tokens);
  for (const LayerDefinition& L : def.layers) {
    if (!L.attention) continue;
    const AttentionWeights& a = *L.attention;
    double pairs = n * (n + 1) / 2;  // causal
    if (a.window > 0 && n_tokens > a.window) {
      const double w = a.window;
      pairs = w * (w + 1) / 2 + (n - w) * w;
    }
    flops += 4.0 * a.n_heads * a.head_dim * pairs;
  }
  return flops;
}

}  // namespace uniprefill
