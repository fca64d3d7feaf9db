// Random-weight preset models (model_presets.h): a preset table, its config.json, and a weight
// source of seeds that the family's own Hugging Face loader reads.
#include "model/model_presets.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/buffer.h"
#include "core/device_context.h"
#include "io/hf_config.h"
#include "core/random_bf16.h"
#include "core/thread_pool.h"
#include "model/gemma3.h"
#include "model/llama.h"
#include "model/qwen3_next.h"
#include "model/weight_source.h"
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
      {.name = "tiny-gemma3", .family = "gemma3", .n_layers = 6, .hidden = 256, .n_heads = 4,
       .n_kv_heads = 2, .head_dim = 128, .ffn = 512, .vocab = 1000, .rope_theta = 1e6,
       .sliding_window = 48,
       .note = "a small Gemma-3-shaped model for tests: 5 sliding layers (window 48), then a full "
               "one; at 5 layers its last layer is a sliding one (no real model)"},
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

// Distinct seeds per tensor name (FNV-1a over the name, mixed with the model seed), so a model of
// fewer layers or experts has the same values in the tensors it keeps.
uint64_t SeedOf(uint64_t model_seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull ^ (model_seed * 0x9E3779B97F4A7C15ull);
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h | 1;  // never 0
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A contiguous host view of a 1- to 3-D shape.
TensorView HostView(void* data, DType dtype, const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return TensorView::Contiguous(data, dtype, {shape[0]});
  if (shape.size() == 2) return TensorView::Contiguous(data, dtype, {shape[0], shape[1]});
  return TensorView::Contiguous(data, dtype, {shape[0], shape[1], shape[2]});
}

float Bf16ToF32(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A Hugging Face checkpoint that is all seeds: the family loaders read it like safetensors. Linear
// weights are described by their seeds (DescribeLinear), or, materialised, made as bf16 tensors;
// the small tensors (norms, DeltaNet conv taps, A_log, dt_bias) are always made on the host, f32.
class RandomWeightSource final : public WeightSource {
 public:
  RandomWeightSource(std::string preset, uint64_t seed, bool materialize, bool zero_centred_norms)
      : preset_(std::move(preset)), seed_(seed), materialize_(materialize),
        zero_centred_norms_(zero_centred_norms), pool_(std::make_unique<ThreadPool>()) {}

  std::string path() const override { return "random-weight preset " + preset_; }
  // Tied embeddings: there is no separate head ("(tied)" is what the Llama loader asks then).
  bool Has(const std::string& name) const override {
    return name != "lm_head.weight" && name != "(tied)";
  }

  Result<TensorView> Get(const std::string& name,
                         const std::vector<int64_t>& shape) const override {
    if (shape.empty() || shape.size() > 3) {
      return InvalidArgument("preset tensor '" + name + "': bad rank");
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    // One tensor per name (a tied head reads the embedding's).
    if (auto it = made_.find(name); it != made_.end()) return it->second;
    const uint64_t seed = SeedOf(seed_, name);
    if (shape.size() == 2) {  // a linear weight or the embedding, materialised as bf16
      auto bits = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n));
      uint16_t* out = bits->data();
      pool_->ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) out[i] = RandomBf16Bits(seed, i, kWeightScale);
      });
      owners_.push_back(bits);
      return made_[name] = HostView(out, DType::kBF16, shape);
    }
    // Norm weights: 1 +- 0.1 as multiplied (zero-centred checkpoints store w, the loader adds 1;
    // Qwen3-Next's DeltaNet output norm is a plain weight); conv taps, A_log, dt_bias: +- 0.5.
    const bool norm = EndsWith(name, "norm.weight");
    const bool plain = EndsWith(name, "linear_attn.norm.weight") || !zero_centred_norms_;
    const float center = norm && plain ? 1.0f : 0.0f;
    const float half_width = norm ? 0.1f : 0.5f;
    auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      (*values)[i] = center + Bf16ToF32(RandomBf16Bits(seed, i, half_width));
    }
    owners_.push_back(values);
    return made_[name] = HostView(values->data(), DType::kF32, shape);
  }

  std::optional<ops::LinearWeight> DescribeLinear(
      const std::vector<std::string>& names,
      const std::vector<std::vector<int64_t>>& shapes) const override {
    if (materialize_) return std::nullopt;  // LoadLinear reads Get's tensors
    ops::LinearWeight w;
    for (size_t i = 0; i < names.size(); ++i) {
      w.random_parts.push_back({SeedOf(seed_, names[i]), shapes[i][0], kWeightScale});
      w.out_features += shapes[i][0];
      w.in_features = shapes[i][1];
    }
    return w;
  }

  // The host tensors made so far; the definition keeps them alive.
  std::vector<std::shared_ptr<void>> TakeOwners() { return std::move(owners_); }

 private:
  std::string preset_;
  uint64_t seed_;
  bool materialize_;
  bool zero_centred_norms_;
  std::unique_ptr<ThreadPool> pool_;  // fills materialised weights on every core
  mutable std::vector<std::shared_ptr<void>> owners_;
  mutable std::map<std::string, TensorView> made_;
};

// The preset's config.json, as the family's Hugging Face loader reads it.
nlohmann::json ConfigJson(const Preset& p, int n_layers, int n_experts, int top_k) {
  nlohmann::json j = {{"num_hidden_layers", n_layers},
                      {"hidden_size", p.hidden},
                      {"num_attention_heads", p.n_heads},
                      {"num_key_value_heads", p.n_kv_heads},
                      {"head_dim", p.head_dim},
                      {"vocab_size", p.vocab},
                      {"max_position_embeddings", p.context},
                      {"rms_norm_eps", p.rms_eps},
                      {"rope_theta", p.rope_theta},
                      {"tie_word_embeddings", true}};
  const std::string family = p.family;
  if (family == "llama") {
    j["model_type"] = "llama";
    j["intermediate_size"] = p.ffn;
    if (p.llama3_rope) {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
    }
  } else if (family == "gemma3") {
    j["model_type"] = "gemma3_text";
    j["intermediate_size"] = p.ffn;
    j["sliding_window"] = p.sliding_window;
    j["sliding_window_pattern"] = 6;
    j["rope_local_base_freq"] = 10000.0;
    j["query_pre_attn_scalar"] = p.head_dim;
    if (p.rope_scale_global != 1.0f) {
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", p.rope_scale_global}};
    }
  } else {
    j["model_type"] = "qwen3_next";
    j["full_attention_interval"] = p.full_every;
    j["partial_rotary_factor"] = static_cast<double>(p.rot_dims) / p.head_dim;
    j["linear_num_key_heads"] = p.lin_k_heads;
    j["linear_num_value_heads"] = p.lin_v_heads;
    j["linear_key_head_dim"] = p.lin_head_dim;
    j["linear_value_head_dim"] = p.lin_head_dim;
    j["linear_conv_kernel_dim"] = p.conv_kernel;
    j["num_experts"] = n_experts;
    j["num_experts_per_tok"] = top_k;
    j["norm_topk_prob"] = true;
    j["moe_intermediate_size"] = p.moe_ffn;
    j["shared_expert_intermediate_size"] = p.shared_ffn;
  }
  return j;
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
  if (o.n_layers < 0 || o.n_experts < 0 || o.sliding_window < 0) {
    return InvalidArgument(
        "a preset's layer and expert counts and window must be >= 1 (0: the preset's own)");
  }
  if (o.sliding_window > 0 && p.sliding_window == 0) {
    return InvalidArgument("preset '" + preset +
                           "' has no sliding layers; a window applies only "
                           "to presets with them (gemma-3-12b, tiny-gemma3)");
  }
  if (o.n_experts > 0 && p.n_experts == 0) {
    return InvalidArgument("preset '" + preset +
                           "' has no MoE layers; an expert count applies "
                           "only to MoE presets (qwen3-next-80b-a3b, tiny-hybrid)");
  }
  const int n_layers = o.n_layers > 0 ? o.n_layers : p.n_layers;
  const int n_experts = o.n_experts > 0 ? o.n_experts : p.n_experts;
  const int top_k = std::min(p.top_k, n_experts);

  // The family's own Hugging Face loader, on a config.json of the preset and a source of seeds.
  const std::string family = p.family;
  Preset shaped = p;
  if (o.sliding_window > 0) shaped.sliding_window = o.sliding_window;
  UP_ASSIGN_OR_RETURN(HfConfig hf,
                      HfConfig::Parse(ConfigJson(shaped, n_layers, n_experts, top_k).dump(),
                                      std::string("preset ") + p.name));
  RandomWeightSource src(p.name, o.seed, o.materialize, /*zero_centred_norms=*/family != "llama");
  std::unique_ptr<DeviceContext> cpu = DeviceContext::Cpu(0);
  LoadOptions lo;
  lo.f32_prefill_weights = o.materialize && o.f32_prefill_weights;
  lo.f32_decode = o.f32_decode;
  Result<ModelDefinition> def = [&]() -> Result<ModelDefinition> {
    if (family == "llama") return LoadLlama(hf, nullptr, src, *cpu, lo);
    if (family == "qwen3_next") return LoadQwen3Next(hf, nullptr, src, *cpu, lo);
    UP_ASSIGN_OR_RETURN(ModelConfig config, Gemma3ConfigFromHf(hf));
    return LoadGemma3(config, nullptr, src, *cpu, lo);
  }();
  if (!def.ok()) return def.status();
  def->config.name = std::string(p.name) + " (random weights, seed " + std::to_string(o.seed) + ")";
  for (std::shared_ptr<void>& owner : src.TakeOwners()) def->owners.push_back(std::move(owner));
  UP_RETURN_IF_ERROR(def->Check());
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

namespace {

// One row's linear FLOPs of a layer's mixer (with the Gated DeltaNet's conv and delta rule) and
// of its FFN.
std::pair<double, double> MixerAndFfnFlops(const LayerDefinition& L) {
  const LayerLinear ll = LayerLinearOf(L);
  double mixer = 2.0 * ll.mixer;
  if (L.delta) {
    const GatedDeltaNetWeights& d = *L.delta;
    mixer += 2.0 * d.conv_kernel * static_cast<double>(d.conv_dim()) +
             6.0 * d.n_v_heads * static_cast<double>(d.d_k) * d.d_v;
  }
  return {mixer, 2.0 * ll.ffn_per_token};
}

// Attention FLOPs per (row, cached key) of a full-attention layer (windows are bounded: 0).
double KeyFlops(const LayerDefinition& L) {
  return L.attention && L.attention->window == 0
             ? 4.0 * L.attention->n_heads * L.attention->head_dim
             : 0.0;
}

// The same for a sliding-window layer's keys (within its window); 0 for any other layer.
double WindowKeyFlops(const LayerDefinition& L) {
  return L.attention && L.attention->window > 0
             ? 4.0 * L.attention->n_heads * L.attention->head_dim
             : 0.0;
}

}  // namespace

double LinearPrefillFlops(const ModelDefinition& def, int64_t n_tokens) {
  double per_token = 0;
  for (const LayerDefinition& L : def.layers) {
    const auto [mixer, ffn] = MixerAndFfnFlops(L);
    per_token += mixer + ffn;
  }
  return per_token * static_cast<double>(n_tokens);
}

std::vector<SegmentCost> SegmentCosts(const ModelDefinition& def,
                                      const std::vector<int>& drop_layers) {
  std::vector<SegmentCost> costs(drop_layers.size() + 1, SegmentCost{0.0, 0.0});
  const double per_row = LinearPrefillFlops(def, 1);
  if (per_row <= 0) return std::vector<SegmentCost>(drop_layers.size() + 1);
  for (size_t i = 0; i < def.layers.size(); ++i) {
    const int layer = static_cast<int>(i);
    // A drop layer's attention ends the segment before it; its FFN starts the next.
    const size_t mixer_segment =
        std::lower_bound(drop_layers.begin(), drop_layers.end(), layer) - drop_layers.begin();
    const size_t ffn_segment =
        std::upper_bound(drop_layers.begin(), drop_layers.end(), layer) - drop_layers.begin();
    const auto [mixer, ffn] = MixerAndFfnFlops(def.layers[i]);
    costs[mixer_segment].linear_share += mixer / per_row;
    costs[mixer_segment].key_cost += KeyFlops(def.layers[i]) / per_row;
    costs[mixer_segment].full_attention_layers += KeyFlops(def.layers[i]) > 0 ? 1 : 0;
    if (WindowKeyFlops(def.layers[i]) > 0) {
      costs[mixer_segment].window_key_cost += WindowKeyFlops(def.layers[i]) / per_row;
      costs[mixer_segment].window =
          std::max(costs[mixer_segment].window, def.layers[i].attention->window);
    }
    costs[ffn_segment].linear_share += ffn / per_row;
  }
  return costs;
}

void PriceLastLayerRowsOnly(const ModelDefinition& def, const std::vector<int>& drop_layers,
                            std::vector<SegmentCost>* costs) {
  const double per_row = LinearPrefillFlops(def, 1);
  if (def.layers.empty() || per_row <= 0 || !def.layers.back().attention) return;
  const int last = static_cast<int>(def.layers.size()) - 1;
  const LayerDefinition& L = def.layers.back();
  const AttentionWeights& a = *L.attention;
  const size_t mixer_segment =
      std::lower_bound(drop_layers.begin(), drop_layers.end(), last) - drop_layers.begin();
  const size_t ffn_segment =
      std::upper_bound(drop_layers.begin(), drop_layers.end(), last) - drop_layers.begin();
  if (ffn_segment >= costs->size()) return;
  const auto [mixer, ffn] = MixerAndFfnFlops(L);
  const double key_value = 2.0 * def.config.hidden * 2.0 * a.n_kv_heads * a.head_dim;
  SegmentCost& m = (*costs)[mixer_segment];
  m.linear_share -= (mixer - key_value) / per_row;
  m.key_cost -= KeyFlops(L) / per_row;
  m.window_key_cost -= WindowKeyFlops(L) / per_row;
  (*costs)[ffn_segment].linear_share -= ffn / per_row;
  if (a.window > 0) {  // the segment's longest window among the layers still priced
    const size_t first =
        mixer_segment == 0 ? 0 : static_cast<size_t>(drop_layers[mixer_segment - 1]) + 1;
    m.window = 0;
    for (size_t i = first; i < def.layers.size() - 1; ++i) {
      if (WindowKeyFlops(def.layers[i]) > 0) {
        m.window = std::max(m.window, def.layers[i].attention->window);
      }
    }
    if (m.window == 0) m.window_key_cost = 0;
  }
}

double AttentionKeyCost(const ModelDefinition& def) {
  double per_key = 0;
  for (const LayerDefinition& L : def.layers) per_key += KeyFlops(L);
  const double per_row = LinearPrefillFlops(def, 1);
  return per_row > 0 ? per_key / per_row : 0;
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

double ExecutedDensePrefillFlops(const ModelDefinition& def, int64_t n_tokens,
                                 bool last_layer_every_row) {
  const double dense = DensePrefillFlops(def, n_tokens);
  if (last_layer_every_row || n_tokens < 1 || def.layers.empty() || !def.layers.back().attention) {
    return dense;
  }
  const LayerDefinition& L = def.layers.back();
  const AttentionWeights& a = *L.attention;
  const double n = static_cast<double>(n_tokens);
  const auto [mixer, ffn] = MixerAndFfnFlops(L);
  const double key_value = 2.0 * def.config.hidden * 2.0 * a.n_kv_heads * a.head_dim;
  double pairs = n * (n + 1) / 2;  // the layer's attention, as DensePrefillFlops counts it
  if (a.window > 0 && n_tokens > a.window) {
    const double w = a.window;
    pairs = w * (w + 1) / 2 + (n - w) * w;
  }
  const double last_row_keys = a.window > 0 ? std::min<double>(n, a.window) : n;
  return dense - (n - 1) * (mixer - key_value + ffn) -
         4.0 * a.n_heads * a.head_dim * (pairs - last_row_keys);
}

}  // namespace uniprefill
