#include "run_command.h"

#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/stop_matcher.h"
#include "model_names.h"
#include "progress_bar.h"
#include "uniprefill/engine.h"

namespace uniprefill::cli {
namespace {

constexpr const char* kModelFile = "gemma-3-270m-q4_k_m.gguf";

double PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

bool ReadFile(const std::string& path, std::string* out, std::string* error) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    *error = "prompt file '" + path + "' does not exist or is not a regular file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read prompt file '" + path + "'";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::string FormatFloat(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A float in [lo, hi], or (lo, hi] when lo_open; unlike CLI::Range it also rejects NaN. The ranges
// are the engine's (ValidateSamplerConfig), so a bad value fails here with the flag named.
CLI::Validator FloatIn(float lo, float hi, bool lo_open = false) {
  const std::string range = (lo_open ? "(" : "[") + FormatFloat(lo) + ", " + FormatFloat(hi) +
                            (std::isinf(hi) ? ")" : "]");
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        float v = 0;
        const bool ok = CLI::detail::lexical_cast(input, v) && (lo_open ? v > lo : v >= lo) &&
                        v <= hi && std::isfinite(v);
        return ok ? std::string() : "Value " + input + " not in " + range;
      },
      "FLOAT in " + range);
}

}  // namespace

std::string DefaultModelPath() {
  const std::filesystem::path source_models = std::filesystem::path(UP_SOURCE_DIR) / "models";
  if (std::filesystem::exists(source_models / kModelFile)) return source_models / kModelFile;
  return (std::filesystem::path("models") / kModelFile).string();
}

void AddRunCommand(CLI::App& app, RunOptions& o) {
  CLI::App* run = app.add_subcommand("run", "Answer one prompt: stream the generated text and "
                                            "print TTFT, prefill and decode speed");
  o.model = DefaultModelPath();
  run->add_option("-m,--model", o.model,
                  "Model: a GGUF file, a Hugging Face checkpoint folder, or a short name of one in "
                  "models/ (" + KnownModelNames() + ")")
      ->capture_default_str();
  auto* prompt = run->add_option("-p,--prompt", o.prompt, "Prompt text");
  auto* file = run->add_option("-f,--prompt-file", o.prompt_file, "Read the prompt from a file");
  auto* tokens = run->add_option("--prompt-tokens-file", o.prompt_tokens_file,
                                 "Read the prompt as a JSON array of token ids (benchmarks)");
  prompt->excludes(file);
  prompt->excludes(tokens);
  file->excludes(tokens);
  run->add_flag("--chat", o.chat, "Wrap the prompt in the model's chat template (a user turn)");
  run->add_option("--system", o.system, "System message (with --chat)");
  run->add_option("-n,--max-tokens", o.max_tokens, "Most tokens to generate")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  run->add_option("--temperature", o.temperature, "Sampling temperature; 0 = greedy")
      ->check(FloatIn(0.0f, 2.0f))->capture_default_str();
  run->add_option("--top-k", o.top_k, "Sample among the k most likely tokens (0 = all)")
      ->check(CLI::Range(0, 1 << 30))->capture_default_str();
  run->add_option("--top-p", o.top_p, "Nucleus sampling mass (1 = off)")
      ->check(FloatIn(0.0f, 1.0f, /*lo_open=*/true))->capture_default_str();
  run->add_option("--min-p", o.min_p,
                  "Drop tokens less likely than min-p times the most likely one (0 = off)")
      ->check(FloatIn(0.0f, 1.0f))->capture_default_str();
  run->add_option("--seed", o.seed, "Random seed for sampling")->capture_default_str();
  run->add_option("--repeat-penalty", o.repeat_penalty,
                  "Penalise tokens of the last --repeat-last-n tokens (prompt and output): "
                  "logit / r if positive, logit * r otherwise (1 = off)")
      ->check(FloatIn(0.0f, std::numeric_limits<float>::infinity(), /*lo_open=*/true))
      ->capture_default_str();
  run->add_option("--repeat-last-n", o.repeat_last_n,
                  "Tokens --repeat-penalty looks back over (0 = none, -1 = all)")
      ->check(CLI::Range(-1, 1 << 30))->capture_default_str();
  run->add_option("--presence-penalty", o.presence_penalty,
                  "Subtract from the logit of every token already generated (OpenAI; 0 = off)")
      ->check(FloatIn(-2.0f, 2.0f))->capture_default_str();
  run->add_option("--frequency-penalty", o.frequency_penalty,
                  "Subtract per earlier occurrence in the generated text (OpenAI; 0 = off)")
      ->check(FloatIn(-2.0f, 2.0f))->capture_default_str();
  run->add_option("--stop", o.stop,
                  "Stop before this string (repeatable, at most " +
                      std::to_string(kMaxStopStrings) +
                      "; the string is not printed). In bash, $'\\n' is a newline")
      ->allow_extra_args(false);
  run->add_option("--stop-token-id", o.stop_token_ids,
                  "Stop when this token id is sampled (repeatable; the token is not printed)")
      ->check(CLI::Range(0, std::numeric_limits<int32_t>::max()))
      ->allow_extra_args(false);
  run->add_option("-t,--threads", o.threads, "CPU threads (0 = every core)")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  AddDeviceFlags(*run, o.device);
  run->add_option("-c,--ctx-size", o.ctx_size, "Context length (0 = the model's)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  run->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past end-of-turn tokens");
  run->add_flag("--f32-decode", o.f32_decode,
                "Decode with f32 activations in every matmul (exact; default quantises the one "
                "activation row to int16 for ~2x faster integer kernels)");
  run->add_option("--prefill-chunk", o.prefill_chunk,
                  "CPU: prefill a dense prompt (no UniPrefill drop) in chunks of at most this "
                  "many tokens, so memory follows the chunk, not the prompt (0: whole prompt; "
                  "2048 at 16K: ~38% less peak memory, ~25% slower prefill)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  run->add_flag("-q,--quiet", o.quiet, "No progress bars");
  run->add_option("--json", o.json_out, "Also write the result and timings as JSON to this file");
  AddUniPrefillFlags(*run, o.uniprefill);
}

namespace {

// Parses a JSON array of token ids; an error message otherwise.
bool ParseTokenIds(const std::string& path, std::vector<int32_t>* ids, std::string* error) {
  std::string json_text;
  if (!ReadFile(path, &json_text, error)) return false;
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.empty()) {
    *error = "--prompt-tokens-file '" + path + "' must hold a non-empty JSON array of token ids";
    return false;
  }
  for (const auto& v : j) {
    if (!v.is_number_integer()) {
      *error = "--prompt-tokens-file '" + path + "' holds a non-integer entry";
      return false;
    }
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      *error = "--prompt-tokens-file holds token id " + std::to_string(id) +
               ", outside any vocabulary";
      return false;
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return true;
}

// The prompt as text (--prompt, --prompt-file) or token ids (--prompt-tokens-file).
bool ReadPrompt(const RunOptions& o, std::string* text, std::vector<int32_t>* ids,
                std::string* error) {
  *text = o.prompt;
  if (!o.prompt_file.empty() && !ReadFile(o.prompt_file, text, error)) return false;
  if (!o.prompt_tokens_file.empty() && !ParseTokenIds(o.prompt_tokens_file, ids, error)) {
    return false;
  }
  if (text->empty() && ids->empty()) {
    *error = "no prompt: pass --prompt TEXT, --prompt-file FILE or --prompt-tokens-file FILE";
    return false;
  }
  return true;
}

bool CheckStopStrings(const std::vector<std::string>& stops, std::string* error) {
  if (std::ssize(stops) > kMaxStopStrings) {
    *error = "--stop may be given at most " + std::to_string(kMaxStopStrings) + " times (got " +
             std::to_string(stops.size()) + ")";
    return false;
  }
  for (const std::string& s : stops) {
    if (s.empty()) {
      *error = "--stop '' is empty; give the text to stop at";
      return false;
    }
  }
  return true;
}

// Stop token ids must exist in the model, known only once it is loaded.
bool CheckStopTokenIds(const std::vector<int32_t>& ids, int vocab_size, std::string* error) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      *error = "--stop-token-id " + std::to_string(id) + " is not a token id of this model (0 to " +
               std::to_string(vocab_size - 1) + ")";
      return false;
    }
  }
  return true;
}

// The sampling and stop flags as the engine's request settings.
SamplingParams ToSamplingParams(const RunOptions& o) {
  SamplingParams sp;
  sp.max_tokens = o.max_tokens;
  sp.temperature = o.temperature;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.seed = o.seed;
  sp.min_p = o.min_p;
  sp.repetition_penalty = o.repeat_penalty;
  sp.penalty_last_n = o.repeat_last_n;
  sp.presence_penalty = o.presence_penalty;
  sp.frequency_penalty = o.frequency_penalty;
  sp.stop = o.stop;
  sp.stop_token_ids = o.stop_token_ids;
  sp.ignore_eos = o.ignore_eos;
  return sp;
}

nlohmann::json KeptJson(const GenerationResult& r) {
  nlohmann::json kept = nlohmann::json::array();
  for (const KeptTokensInfo& k : r.kept) {
    kept.push_back({{"request", 0}, {"layer", k.layer}, {"kept", k.kept}, {"alive", k.alive}});
  }
  return kept;
}

// The result and timings as JSON (benchmarks read this).
// Tensor parallel: rank r > 0 writes PATH.rank<r> beside rank 0's PATH (every rank's kept lists
// and memory, for the tests that compare them).
bool WriteResultJson(const RunOptions& o, const GenerationResult& r, int threads, int rank) {
  const GenerationStats& s = r.stats;
  const nlohmann::json j = {{"model", o.model},
                            {"prompt_tokens", s.prompt_tokens},
                            {"generated_tokens", s.generated_tokens},
                            {"tokens", r.tokens},
                            {"text", r.text},
                            {"finish_reason", r.finish_reason},
                            {"ttft_s", s.ttft_s},
                            {"prefill_tok_s", s.prefill_tok_s},
                            {"decode_tok_s", s.decode_tok_s},
                            {"threads", threads},
                            {"uniprefill", KeptJson(r)},
                            {"keep_ratio", KeepRatio(r.kept)},
                            {"peak_rss_mib", PeakRssMiB()},
                            {"tensor_parallel", o.device.tensor_parallel},
                            {"rank", rank}};
  std::ofstream out(rank == 0 ? o.json_out : o.json_out + ".rank" + std::to_string(rank));
  if (!out) return false;
  out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return static_cast<bool>(out);
}

}  // namespace

int RunCommand(const RunOptions& o) {
  std::string prompt_text, error;
  std::vector<int32_t> token_ids;
  if (!CheckStopStrings(o.stop, &error) || !ReadPrompt(o, &prompt_text, &token_ids, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }

  EngineOptions eo;
  eo.model_path = o.model;
  eo.threads = o.threads;
  o.device.ApplyTo(eo);
  eo.context_size = o.ctx_size;
  eo.f32_decode = o.f32_decode;
  eo.dense_prefill_chunk = o.prefill_chunk;
  std::unique_ptr<Engine> loaded = LoadEngineWithProgress(eo, o.uniprefill, o.quiet);
  if (!loaded) return 1;
  Engine& engine = *loaded;
  if (!CheckStopTokenIds(o.stop_token_ids, engine.vocab_size(), &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  if (!o.quiet) {
    std::fprintf(stderr, "model: %s | %d threads | context %d\n",
                 engine.model_description().c_str(), engine.threads(), engine.context_size());
    std::fprintf(stderr, "uniprefill: %s\n", engine.uniprefill_description().c_str());
  }

  std::string text = prompt_text;
  if (o.chat) {
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", prompt_text});
    text = engine.FormatChat(messages);
  }
  if (token_ids.empty() && !engine.can_tokenize()) {
    std::fprintf(stderr, "error: model '%s' has no tokenizer this engine can read (no "
                 "tokenizer.json, or an unsupported GGUF vocabulary); pass the prompt as token ids "
                 "with --prompt-tokens-file\n", o.model.c_str());
    return 1;
  }
  // Out-of-vocabulary ids from --prompt-tokens-file are rejected by the model with the id named.
  const std::vector<int32_t> ids =
      token_ids.empty() ? engine.Tokenize(text, /*add_bos=*/true) : token_ids;

  const SamplingParams sp = ToSamplingParams(o);
  ProgressBar prefill_bar("prefill", "layers", !o.quiet && ids.size() > 1024);
  bool first = true;
  auto result = engine.Generate(
      ids, sp,
      [&](std::string_view piece) {
        if (first) prefill_bar.Finish();
        first = false;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      },
      [&](int64_t d, int64_t t) { prefill_bar.Update(d, t); });
  prefill_bar.Finish();
  std::fputc('\n', stdout);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().message().c_str());
    return 1;
  }
  for (const KeptTokensInfo& k : result->kept) {
    std::fprintf(stderr, "uniprefill: request 0 layer %d kept %d/%d tokens\n", k.layer, k.kept,
                 k.alive);
  }
  const GenerationStats& s = result->stats;
  std::fprintf(stderr,
               "\nprompt %d tokens | TTFT %.3f s | prefill %.1f tok/s | decode %.1f tok/s "
               "(%d tokens, %s) | peak RSS %.0f MiB\n",
               s.prompt_tokens, s.ttft_s, s.prefill_tok_s, s.decode_tok_s, s.generated_tokens,
               result->finish_reason.c_str(), PeakRssMiB());
  if (!o.json_out.empty() &&
      !WriteResultJson(o, *result, engine.threads(), engine.tensor_parallel_rank())) {
    std::fprintf(stderr, "error: cannot write --json file '%s'\n", o.json_out.c_str());
    return 1;
  }
  return 0;
}

}  // namespace uniprefill::cli
