#include "model/hf_checkpoint.h"

#include <cmath>

#include "io/hf_config.h"
#include "model/gemma3.h"
#include "model/llama.h"
#include "model/qwen3_next.h"

namespace uniprefill {
namespace {

class SafetensorsSource final : public WeightSource {
 public:
  explicit SafetensorsSource(const safetensors::Checkpoint& c) : c_(c) {}
  std::string path() const override { return c_.path(); }
  bool Has(const std::string& name) const override { return c_.Find(name) != nullptr; }
  Result<TensorView> Get(const std::string& name,
                         const std::vector<int64_t>& shape) const override {
    const safetensors::TensorEntry* t = c_.Find(name);
    if (!t) {
      return NotFound("checkpoint " + c_.path() + " lacks tensor '" + name + "' (expected " +
                      ShapeToString(shape) + "); is it a complete model of this architecture?");
    }
    if (t->shape != shape) {
      return InvalidArgument("tensor '" + name + "' has shape " + ShapeToString(t->shape) +
                             ", expected " + ShapeToString(shape) +
                             " from config.json (checkpoint " + c_.path() + ")");
    }
    return t->View();
  }

 private:
  const safetensors::Checkpoint& c_;
};

}  // namespace

Result<ModelConfig> ReadHfCommonConfig(const HfConfig& hf, const std::string& architecture,
                                       const HfCommonDefaults& d) {
  ModelConfig c;
  c.architecture = architecture;
  c.name = architecture + " (" + hf.Where() + ")";
  UP_ASSIGN_OR_RETURN(int64_t layers, hf.GetInt("num_hidden_layers"));
  UP_ASSIGN_OR_RETURN(int64_t hidden, hf.GetInt("hidden_size"));
  UP_ASSIGN_OR_RETURN(int64_t heads, hf.GetInt("num_attention_heads"));
  UP_ASSIGN_OR_RETURN(int64_t kv_heads, hf.GetIntOr("num_key_value_heads", heads));
  const int64_t default_head_dim = d.head_dim ? d.head_dim : heads ? hidden / heads : 0;
  UP_ASSIGN_OR_RETURN(int64_t head_dim, hf.GetIntOr("head_dim", default_head_dim));
  UP_ASSIGN_OR_RETURN(int64_t vocab, d.vocab ? hf.GetIntOr("vocab_size", d.vocab)
                                             : hf.GetInt("vocab_size"));
  UP_ASSIGN_OR_RETURN(int64_t ctx_len, hf.GetIntOr("max_position_embeddings", d.context));
  UP_ASSIGN_OR_RETURN(double eps, hf.GetFloatOr("rms_norm_eps", d.rms_eps));
  UP_ASSIGN_OR_RETURN(double theta, hf.GetFloatOr("rope_theta", d.rope_theta));
  if (d.ffn) {
    UP_ASSIGN_OR_RETURN(int64_t ffn, hf.GetInt("intermediate_size"));
    c.ffn_hidden = static_cast<int>(ffn);
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
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim > 0 ? c.head_dim : 1));
  return c;
}

std::unique_ptr<WeightSource> SafetensorsWeightSource(const safetensors::Checkpoint& checkpoint) {
  return std::make_unique<SafetensorsSource>(checkpoint);
}

Result<ModelDefinition> LoadHfDefinition(const std::string& dir, DeviceContext& ctx,
                                           const LoadOptions& options) {
  UP_ASSIGN_OR_RETURN(HfConfig root, HfConfig::Load(dir + "/config.json"));
  UP_ASSIGN_OR_RETURN(std::string type, root.GetString("model_type"));
  UP_ASSIGN_OR_RETURN(std::unique_ptr<safetensors::Checkpoint> ck,
                      safetensors::Checkpoint::Open(dir));
  std::shared_ptr<safetensors::Checkpoint> owner(std::move(ck));
  auto src = SafetensorsWeightSource(*owner);
  // The loaded definition, told which files it maps (DropMappedPages).
  const auto with_mappings = [&](Result<ModelDefinition> d) -> Result<ModelDefinition> {
    if (d.ok()) {
      for (const auto& f : owner->files()) d->mapped_files.push_back(f->mapping());
    }
    return d;
  };
  if (type == "llama") return with_mappings(LoadLlama(root, owner, *src, ctx, options));
  if (type == "qwen3_next") return with_mappings(LoadQwen3Next(root, owner, *src, ctx, options));
  if (type == "gemma3_text" || type == "gemma3") {
    UP_ASSIGN_OR_RETURN(HfConfig text, root.TextConfig());
    UP_ASSIGN_OR_RETURN(ModelConfig cfg, Gemma3ConfigFromHf(text));
    return with_mappings(LoadGemma3(cfg, owner, *src, ctx, options));
  }
  return Unimplemented("checkpoint " + dir + " has model_type '" + type +
                       "', which this engine does not support (supported: llama, gemma3_text, "
                       "qwen3_next)");
}

}  // namespace uniprefill
