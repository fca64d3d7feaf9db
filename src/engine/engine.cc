// Engine: the public API's implementation: a model, its tokenizer, a CPU context and one cache.
#include "uniprefill/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/device_context.h"
#include "dist/communicator.h"
#include "dist/rank_devices.h"
#ifdef UNIPREFILL_WITH_NCCL
#include "dist/cuda/nccl_communicator.h"
#endif
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "io/gguf.h"
#include "model/model.h"
#include "sparsity/uniprefill_config.h"
#include "tokenizer/chat_template.h"
#include "io/hf_config.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/gguf_bpe.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <filesystem>

namespace uniprefill {

using namespace engine_internal;  // NOLINT: this file is their other user

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& options,
                                             const ProgressCallback& progress) {
  if (options.tensor_parallel < 1) {
    return InvalidArgument("--tensor-parallel must be at least 1 (got " +
                           std::to_string(options.tensor_parallel) + ")");
  }
  std::unique_ptr<dist::Communicator> comm;
  int cuda_device = 0;
  if (options.tensor_parallel > 1) {
    UP_ASSIGN_OR_RETURN(
        comm, dist::MakeMpiCommunicator(dist::CommOptions{options.tensor_parallel_timeout_s}));
    if (comm->world_size() != options.tensor_parallel) {
      return InvalidArgument(
          "--tensor-parallel " + std::to_string(options.tensor_parallel) + " needs " +
          std::to_string(options.tensor_parallel) + " processes: run it as `mpirun -np " +
          std::to_string(options.tensor_parallel) + " uniprefill ...` (this one is rank " +
          std::to_string(comm->rank()) + " of " + std::to_string(comm->world_size()) + ")");
    }
    // Under --tensor-parallel each process drives the GPU of its rank on its host.
    cuda_device = dist::RankCudaDevice(comm->rank());
  }
  return EngineLoader::Load(options, std::move(comm), cuda_device, progress);
}

Result<std::unique_ptr<Engine>> EngineLoader::Load(const EngineOptions& options,
                                                   std::unique_ptr<dist::Communicator> comm,
                                                   int cuda_device,
                                                   const ProgressCallback& progress) {
  auto impl = std::make_unique<Engine::Impl>();
  UP_ASSIGN_OR_RETURN(const CpuIsa requested_isa, ParseCpuIsa(options.cpu_isa));
  UP_ASSIGN_OR_RETURN(const CpuIsa cpu_isa, ResolveCpuIsa(requested_isa, DetectCpuFeatures()));
  impl->comm = std::move(comm);
  impl->comm_timeout_s = options.tensor_parallel_timeout_s;
  if (options.device == "cuda") {
    // A tensor-parallel GPU rank's device collectives go through NCCL, unless the communicator
    // has its own (tests: ranks as threads sharing one GPU).
    if (impl->comm && !impl->comm->device_collectives()) {
#ifdef UNIPREFILL_WITH_NCCL
      UP_ASSIGN_OR_RETURN(impl->comm,
                          dist::MakeNcclCommunicator(std::move(impl->comm), cuda_device));
#else
      return Unimplemented("--tensor-parallel on the GPU needs NCCL, and this uniprefill was "
                           "built without nccl.h; rebuild with the CUDA toolkit's NCCL");
#endif
    }
    UP_ASSIGN_OR_RETURN(impl->ctx, DeviceContext::Cuda(cuda_device, options.threads));
  } else if (options.device == "cpu" || options.device.empty()) {
    impl->ctx = DeviceContext::Cpu(options.threads, cpu_isa);
  } else {
    return InvalidArgument("unknown device '" + options.device + "' (expected cpu or cuda)");
  }
  LoadOptions lo;
  lo.progress = progress;
  lo.f32_decode = options.f32_decode;
  if (options.prefill_gemm != "sgemm" && options.prefill_gemm != "int16" &&
      options.prefill_gemm != "int8" && options.prefill_gemm != "bf16") {
    return InvalidArgument("prefill_gemm '" + options.prefill_gemm +
                           "' is not one of: sgemm, int16, int8, bf16");
  }
  lo.int16_prefill_gemm = options.prefill_gemm != "sgemm";
  lo.int8_rows_activations = options.prefill_gemm == "int8";
  lo.bf16_prefill_gemm = options.prefill_gemm == "bf16";
  if (options.kv_cache_dtype != "f16" && options.kv_cache_dtype != "f32") {
    return InvalidArgument("kv_cache_dtype '" + options.kv_cache_dtype +
                           "' is not one of: f16, f32 (--kv-cache-dtype)");
  }
  lo.cpu_kv_dtype = options.kv_cache_dtype == "f32" ? DType::kF32 : DType::kF16;
  lo.gpu_decode_graphs = options.gpu_decode_graphs;
  lo.gpu_prefix_split_min_keys = options.gpu_prefix_split_min_keys;
  if (options.gpu_cudnn_plan != "fastest" && options.gpu_cudnn_plan != "first") {
    return InvalidArgument("gpu_cudnn_plan '" + options.gpu_cudnn_plan +
                           "' is not one of: fastest, first (--cudnn-plan)");
  }
  lo.gpu_cudnn_autotune = options.gpu_cudnn_plan == "fastest";
  const std::optional<GpuAttention> attention = GpuAttentionFromName(options.gpu_attention);
  if (!attention) {
    return InvalidArgument("unknown gpu attention '" + options.gpu_attention +
                           "' (--gpu-attention: expected auto, ours, cudnn or flash)");
  }
  if (*attention == GpuAttention::kCudnn && options.device != "cuda") {
    return InvalidArgument(
        "gpu attention 'cudnn' (--gpu-attention) is a GPU kernel: use it with device cuda "
        "(--device cuda)");
  }
  lo.gpu_attention = *attention;
  lo.communicator = impl->comm.get();  // null without --tensor-parallel
  if (IsHfCheckpointDir(options.model_path)) {
    // A Hugging Face folder: config.json + safetensors, and tokenizer.json when it ships one.
    UP_ASSIGN_OR_RETURN(impl->model, LoadModel(options.model_path, *impl->ctx, lo));
    const std::string tj = options.model_path + "/tokenizer.json";
    if (std::filesystem::exists(tj)) {
      UP_ASSIGN_OR_RETURN(tokenizer::BpeTokenizer bpe, tokenizer::BpeTokenizer::FromJsonFile(tj));
      impl->tokenizer =
          std::make_unique<tokenizer::TokenizerAdapter<tokenizer::BpeTokenizer>>(std::move(bpe));
    } else {
      UP_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Load(options.model_path + "/config.json"));
      UP_ASSIGN_OR_RETURN(int64_t eos, hf.GetIntOr("eos_token_id", -1));
      impl->tokenizer = tokenizer::IdsOnlyTokenizer(impl->model->config().vocab_size,
                                                    static_cast<int32_t>(eos));
    }
    // Hugging Face folders: the architecture's built-in default (Gemma) only.
    auto chat = tokenizer::DetectChatTemplate("", impl->model->config().architecture);
    if (chat.ok()) impl->tokenizer->set_chat_template(std::move(*chat));
  } else {
    UP_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                        gguf::GgufFile::Open(options.model_path));
    auto kind = file->GetString("tokenizer.ggml.model");
    if (kind.ok() && *kind == "llama") {
      UP_ASSIGN_OR_RETURN(tokenizer::SpmTokenizer tok, tokenizer::SpmTokenizer::FromGguf(*file));
      impl->tokenizer =
          std::make_unique<tokenizer::TokenizerAdapter<tokenizer::SpmTokenizer>>(std::move(tok));
    } else if (kind.ok() && *kind == "gpt2") {
      auto bpe = tokenizer::BpeTokenizerFromGguf(*file);
      // An unsupported pre-tokenizer leaves the model usable with token-id prompts.
      if (!bpe.ok() && bpe.status().code() != ErrorCode::kUnimplemented) return bpe.status();
      if (bpe.ok()) {
        impl->tokenizer = std::make_unique<tokenizer::TokenizerAdapter<tokenizer::BpeTokenizer>>(
            std::move(*bpe));
      }
    }
    // The model's own chat template when it ships one we recognise (else none: chat requests
    // are refused); read before LoadModel takes the file.
    const auto template_text = file->GetString("tokenizer.chat_template");
    const std::string template_source = template_text.ok() ? *template_text : "";
    UP_ASSIGN_OR_RETURN(impl->model, LoadModel(std::move(file), *impl->ctx, lo));
    if (!impl->tokenizer) {
      // A GGUF without a vocabulary this engine reads: token ids only.
      impl->tokenizer = tokenizer::IdsOnlyTokenizer(impl->model->config().vocab_size, -1);
    }
    auto chat = tokenizer::DetectChatTemplate(template_source, impl->model->config().architecture);
    if (chat.ok()) impl->tokenizer->set_chat_template(std::move(*chat));
  }
  const ModelConfig& cfg = impl->model->config();
  if (impl->tokenizer->vocab_size() != cfg.vocab_size) {
    return DataLoss("the tokenizer has " + std::to_string(impl->tokenizer->vocab_size()) +
                    " tokens but the model's embedding has " + std::to_string(cfg.vocab_size));
  }
  UP_ASSIGN_OR_RETURN(impl->uniprefill, ApplyUniPrefillOptions(DefaultUniPrefillConfig(cfg),
                                                               options.uniprefill, cfg));
  impl->context_size = options.context_size > 0 ? options.context_size : cfg.context_length;
  if (options.dense_prefill_chunk < 0) {
    return InvalidArgument("dense prefill chunk " + std::to_string(options.dense_prefill_chunk) +
                           " is negative (0: the whole prompt in one forward)");
  }
  if (impl->model->device() == Device::kCpu) {
    impl->dense_prefill_chunk = options.dense_prefill_chunk;
  }
  if (impl->context_size > cfg.context_length) {
    return InvalidArgument("context size " + std::to_string(impl->context_size) +
                           " exceeds the model's trained context of " +
                           std::to_string(cfg.context_length) + " tokens");
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

double KeepRatio(const std::vector<KeptTokensInfo>& kept) {
  if (kept.empty() || kept.front().alive <= 0) return 1.0;
  return static_cast<double>(kept.back().kept) / static_cast<double>(kept.front().alive);
}

bool Engine::can_tokenize() const { return impl_->tokenizer->can_encode(); }

std::vector<int32_t> Engine::Tokenize(std::string_view text, bool add_bos) const {
  return impl_->tokenizer->Encode(text, add_bos, /*parse_special=*/true);
}

std::string Engine::Detokenize(std::span<const int32_t> ids) const {
  return impl_->tokenizer->Decode(ids);
}

bool Engine::has_chat_template() const {
  return impl_->tokenizer->chat_template().has_value();
}

std::string Engine::FormatChat(const std::vector<ChatMessage>& messages) const {
  std::vector<tokenizer::ChatMessage> msgs;
  for (const auto& m : messages) msgs.push_back({m.role, m.content});
  const auto& chat = impl_->tokenizer->chat_template();
  return tokenizer::ApplyChatTemplate(msgs, /*add_generation_prompt=*/true,
                                      chat ? *chat : tokenizer::ChatTemplate{});
}

Result<GenerationResult> Engine::Generate(std::span<const int32_t> prompt,
                                          const SamplingParams& params,
                                          const TextCallback& on_text,
                                          const ProgressCallback& prefill_progress) {
  using Clock = std::chrono::steady_clock;
  if (prompt.empty()) return InvalidArgument("the prompt is empty");
  if (params.max_tokens < 1) {
    return InvalidArgument("max_tokens must be at least 1 (got " +
                           std::to_string(params.max_tokens) + ")");
  }
  UP_RETURN_IF_ERROR(ValidateSamplingParams(params, impl_->model->config().vocab_size));
  const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (static_cast<int64_t>(prompt.size()) >= impl_->context_size) {
    return OutOfRange("the prompt has " + std::to_string(prompt.size()) +
                      " tokens but the context holds " + std::to_string(impl_->context_size) +
                      "; shorten the prompt or raise --ctx-size (model maximum " +
                      std::to_string(impl_->model->config().context_length) + ")");
  }
  const int cache_tokens = static_cast<int>(std::min<int64_t>(needed, impl_->context_size));
  Model& model = *impl_->model;
  UniPrefillConfig up = impl_->uniprefill;
  if (params.uniprefill_options) {
    UP_ASSIGN_OR_RETURN(up, ApplyUniPrefillOptions(up, *params.uniprefill_options, model.config()));
  }
  std::unique_ptr<SequenceCache> cache =
      model.NewCache(cache_tokens, up.active_drop_layers());
  std::vector<float> logits(model.config().vocab_size);
  const tokenizer::TextTokenizer& tok = *impl_->tokenizer;
  Sampler sampler(ToSamplerConfig(params));
  sampler.SetPrompt(prompt);
  const StopTokens stop_tokens{params.stop_token_ids};
  const bool eos_stops = params.stop_at_end_of_turn && !params.ignore_eos;
  auto ends_generation = [&](int32_t id) {
    return stop_tokens.IsStopToken(id) || (eos_stops && tok.IsEndOfGeneration(id));
  };

  GenerationResult result;
  TextOutput out(tok, params.stop, on_text, &result.text);
  result.stats.prompt_tokens = static_cast<int>(prompt.size());
  const auto t0 = Clock::now();
  std::vector<KeptTokens> kept;
  ForwardStats fstats;
  // A dense prompt in chunks (EngineOptions::dense_prefill_chunk); the last chunk's logits are the
  // prompt's. Progress counts layers over every chunk.
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t chunk =
      up.active_drop_layers().empty() && impl_->dense_prefill_chunk > 0 ? impl_->dense_prefill_chunk
                                                                        : n;
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t begin = c * chunk, end = std::min(n, begin + chunk);
    SequenceStep step{cache.get(), prompt.subspan(begin, end - begin),
                      end == n ? logits.data() : nullptr, &kept, params.uniprefill};
    std::function<void(int64_t, int64_t)> progress;
    if (prefill_progress) {
      progress = [&, c](int64_t done, int64_t total) {
        prefill_progress(c * total + done, n_chunks * total);
      };
    }
    UP_RETURN_IF_ERROR(model.ForwardBatch(*impl_->ctx, std::span<const SequenceStep>(&step, 1),
                                          up, progress, &fstats));
  }
  result.stats.uniprefill_scoring_s = fstats.scoring_s;
  result.stats.uniprefill_selection_s = fstats.selection_s;
  result.stats.uniprefill_compaction_s = fstats.compaction_s;
  result.stats.uniprefill_host_syncs = fstats.drop_host_syncs;
  for (const KeptTokens& k : kept) result.kept.push_back({k.layer, k.kept, k.alive});
  if (params.return_first_logits) result.first_logits = logits;
  int32_t next = sampler.Sample(logits);
  sampler.Accept(next);
  const auto t_first = Clock::now();
  result.stats.ttft_s = std::chrono::duration<double>(t_first - t0).count();
  result.stats.prefill_tok_s = prompt.size() / result.stats.ttft_s;
  result.finish_reason = "length";
  for (;;) {
    if (ends_generation(next)) {  // EOS, end of turn or a stop token id: not part of the output
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(next);
    if (out.Push(next)) {  // a stop string completed
      result.finish_reason = "stop";
      break;
    }
    if (static_cast<int>(result.tokens.size()) >= params.max_tokens) break;
    if (cache->length() >= cache->max_tokens()) break;  // context full: finish as "length"
    const int32_t one[1] = {next};
    SequenceStep decode{cache.get(), one, logits.data(), nullptr};
    UP_RETURN_IF_ERROR(
        model.ForwardBatch(*impl_->ctx, std::span<const SequenceStep>(&decode, 1), up));
    next = sampler.Sample(logits);
    sampler.Accept(next);
  }
  // A stop string can still complete in the text held back at the end (an incomplete character).
  if (out.Finish()) result.finish_reason = "stop";
  const auto t_end = Clock::now();
  result.stats.generated_tokens = static_cast<int>(result.tokens.size());
  result.stats.decode_s = std::chrono::duration<double>(t_end - t_first).count();
  const int decoded = std::max(0, result.stats.generated_tokens - 1);
  result.stats.decode_tok_s = decoded > 0 ? decoded / result.stats.decode_s : 0;
  return result;
}

int Engine::context_size() const { return impl_->context_size; }
int Engine::vocab_size() const { return impl_->model->config().vocab_size; }
int Engine::threads() const { return impl_->ctx->threads(); }
int Engine::tensor_parallel_rank() const { return impl_->comm ? impl_->comm->rank() : 0; }
std::string Engine::model_name() const { return impl_->model->config().name; }
UniPrefillOptions Engine::uniprefill_options() const {
  const UniPrefillConfig& c = impl_->uniprefill;
  UniPrefillOptions o;
  o.enabled = c.enabled;
  o.drop_layers = c.drop_layers;
  const bool top_p = c.selection.mode == sparsity::SelectionMode::kTopP;
  o.mode = c.selection.mode;
  if (top_p) {
    o.top_p = c.selection.top_p;
  } else {
    o.keep_ratio = c.selection.keep_ratio;
  }
  o.block_size = c.selection.block_size;
  o.sink = c.selection.sink;
  o.last_n = c.selection.last_n;
  o.window = c.window_mode;
  o.source = c.origin;
  return o;
}

std::vector<int> Engine::full_attention_layers() const {
  const ModelConfig& m = impl_->model->config();
  std::vector<int> out;
  for (int i = 0; i < m.n_layers; ++i) {
    if (m.layer_kinds[i] == LayerKind::kFullAttention) out.push_back(i);
  }
  return out;
}

int Engine::num_layers() const { return impl_->model->config().n_layers; }

std::string Engine::uniprefill_description() const { return DescribeUniPrefill(impl_->uniprefill); }

Result<std::string> Engine::DescribeUniPrefillOptions(const UniPrefillOptions& options) const {
  UP_ASSIGN_OR_RETURN(UniPrefillConfig c,
                      ApplyUniPrefillOptions(impl_->uniprefill, options, impl_->model->config()));
  return DescribeUniPrefill(c);
}

std::string Engine::model_description() const {
  const ModelConfig& c = impl_->model->config();
  return c.name + " (" + c.architecture + ", " + std::to_string(c.n_layers) + " layers, hidden " +
         std::to_string(c.hidden) + ", " + std::to_string(c.n_heads) + "/" +
         std::to_string(c.n_kv_heads) + " heads, vocab " + std::to_string(c.vocab_size) + ")" +
         (impl_->model->device() == Device::kCuda ? " on cuda:0 (bf16)" : "");
}

}  // namespace uniprefill
