#include "model/hf_checkpoint.h"

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

std::unique_ptr<WeightSource> SafetensorsWeightSource(const safetensors::Checkpoint& checkpoint) {
  return std::make_unique<SafetensorsSource>(checkpoint);
}

Result<ModelDefinition> LoadHfDefinition(const std::string& dir, DeviceContext& ctx,
                                           const LoadOptions& options) {
  UP_ASSIGN_OR_RETURN(HfConfig root, HfConfig::Load(dir + "/config.json"));
  UP_ASSIGN_OR_RETURN(std::string type, root.GetString("model_type"));
  UP_ASSIGN_OR_RETURN(std::unique_ptr<safetensors::Checkpoint> ck, safetensors::Checkpoint::Open(dir));
  std::shared_ptr<safetensors::Checkpoint> owner(std::move(ck));
  auto src = SafetensorsWeightSource(*owner);
  if (type == "llama") return LoadLlama(root, owner, *src, ctx, options);
  if (type == "qwen3_next") return LoadQwen3Next(root, owner, *src, ctx, options);
  if (type == "gemma3_text" || type == "gemma3") {
    UP_ASSIGN_OR_RETURN(HfConfig text, root.TextConfig());
    UP_ASSIGN_OR_RETURN(ModelConfig cfg, Gemma3ConfigFromHf(text));
    return LoadGemma3(cfg, owner, *src, ctx, options);
  }
  return Unimplemented("checkpoint " + dir + " has model_type '" + type +
                       "', which this engine does not support (supported: llama, gemma3_text, "
                       "qwen3_next)");
}

}  // namespace uniprefill
