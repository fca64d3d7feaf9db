// The OpenAI HTTP API as pure functions: request bodies of /v1/completions and
// /v1/chat/completions parsed into engine settings, and the response, streaming chunk and error
// JSON built from BatchEngine updates. No I/O, no engine calls (token strings come through a
// callback), so every rule here is unit-tested without a socket.
//
// Invariants: a parse error names the offending field (ApiError::param) and says what was expected;
// unknown top-level fields are ignored (clients send many) and null means "not given"; OpenAI
// features this engine does not implement (n > 1, echo, best_of > 1, suffix, logit_bias, tools)
// are rejected with 400 rather than silently ignored. Every JSON that leaves the server is dumped
// with DumpJson (invalid UTF-8 in generated text is replaced, never thrown).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "uniprefill/batch_engine.h"
#include "uniprefill/engine.h"

namespace uniprefill::server {

enum class Endpoint { kCompletions, kChat };

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type;   // empty: derived from http_status by ErrorBody
  std::string param;  // the offending request field; empty: null
  std::string code;   // e.g. "model_not_found"; empty: null
};

// "invalid_request_error" (400, 404, 413 and other 4xx but 401), "authentication_error" (401),
// "server_error" (5xx).
std::string ErrorTypeForStatus(int http_status);
nlohmann::json ErrorBody(const ApiError& error);
// A Status from BatchEngine::Submit as an API error: InvalidArgument / OutOfRange -> 400,
// Unavailable -> 503, anything else -> 500.
ApiError ApiErrorFromStatus(const Status& status);

inline constexpr int kDefaultCompletionMaxTokens = 16;  // OpenAI's default for /v1/completions
inline constexpr int kMaxMaxTokens = 1 << 24;           // larger max_tokens: 400
inline constexpr int kMaxLogprobs = 20;                 // logprobs / top_logprobs upper bound

// One parsed request. The prompt is either text (completions: `prompt_text`; chat: `messages`)
// or token ids (`prompt_ids`, completions only).
struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  std::vector<ChatMessage> messages;
  // Engine settings; params.max_tokens is valid only when max_tokens_given or for completions
  // (default 16): a chat request without it gets the rest of the context (ResolveChatMaxTokens).
  SamplingParams params;
  bool max_tokens_given = false;
  bool seed_given = false;  // false: the server picks a random seed (OpenAI: sampling is random)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Mirrors params.logprobs: -1 none; otherwise the number of alternatives per token.
  int logprobs = -1;
};

// Parses a request body. On error returns the ApiError (400) and leaves *out unspecified. The
// defaults are OpenAI's (temperature 1, top_p 1) with vLLM's extensions (top_k, min_p,
// repetition_penalty, stop_token_ids, ignore_eos) off unless given.
std::optional<ApiError> ParseCompletionRequest(const nlohmann::json& body, Endpoint endpoint,
                                               CompletionRequest* out);

// max_tokens of a chat request that did not give one: what is left of the context after the
// prompt, capped by the server's default; at least 1 (so an overlong prompt reaches the engine and
// fails there with its own message).
int ResolveChatMaxTokens(int context_size, int prompt_tokens, int server_default);

// The identity every response and chunk of one request carries.
struct ResponseContext {
  std::string id;       // "cmpl-<n>" or "chatcmpl-<n>" (ResponseId)
  int64_t created = 0;  // Unix seconds
  std::string model;
};
std::string ResponseId(Endpoint endpoint, int64_t request_id);

// The text of one token id (Engine::Detokenize of that id alone).
using TokenTextFn = std::function<std::string(int32_t)>;

// Everything a request produced, accumulated from its updates.
struct CompletionOutput {
  std::string text;
  std::vector<SampledToken> tokens;
  bool finished = false;
  std::string finish_reason;
  std::string error;
  RequestUsage usage;
  void Append(const RequestUpdate& update);
};

// The "uniprefill" extension of responses: {"kept": [{layer, kept, alive}], "keep_ratio"} with
// keep_ratio = kept / alive of the last drop layer (1.0 when the prefill was dense).
nlohmann::json UniPrefillJson(const std::vector<KeptTokensInfo>& kept);
nlohmann::json UsageJson(const RequestUsage& usage);

// Logprobs JSON of `tokens` (null when logprobs == -1). Completions:
// {tokens, token_logprobs, top_logprobs: [{text: logprob}] (the sampled token included),
// text_offset (from *text_offset, advanced)}; chat: {content: [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json CompletionLogprobsJson(const std::vector<SampledToken>& tokens,
                                      const TokenTextFn& token_text, int* text_offset);
nlohmann::json ChatLogprobsJson(const std::vector<SampledToken>& tokens,
                                const TokenTextFn& token_text);

// The non-streaming response of a finished request.
nlohmann::json CompletionResponse(const ResponseContext& ctx, const CompletionRequest& request,
                                  const CompletionOutput& output, const TokenTextFn& token_text);

// Server-sent events: "data: <json>\n\n" and the terminating "data: [DONE]\n\n".
std::string SseEvent(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Turns one request's updates into its SSE stream: for chat a first chunk with delta {role}, then
// one chunk per update with text or tokens, a chunk with finish_reason (and the uniprefill
// extension), the usage chunk (empty choices) when include_usage, and [DONE]. An "error" finish
// becomes an error event before [DONE].
class StreamEncoder {
 public:
  StreamEncoder(const CompletionRequest& request, ResponseContext ctx, TokenTextFn token_text);
  // The events to send before any update (chat: the role chunk; completions: nothing).
  std::string Begin();
  // The events for one update; after a final update they end with [DONE].
  std::string Encode(const RequestUpdate& update);

 private:
  nlohmann::json Chunk(nlohmann::json choice) const;
  Endpoint endpoint_;
  bool include_usage_;
  bool logprobs_;
  ResponseContext ctx_;
  TokenTextFn token_text_;
  int text_offset_ = 0;
};

// JSON text as sent: compact, invalid UTF-8 replaced by U+FFFD.
std::string DumpJson(const nlohmann::json& j);

}  // namespace uniprefill::server
