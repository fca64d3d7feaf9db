#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "io/gguf.h"
#include "io/hf_config.h"
#include "model/gemma3.h"
#include "model/hf_checkpoint.h"
#include "model/llama.h"
#include "model/cuda/cuda_model.h"
#include "ops/ops.h"

namespace uniprefill {

CacheLayout Model::CacheLayoutFor(const std::vector<int>& drop_layers) const {
  const ModelConfig& c = config();
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

Status LayeredModel::ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                           const UniPrefillConfig& uniprefill, const ProgressFn& progress,
                           ForwardStats* stats) {
  const ModelConfig& c = config();
  const std::vector<int> drops = uniprefill.active_drop_layers();
  UP_RETURN_IF_ERROR(ValidateUniPrefillConfig(uniprefill, c));
  const int n_segments =
      CacheLayout::WithDropLayers(std::vector<CacheLayerSpec>(c.n_layers), drops).n_segments;
  UP_ASSIGN_OR_RETURN(PackedBatch batch,
                      PackedBatch::Build(steps, c.vocab_size, c.hidden, n_segments));
  Embed(ctx, batch.token_ids().data(), batch.x());
  size_t next_drop = 0;
  for (int i = 0; i < c.n_layers; ++i) {
    DropLayer drop;
    const bool is_drop = next_drop < drops.size() && drops[next_drop] == i;
    if (is_drop) {
      drop.layer = i;
      drop.config = &uniprefill;
      drop.steps = steps;
      drop.stats = stats;
      ++next_drop;
    }
    UP_RETURN_IF_ERROR(RunLayer(ctx, i, batch, is_drop ? &drop : nullptr, uniprefill.window_mode));
    if (progress) progress(i + 1, c.n_layers);
  }
  // Logits of each request's last row (never dropped).
  std::vector<int32_t> last;
  std::vector<int> wanted;
  for (int r = 0; r < batch.n_seqs(); ++r) {
    if (steps[r].logits) {
      last.push_back(batch.seq(r).end - 1);
      wanted.push_back(r);
    }
  }
  if (!last.empty()) {
    const int64_t R = static_cast<int64_t>(last.size());
    Buffer h(sizeof(float) * R * c.hidden), logits(sizeof(float) * R * c.vocab_size);
    ops::GatherRows(ctx, h.View(DType::kF32, {R, c.hidden}), batch.x(), last.data());
    Head(ctx, h.View(DType::kF32, {R, c.hidden}), logits.View(DType::kF32, {R, c.vocab_size}));
    for (int64_t i = 0; i < R; ++i) {
      std::memcpy(steps[wanted[i]].logits, logits.as<float>() + i * c.vocab_size,
                  sizeof(float) * c.vocab_size);
    }
  }
  batch.Commit();
  return OkStatus();
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

Result<std::unique_ptr<Model>> LoadHostModel(std::unique_ptr<gguf::GgufFile> file,
                                             DeviceContext& ctx, const LoadOptions& options);

// A device context: load the host model on a CPU context without f32 copies (the device keeps
// bf16), then hand it to the CUDA model.
template <typename LoadHost>
Result<std::unique_ptr<Model>> LoadOnDevice(DeviceContext& ctx, const LoadOptions& options,
                                            const LoadHost& load_host) {
  std::unique_ptr<DeviceContext> cpu = DeviceContext::Cpu(ctx.threads());
  LoadOptions host_options = options;
  host_options.f32_prefill_weights = false;
  host_options.progress = nullptr;
  UP_ASSIGN_OR_RETURN(std::unique_ptr<Model> host, load_host(*cpu, host_options));
  return MakeCudaModel(std::move(host), ctx, options);
}

}  // namespace

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, DeviceContext& ctx,
                                         const LoadOptions& options) {
  if (ctx.device() == Device::kCuda) {
    return LoadOnDevice(ctx, options, [&](DeviceContext& cpu, const LoadOptions& o) {
      return LoadModel(path, cpu, o);
    });
  }
  if (IsHfCheckpointDir(path)) return LoadHfModel(path, ctx, options);
  UP_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return LoadHostModel(std::move(file), ctx, options);
}

Result<std::unique_ptr<Model>> LoadModel(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options) {
  if (ctx.device() == Device::kCuda) {
    return LoadOnDevice(ctx, options, [&](DeviceContext& cpu, const LoadOptions& o) {
      return LoadHostModel(std::move(file), cpu, o);
    });
  }
  return LoadHostModel(std::move(file), ctx, options);
}

namespace {

Result<std::unique_ptr<Model>> LoadHostModel(std::unique_ptr<gguf::GgufFile> file,
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

}  // namespace

}  // namespace uniprefill
