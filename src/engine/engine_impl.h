// Engine internals shared by Engine (engine.cc) and BatchEngine (batch_engine.cc): the model, its
// tokenizer and settings, and the per-request helpers both use, so a request means the same thing
// (same validation, same sampling, same streamed text) whichever runs it. Not a public header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "model/model.h"
#include "dist/communicator.h"
#include "sparsity/uniprefill_config.h"
#include "tokenizer/spm_tokenizer.h"  // StreamDecoder
#include "tokenizer/tokenizer.h"
#include "uniprefill/engine.h"

namespace uniprefill {

struct Engine::Impl {
  std::unique_ptr<DeviceContext> ctx;
  std::unique_ptr<tokenizer::TextTokenizer> tokenizer;
  std::unique_ptr<dist::Communicator> comm;  // tensor parallel; declared before the model using it
  double comm_timeout_s = 60;  // its collectives' timeout (dist::CommOptions)
  std::unique_ptr<Model> model;
  UniPrefillConfig uniprefill;
  int context_size = 0;
  int dense_prefill_chunk = 0;  // EngineOptions::dense_prefill_chunk (CPU models; 0: whole)
};

// Engine::Load's body on a given tensor-parallel communicator (null: none), so tests can run
// ranks as threads (dist::MakeThreadCommunicators; on one GPU, wrapped by
// dist::MakeStagedDeviceCommunicator) or a world of one through NCCL
// (dist::MakeLocalCommunicator) with the product's engine, serving loop and followers.
// Engine::Load starts the MPI world for --tensor-parallel N and calls this. On the GPU a
// communicator without device collectives is wrapped in NCCL's on `cuda_device`, which the
// context also uses. The model is this rank's shard whenever `comm` is set (world 1 included).
struct EngineLoader {
  static Result<std::unique_ptr<Engine>> Load(const EngineOptions& options,
                                              std::unique_ptr<dist::Communicator> comm,
                                              int cuda_device,
                                              const ProgressCallback& progress = nullptr);
};

namespace engine_internal {


// `base` with the set fields of `o` applied, validated against the model.
inline Result<UniPrefillConfig> ApplyUniPrefillOptions(UniPrefillConfig c,
                                                       const UniPrefillOptions& o,
                                                       const ModelConfig& model) {
  c.enabled = o.enabled;
  if (o.drop_layers || o.mode || o.top_p || o.keep_ratio || o.block_size || o.sink || o.last_n ||
      o.window) {
    c.origin = o.source;
  }
  if (o.drop_layers) c.drop_layers = *o.drop_layers;
  if (o.mode) c.selection.mode = *o.mode;
  if (o.window) c.window_mode = *o.window;
  if (o.top_p) c.selection.top_p = *o.top_p;
  if (o.keep_ratio) c.selection.keep_ratio = *o.keep_ratio;
  if (o.block_size) c.selection.block_size = *o.block_size;
  if (o.sink) c.selection.sink = *o.sink;
  if (o.last_n) c.selection.last_n = *o.last_n;
  UP_RETURN_IF_ERROR(ValidateUniPrefillConfig(c, model));
  return c;
}

inline std::string DescribeUniPrefill(const UniPrefillConfig& c) {
  if (!c.enabled) return "off (dense prefill)";
  const sparsity::SelectionParams& p = c.selection;
  std::string mode = p.mode == sparsity::SelectionMode::kTopP
                         ? "top-p " + std::to_string(p.top_p).substr(0, 5)
                         : "fixed-ratio " + std::to_string(p.keep_ratio).substr(0, 4);
  return "on, drop layers " + LayerListToString(c.drop_layers) + ", " + mode + ", G " +
         std::to_string(p.block_size) + ", S " + std::to_string(p.sink) + ", n " +
         std::to_string(p.last_n) +
         (c.window_mode == WindowMode::kPosition ? ", windows by position" : "") + " (" + c.origin +
         ")";
}

inline SamplerConfig ToSamplerConfig(const SamplingParams& p) {
  SamplerConfig c{p.temperature, p.top_k, p.top_p, p.seed};
  c.min_p = p.min_p;
  c.repetition_penalty = p.repetition_penalty;
  c.penalty_last_n = p.penalty_last_n;
  c.presence_penalty = p.presence_penalty;
  c.frequency_penalty = p.frequency_penalty;
  return c;
}

// A request's sampling and stop settings; the message names the field and the value.
inline Status ValidateSamplingParams(const SamplingParams& p, int vocab_size) {
  UP_RETURN_IF_ERROR(ValidateSamplerConfig(ToSamplerConfig(p)));
  UP_RETURN_IF_ERROR(ValidateStopStrings(p.stop));
  return ValidateStopTokenIds(p.stop_token_ids, vocab_size);
}

// The generated text on its way out: detokenized token by token, then held back by the stop
// matcher while it could still become a stop string. Whatever is final goes to the result's text
// and to the callback alike, so the two always agree.
class TextOutput {
 public:
  TextOutput(const tokenizer::TextTokenizer& tok, std::vector<std::string> stops,
             const TextCallback& on_text, std::string* text)
      : stream_([&tok](int32_t id, bool special) { return tok.TokenToPiece(id, special); }),
        stop_(std::move(stops)),
        on_text_(on_text),
        text_(text) {}

  // Adds a generated token's text. True when a stop string completed (nothing follows).
  bool Push(int32_t id) {
    StopResult r = stop_.Push(stream_.Push(id));
    Emit(r.emit);
    return r.stopped;
  }

  // The generation ended: emits what was held back. True when that completed a stop string.
  bool Finish() {
    if (stop_.stopped()) return true;
    StopResult r = stop_.Push(stream_.Finish());
    Emit(r.emit);
    if (r.stopped) return true;
    Emit(stop_.Flush());
    return false;
  }

 private:
  void Emit(const std::string& piece) {
    if (piece.empty()) return;
    *text_ += piece;
    if (on_text_) on_text_(piece);
  }

  tokenizer::StreamDecoder stream_;
  StopMatcher stop_;
  TextCallback on_text_;
  std::string* text_;
};

}  // namespace engine_internal
}  // namespace uniprefill
