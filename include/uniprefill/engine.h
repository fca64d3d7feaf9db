// The public C++ API of the uniprefill engine: load a model file, tokenize, generate.
//
// This header is what applications (the command line, the HTTP server) build on; it exposes no
// tensors, kernels or CUDA types. One Engine holds one model and runs one generation at a time;
// BatchEngine (uniprefill/batch_engine.h) serves many at once over the same Engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "uniprefill/uniprefill_modes.h"

namespace uniprefill {

// UniPrefill settings; an unset field takes the model's default (see docs/uniprefill.md).
struct UniPrefillOptions {
  bool enabled = true;
  std::optional<std::vector<int>> drop_layers;  // full-attention layer indices, ascending
  std::optional<SelectionMode> mode;             // top-p or fixed-ratio (uniprefill_modes.h)
  std::optional<float> top_p;                    // p of the top-p mode
  std::optional<float> keep_ratio;               // fraction of blocks in the fixed-ratio mode
  std::optional<int> block_size;                 // G
  std::optional<int> sink;                       // S
  std::optional<int> last_n;                     // n
  std::optional<WindowMode> window;              // sliding windows after a drop: alive or position
  std::string source = "command line";  // where the set fields came from (shown in descriptions)
};

struct EngineOptions {
  std::string model_path;
  int threads = 0;        // <= 0: every core
  // "cpu", or "cuda" (GPU 0: bf16 weights and KV cache on the device; needs a CUDA build).
  std::string device = "cpu";
  int context_size = 0;   // <= 0: the model's own context length
  // The CPU kernels' instruction-set level: "auto" (the best this CPU has), or one of "avx2",
  // "avx512", "avx512-vnni", "avx512-bf16", "amx-bf16" to force it (a level this CPU lacks is an
  // error).
  std::string cpu_isa = "auto";
  // Decode matmuls in f32 throughout instead of on int16-quantised activations (exact, slower).
  bool f32_decode = false;
  // CPU prefill GEMMs: "sgemm" (OpenBLAS on f32 copies of the weights made at load, ~4 bytes per
  // weight) or "int16" (on the stored quantised weights with int16 activations, no copies where
  // every part of a weight has an int16 kernel) or "int8" (as int16, but every product of several
  // rows, batched decode steps included, on int8 activations with the VNNI kernels where the CPU
  // has them) or "bf16" (as int16, but prefill chunks of more than 64 rows, their linear layers
  // and attention, on bf16 with AMX tiles where the CPU has them). docs/performance.md has the
  // trade.
  std::string prefill_gemm = "sgemm";
  // CPU: element type of the cached keys and values, "f16" (half the bytes a decode step streams
  // per cached token and half the KV memory; llama.cpp's default cache type) or "f32".
  std::string kv_cache_dtype = "f16";
  // CPU, Engine::Generate: a dense prompt (no UniPrefill drop active) is prefilled in chunks of at
  // most this many tokens, each attending the cached prefix plus itself (the same attention), so
  // sliding-window layers keep window - 1 + chunk rows and the activations are sized by the chunk,
  // not the prompt. 0 (default): the whole prompt in one forward. UniPrefill prompts always run
  // whole (their selection needs the whole segment; serve chunks them segment by segment).
  // Measured (Gemma 3 270M, 16K dense prompt, 2 threads, docs/performance.md): 2048 cuts peak RSS
  // 1588-1650 -> 1014-1036 MiB but prefill 363-387 -> 261-292 tok/s (a chunk's attention over
  // its cached prefix runs slower than the whole prompt's causal attention), so it is opt-in.
  int dense_prefill_chunk = 0;
  // With device "cuda": the prefill attention kernel, "auto" (cuDNN's fused attention where its
  // masks express the layer when libcudnn 9 loads, else ours), "ours" (the engine's flash
  // attention) or "cudnn" (as auto, but a missing cuDNN is an error).
  std::string gpu_attention = "auto";
  // With device "cuda": run decode steps as CUDA graphs (LoadOptions::gpu_decode_graphs; off by
  // default, measured slower).
  bool gpu_decode_graphs = false;
  // GPU: split-KV for prefill chunks over a deep cached prefix (LoadOptions field of this name;
  // 0: never split).
  int gpu_prefix_split_min_keys = 2048;
  // GPU: which of cuDNN's attention plans each shape bucket keeps (LoadOptions::
  // gpu_cudnn_autotune): "fastest" (each of its heuristics' plans timed once at start-up; the
  // choice can follow the machine's load then, and plans round differently) or "first" (the
  // heuristics' first plan: the same plan on every run, so logits repeat from run to run).
  std::string gpu_cudnn_plan = "fastest";
  // Tensor parallel ranks (CPU): > 1 runs this process as one rank of an MPI world of exactly
  // that many processes (`mpirun -np N`), each holding 1/N of the heads and FFN columns; every
  // rank runs the same requests and gets the same tokens. Serving: BatchEngine::Start on rank 0,
  // BatchEngine::Follow on the others.
  int tensor_parallel = 1;
  // Seconds a collective waits for the other ranks before the job is declared broken (a rank
  // died or hangs): the longest one rank may fall behind another between two collectives.
  double tensor_parallel_timeout_s = 60;
  UniPrefillOptions uniprefill;
};

// One request's sampling and stop settings (OpenAI / vLLM names in the comments). Generate checks
// them and returns InvalidArgument naming the field; the ranges are those of
// ValidateSamplerConfig (engine/sampler.h) and ValidateStop* (engine/stop_matcher.h).
struct SamplingParams {
  int max_tokens = 128;
  float temperature = 0.0f;  // 0: greedy; [0, 2]
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // (0, 1]; 1: off
  uint64_t seed = 0;
  bool stop_at_end_of_turn = true;  // stop at EOS / <end_of_turn> (unless ignore_eos)
  float min_p = 0.0f;               // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off (llama.cpp --repeat-penalty)
  int penalty_last_n = 64;          // repetition window over prompt + output; 0: none, -1: all
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // [-2, 2], generated tokens only
  // Stop strings (at most 4, none empty): generation ends when the text contains one; the text
  // returned and streamed ends right before it.
  std::vector<std::string> stop;
  // Token ids that end generation when sampled (not part of the text, like EOS).
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;  // keep generating past EOS / end-of-turn (stop_token_ids still stop)
  bool uniprefill = true;  // false: this request's prefill stays dense (same cache layout)
  bool return_first_logits = false;  // fill GenerationResult::first_logits (fidelity evaluation)
  // BatchEngine only: -1 returns no logprobs; 0..20 returns each output token's logprob and that
  // many most likely alternatives (OpenAI `logprobs` / `top_logprobs`).
  int logprobs = -1;
  // This request's UniPrefill settings: set fields override the engine's (calibration sweeps,
  // per-request API fields). Invalid values make Generate return InvalidArgument.
  std::optional<UniPrefillOptions> uniprefill_options;
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct GenerationStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double ttft_s = 0;        // prompt in -> first token out (prefill + first sample)
  double prefill_tok_s = 0;
  double decode_s = 0;      // generation after the first token
  double decode_tok_s = 0;  // (generated - 1) / decode_s
  // UniPrefill's own work inside the prefill (scoring, selection, compaction).
  double uniprefill_scoring_s = 0, uniprefill_selection_s = 0, uniprefill_compaction_s = 0;
  // On the GPU: host syncs at drop layers to learn kept counts (top-p: one per drop layer;
  // fixed ratio: none).
  int uniprefill_host_syncs = 0;
};

// What one UniPrefill drop layer kept of a prefill.
struct KeptTokensInfo {
  int layer = 0;
  int kept = 0;
  int alive = 0;
};

// The keep ratio of one prefill: the tokens its last drop layer kept / the tokens it started with
// (alive at its first drop layer: the prompt, or prompt + output so far when a preempted request is
// recomputed). 1 when nothing was selected. This is the one meaning of "keep_ratio" wherever the
// engine reports one (HTTP responses, /metrics, run --json, bench-prefill, eval, calibrate;
// docs/uniprefill.md "Reported figures").
double KeepRatio(const std::vector<KeptTokensInfo>& kept);

struct GenerationResult {
  // Generated ids, including the one that completed a stop string; never EOS or a stop token id.
  std::vector<int32_t> tokens;
  std::string text;  // exactly the concatenation of the pieces passed to on_text
  // "stop" (EOS / end of turn, a stop token id or a stop string) or "length" (max_tokens or the
  // context is full).
  std::string finish_reason;
  GenerationStats stats;
  std::vector<KeptTokensInfo> kept;  // per drop layer that selected (empty: dense or short prompt)
  std::vector<float> first_logits;   // [vocab] after the prompt, when asked for
};

// (done, total) progress of a long step (loading, prefill).
using ProgressCallback = std::function<void(int64_t done, int64_t total)>;
// Receives each generated token's text as soon as it is sampled.
using TextCallback = std::function<void(std::string_view piece)>;

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Load(const EngineOptions& options,
                                              const ProgressCallback& progress = nullptr);
  ~Engine();

  // False when the model came without a tokenizer (a checkpoint folder lacking tokenizer.json):
  // prompts must then be token ids.
  bool can_tokenize() const;
  // Token ids of text (special tokens such as <start_of_turn> are recognised).
  std::vector<int32_t> Tokenize(std::string_view text, bool add_bos) const;
  std::string Detokenize(std::span<const int32_t> ids) const;
  // True when the engine has a built-in chat template for this model (Gemma today).
  bool has_chat_template() const;
  // The model's chat format for these messages, ending with the assistant's turn opening.
  std::string FormatChat(const std::vector<ChatMessage>& messages) const;

  // Prefills the prompt and generates. OutOfRange if prompt + max_tokens exceed the context.
  Result<GenerationResult> Generate(std::span<const int32_t> prompt, const SamplingParams& params,
                                    const TextCallback& on_text = nullptr,
                                    const ProgressCallback& prefill_progress = nullptr);

  int context_size() const;
  int vocab_size() const;
  int threads() const;
  int tensor_parallel_rank() const;  // 0 without tensor parallelism
  std::string model_name() const;
  std::string model_description() const;  // one line: architecture, layers, sizes
  std::string uniprefill_description() const;  // one line: on/off, drop layers, mode, G/S/n
  // The engine's UniPrefill settings as options (every field set; source "engine").
  UniPrefillOptions uniprefill_options() const;
  // Full-attention layer indices: the layers that can select tokens (drop layers).
  std::vector<int> full_attention_layers() const;
  int num_layers() const;
  // The same line for the engine's settings with `options` applied (InvalidArgument if invalid).
  Result<std::string> DescribeUniPrefillOptions(const UniPrefillOptions& options) const;

 private:
  friend class BatchEngine;  // runs the same model, tokenizer and settings in batches
  friend struct EngineLoader;  // engine/engine_impl.h: Load on a given tensor-parallel transport
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uniprefill
