#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "dist/communicator.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "model/gemma3.h"
#include "model/hf_checkpoint.h"
#include "model/llama.h"
#include "model/transformer_model.h"

namespace uniprefill {

std::optional<GpuAttention> GpuAttentionFromName(const std::string& name) {
  if (name == "auto" || name.empty()) return GpuAttention::kAuto;
  if (name == "ours") return GpuAttention::kOurs;
  if (name == "cudnn") return GpuAttention::kCudnn;
  if (name == "flash") return GpuAttention::kFlash;
  return std::nullopt;
}

CacheLayout Model::CacheLayoutFor(const std::vector<int>& drop_layers) const {
  CacheLayout layout = ModelCacheLayout(config(), drop_layers);
  if (device() == Device::kCpu) layout.kv_dtype = kv_dtype_;
  return layout;
}

CacheLayout ModelCacheLayout(const ModelConfig& c, const std::vector<int>& drop_layers) {
  std::vector<CacheLayerSpec> specs;
  for (LayerKind kind : c.layer_kinds) {
    CacheLayerSpec s;
    s.kv_dim = c.kv_dim();
    if (kind == LayerKind::kSlidingAttention) {
      s.kind = CacheLayerKind::kSlidingAttention;
      s.window = c.sliding_window;
    } else if (kind == LayerKind::kLinearAttention) {
      s.kind = CacheLayerKind::kLinearAttention;
      s.linear = {c.linear_conv_dim(), c.linear_conv_kernel, c.linear_v_heads, c.linear_k_dim,
                  c.linear_v_dim};
    }
    specs.push_back(s);
  }
  return CacheLayout::WithDropLayers(std::move(specs), drop_layers);
}

std::unique_ptr<SequenceCache> Model::NewCache(int max_tokens,
                                               const std::vector<int>& drop_layers) const {
  return std::make_unique<ContiguousSequenceCache>(CacheLayoutFor(drop_layers), max_tokens);
}

Status Model::Forward(DeviceContext& ctx, std::span<const int32_t> tokens, SequenceCache& cache,
                      float* logits, const ProgressFn& progress) {
  UniPrefillConfig dense;
  dense.enabled = false;
  SequenceStep step;
  step.cache = &cache;
  step.tokens = tokens;
  step.logits = logits;
  return ForwardBatch(ctx, std::span<const SequenceStep>(&step, 1), dense, progress);
}

namespace {

// The definition of a GGUF file (dispatch on general.architecture).
Result<ModelDefinition> LoadGgufDefinition(std::unique_ptr<gguf::GgufFile> file,
                                           DeviceContext& ctx, const LoadOptions& options) {
  const std::string path = file->path();
  auto arch = file->GetString("general.architecture");
  if (!arch.ok()) {
    return DataLoss("model file " + path + " has no general.architecture key; is it a GGUF model?");
  }
  if (*arch == "gemma3") return LoadGemma3(std::move(file), ctx, options);
  if (*arch == "llama") return LoadLlama(std::move(file), ctx, options);
  return Unimplemented("model file " + path + " has architecture '" + *arch +
                       "', which this engine does not support yet (GGUF: gemma3, llama; "
                       "Hugging Face checkpoints: llama, gemma3_text, qwen3_next)");
}

// Loads the definition on the host (a device model keeps bf16 weights of its own, so no f32 host
// copies then), and makes the model on ctx's device.
template <typename LoadDefinition>
Result<std::unique_ptr<Model>> Load(DeviceContext& ctx, const LoadOptions& options,
                                    const LoadDefinition& load_definition) {
  if (ctx.device() == Device::kCuda) {
    std::unique_ptr<DeviceContext> cpu = DeviceContext::Cpu(ctx.threads(), ctx.cpu_isa());
    LoadOptions host_options = options;
    host_options.f32_prefill_weights = false;
    host_options.progress = nullptr;
    UP_ASSIGN_OR_RETURN(ModelDefinition d, load_definition(*cpu, host_options));
    return MakeModel(std::move(d), ctx, options);
  }
  LoadOptions host_options = options;
  // Tensor parallel: f32 copies are made per shard (MakeModel), not for the whole model (a world
  // of one keeps the whole model as its shard, so it makes them here as without a communicator).
  if (options.communicator != nullptr && options.communicator->world_size() > 1) {
    host_options.f32_prefill_weights = false;
  }
  // The CPU model's progress is the loading itself (layers read).
  UP_ASSIGN_OR_RETURN(ModelDefinition d, load_definition(ctx, host_options));
  LoadOptions make_options = options;
  make_options.progress = nullptr;
  return MakeModel(std::move(d), ctx, make_options);
}

}  // namespace

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, DeviceContext& ctx,
                                         const LoadOptions& options) {
  return Load(ctx, options, [&](DeviceContext& c, const LoadOptions& o) -> Result<ModelDefinition> {
    if (IsHfCheckpointDir(path)) return LoadHfDefinition(path, c, o);
    UP_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
    return LoadGgufDefinition(std::move(file), c, o);
  });
}

Result<std::unique_ptr<Model>> LoadModel(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options) {
  return Load(ctx, options, [&](DeviceContext& c, const LoadOptions& o) {
    return LoadGgufDefinition(std::move(file), c, o);
  });
}

}  // namespace uniprefill
