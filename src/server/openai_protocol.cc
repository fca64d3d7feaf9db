#include "server/openai_protocol.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "engine/uniprefill_options_json.h"

namespace uniprefill::server {
namespace {

using nlohmann::json;

ApiError BadRequest(std::string message, std::string param) {
  return ApiError{400, std::move(message), "", std::move(param), ""};
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// The field when present and not null.
const json* Field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> GetBool(const json& body, const char* key, bool* out) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return BadRequest(std::string(key) + " must be true or false", key);
  *out = v->get<bool>();
  return std::nullopt;
}

// An integer in [lo, hi]; *given says whether it was present.
std::optional<ApiError> GetInt(const json& body, const char* key, int64_t lo, int64_t hi,
                               int64_t* out, bool* given = nullptr) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return BadRequest(std::string(key) + " must be an integer", key);
  // Integers beyond int64 arrive as unsigned; both are out of any range we accept.
  const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX);
  const int64_t x = too_big ? INT64_MAX : v->get<int64_t>();
  if (x < lo || x > hi) {
    return BadRequest(std::string(key) + " must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi) + " (got " + v->dump() + ")",
                      key);
  }
  *out = x;
  if (given) *given = true;
  return std::nullopt;
}

// A number in [lo, hi] (or (lo, hi] when lo_open).
std::optional<ApiError> GetFloat(const json& body, const char* key, double lo, double hi,
                                 bool lo_open, float* out) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return BadRequest(std::string(key) + " must be a number", key);
  const double x = v->get<double>();
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
  if (!ok) {
    const std::string range = !lo_open ? "between " + Num(lo) + " and " + Num(hi)
                              : std::isinf(hi)
                                  ? "greater than " + Num(lo)
                                  : "greater than " + Num(lo) + " and at most " + Num(hi);
    return BadRequest(std::string(key) + " must be " + range + " (got " + v->dump() + ")", key);
  }
  *out = static_cast<float>(x);
  return std::nullopt;
}

// A field whose only supported value is its default: `ok(value)` says whether the value is fine.
template <typename Ok>
std::optional<ApiError> OnlyDefault(const json& body, const char* key, Ok ok,
                                    const std::string& message) {
  const json* v = Field(body, key);
  if (v && !ok(*v)) return BadRequest(message, key);
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, CompletionRequest* out) {
  const json* p = Field(body, "prompt");
  if (!p) return BadRequest("prompt is required (a string or an array of token ids)", "prompt");
  if (p->is_string()) {
    out->prompt_text = p->get<std::string>();
    return std::nullopt;
  }
  if (!p->is_array()) {
    return BadRequest("prompt must be a string or an array of token ids", "prompt");
  }
  if (p->empty()) return BadRequest("prompt must not be empty", "prompt");
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    if (p->size() > 1) {
      return BadRequest("batched prompts are not supported; send one request per prompt", "prompt");
    }
    if ((*p)[0].is_string()) {
      out->prompt_text = (*p)[0].get<std::string>();
      return std::nullopt;
    }
    p = &(*p)[0];  // [[ids]]: one tokenized prompt
    if (p->empty()) return BadRequest("prompt must not be empty", "prompt");
  }
  for (const json& id : *p) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return BadRequest("prompt must be a string or an array of token ids (non-negative integers)",
                        "prompt");
    }
    out->prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& body, CompletionRequest* out) {
  const json* m = Field(body, "messages");
  if (!m) return BadRequest("messages is required (an array of {role, content})", "messages");
  if (!m->is_array() || m->empty()) {
    return BadRequest("messages must be a non-empty array of {role, content}", "messages");
  }
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object())
      return BadRequest(where + " must be an object {role, content}", "messages");
    const json* role = Field(msg, "role");
    if (!role || !role->is_string()) {
      return BadRequest(where + ".role must be \"system\", \"user\" or \"assistant\"", "messages");
    }
    ChatMessage cm;
    cm.role = role->get<std::string>();
    if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name for system
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant") {
      return BadRequest(
          where + ".role '" + cm.role + "' is not supported (system, user or assistant)",
          "messages");
    }
    const json* content = Field(msg, "content");
    if (!content) {
      if (cm.role != "assistant") return BadRequest(where + ".content is required", "messages");
    } else if (content->is_string()) {
      cm.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        const json* type = part.is_object() ? Field(part, "type") : nullptr;
        const json* text = part.is_object() ? Field(part, "text") : nullptr;
        if (!type || *type != "text" || !text || !text->is_string()) {
          return BadRequest(where +
                                ".content parts must be {\"type\": \"text\", \"text\": ...} "
                                "(only text is supported)",
                            "messages");
        }
        cm.content += text->get<std::string>();
      }
    } else {
      return BadRequest(where + ".content must be a string or an array of text parts", "messages");
    }
    out->messages.push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const json& body, SamplingParams* p) {
  const json* s = Field(body, "stop");
  if (!s) return std::nullopt;
  std::vector<std::string> stops;
  if (s->is_string()) {
    stops.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    for (const json& x : *s) {
      if (!x.is_string()) return BadRequest("stop must be a string or an array of strings", "stop");
      stops.push_back(x.get<std::string>());
    }
  } else {
    return BadRequest("stop must be a string or an array of strings", "stop");
  }
  if (stops.size() > 4) {
    return BadRequest("stop may hold at most 4 strings (got " + std::to_string(stops.size()) + ")",
                      "stop");
  }
  for (std::string& x : stops) {
    if (!x.empty()) p->stop.push_back(std::move(x));  // an empty stop string can never match
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStopTokenIds(const json& body, SamplingParams* p) {
  const json* s = Field(body, "stop_token_ids");
  if (!s) return std::nullopt;
  const std::string msg = "stop_token_ids must be an array of token ids (non-negative integers)";
  if (!s->is_array()) return BadRequest(msg, "stop_token_ids");
  for (const json& x : *s) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) {
      return BadRequest(msg, "stop_token_ids");
    }
    p->stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return std::nullopt;
}

// Every integer in the uniprefill object (drop_layers' elements too) must fit an int before the
// engine's reader narrows it: 4294967360 would otherwise become 64.
std::optional<ApiError> CheckUniPrefillIntegers(const json& u) {
  constexpr int64_t lo = std::numeric_limits<int>::min(), hi = std::numeric_limits<int>::max();
  for (auto it = u.begin(); it != u.end(); ++it) {
    const json& v = it.value();
    const std::vector<json> values = v.is_array() ? std::vector<json>(v.begin(), v.end())
                                                  : std::vector<json>{v};
    for (const json& x : values) {
      if (!x.is_number_integer()) continue;
      const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t(hi)
                                               : x.get<int64_t>() >= lo && x.get<int64_t>() <= hi;
      if (!fits) {
        return BadRequest("uniprefill." + it.key() + " must be between " + std::to_string(lo) +
                              " and " + std::to_string(hi) + " (got " + x.dump() + ")",
                          "uniprefill");
      }
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseUniPrefill(const json& body, SamplingParams* p) {
  const json* u = Field(body, "uniprefill");
  if (!u) return std::nullopt;
  if (u->is_boolean()) {
    p->uniprefill = u->get<bool>();
    return std::nullopt;
  }
  if (!u->is_object()) {
    return BadRequest("uniprefill must be true, false or an object of UniPrefill options (" +
                          UniPrefillOptionKeys() + ")",
                      "uniprefill");
  }
  if (auto e = CheckUniPrefillIntegers(*u)) return e;
  auto options = UniPrefillOptionsFromJson(*u);
  if (!options.ok()) return BadRequest(options.status().message(), "uniprefill");
  options->source = "request";
  p->uniprefill = options->enabled;
  p->uniprefill_options = std::move(*options);
  return std::nullopt;
}

std::optional<ApiError> ParseLogprobs(const json& body, CompletionRequest* out) {
  if (out->endpoint == Endpoint::kCompletions) {
    int64_t n = -1;
    if (auto e = GetInt(body, "logprobs", 0, kMaxLogprobs, &n)) return e;
    out->logprobs = static_cast<int>(n);
    return std::nullopt;
  }
  bool want = false;
  if (auto e = GetBool(body, "logprobs", &want)) return e;
  int64_t top = 0;
  bool top_given = false;
  if (auto e = GetInt(body, "top_logprobs", 0, kMaxLogprobs, &top, &top_given)) return e;
  if (top_given && !want) {
    return BadRequest("top_logprobs requires logprobs to be true", "top_logprobs");
  }
  out->logprobs = want ? static_cast<int>(top) : -1;
  return std::nullopt;
}

std::optional<ApiError> CheckUnsupported(const json& body, Endpoint endpoint) {
  auto is_one = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; };
  if (auto e =
          OnlyDefault(body, "n", is_one, "n must be 1 (one choice per request is supported)")) {
    return e;
  }
  if (auto e = OnlyDefault(body, "best_of", is_one, "best_of must be 1 (not supported)")) return e;
  if (auto e = OnlyDefault(
          body, "echo", [](const json& v) { return v.is_boolean() && !v.get<bool>(); },
          "echo is not supported (send echo: false or leave it out)")) {
    return e;
  }
  if (auto e = OnlyDefault(
          body, "suffix",
          [](const json& v) { return v.is_string() && v.get<std::string>().empty(); },
          "suffix is not supported")) {
    return e;
  }
  if (auto e = OnlyDefault(
          body, "logit_bias", [](const json& v) { return v.is_object() && v.empty(); },
          "logit_bias is not supported")) {
    return e;
  }
  if (endpoint == Endpoint::kChat) {
    auto empty_array = [](const json& v) { return v.is_array() && v.empty(); };
    if (auto e = OnlyDefault(body, "tools", empty_array, "tools are not supported")) return e;
    if (auto e = OnlyDefault(body, "functions", empty_array, "functions are not supported")) {
      return e;
    }
    if (auto e = OnlyDefault(
            body, "response_format",
            [](const json& v) {
              // find, not value(): value() throws on a "type" that is not a string.
              const auto t = v.is_object() ? v.find("type") : v.end();
              return v.is_object() && t != v.end() && t->is_string() && *t == "text";
            },
            "response_format other than {\"type\": \"text\"} is not supported")) {
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string ErrorTypeForStatus(int http_status) {
  if (http_status == 401) return "authentication_error";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

nlohmann::json ErrorBody(const ApiError& e) {
  auto str_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error",
           {{"message", e.message},
            {"type", e.type.empty() ? ErrorTypeForStatus(e.http_status) : e.type},
            {"param", str_or_null(e.param)},
            {"code", str_or_null(e.code)}}}};
}

ApiError ApiErrorFromStatus(const Status& status) {
  ApiError e;
  switch (status.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
      e.http_status = 400;
      break;
    case ErrorCode::kUnavailable:  // the engine is shutting down
      e.http_status = 503;
      break;
    default:
      e.http_status = 500;
  }
  e.message = status.message();
  return e;
}

std::optional<ApiError> ParseCompletionRequest(const nlohmann::json& body, Endpoint endpoint,
                                               CompletionRequest* out) {
  *out = CompletionRequest{};
  out->endpoint = endpoint;
  if (!body.is_object()) return BadRequest("the request body must be a JSON object", "");

  const json* model = Field(body, "model");
  if (!model) return BadRequest("model is required", "model");
  if (!model->is_string()) return BadRequest("model must be a string", "model");
  out->model = model->get<std::string>();

  if (endpoint == Endpoint::kCompletions) {
    if (auto e = ParsePrompt(body, out)) return e;
  } else {
    if (auto e = ParseMessages(body, out)) return e;
  }
  if (auto e = CheckUnsupported(body, endpoint)) return e;

  SamplingParams& p = out->params;
  // OpenAI's defaults; the engine's own defaults (greedy, top_k 40) are for the command line.
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.max_tokens = kDefaultCompletionMaxTokens;

  int64_t max_tokens = 0;
  if (auto e = GetInt(body, "max_tokens", 1, kMaxMaxTokens, &max_tokens, &out->max_tokens_given)) {
    return e;
  }
  if (endpoint == Endpoint::kChat && !out->max_tokens_given) {
    if (auto e = GetInt(body, "max_completion_tokens", 1, kMaxMaxTokens, &max_tokens,
                        &out->max_tokens_given)) {
      return e;
    }
  }
  if (out->max_tokens_given) p.max_tokens = static_cast<int>(max_tokens);

  if (auto e = GetFloat(body, "temperature", 0, 2, false, &p.temperature)) return e;
  if (auto e = GetFloat(body, "top_p", 0, 1, true, &p.top_p)) return e;
  int64_t top_k = 0;
  if (auto e = GetInt(body, "top_k", -1, INT32_MAX, &top_k)) return e;
  p.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);  // vLLM's -1 and 0 both mean off
  if (auto e = GetFloat(body, "min_p", 0, 1, false, &p.min_p)) return e;
  if (auto e = GetFloat(body, "presence_penalty", -2, 2, false, &p.presence_penalty)) return e;
  if (auto e = GetFloat(body, "frequency_penalty", -2, 2, false, &p.frequency_penalty)) return e;
  if (auto e = GetFloat(body, "repetition_penalty", 0, std::numeric_limits<double>::infinity(),
                        true, &p.repetition_penalty)) {
    return e;
  }
  if (const json* seed = Field(body, "seed")) {
    if (!seed->is_number_integer()) return BadRequest("seed must be an integer", "seed");
    // Any 64-bit integer; negative seeds wrap (they only have to be reproducible).
    p.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
    out->seed_given = true;
  }
  if (auto e = ParseStop(body, &p)) return e;
  if (auto e = ParseStopTokenIds(body, &p)) return e;
  if (auto e = GetBool(body, "ignore_eos", &p.ignore_eos)) return e;
  if (auto e = ParseLogprobs(body, out)) return e;
  p.logprobs = out->logprobs;
  if (auto e = GetBool(body, "stream", &out->stream)) return e;
  if (const json* so = Field(body, "stream_options")) {
    if (!so->is_object()) return BadRequest("stream_options must be an object", "stream_options");
    if (auto e = GetBool(*so, "include_usage", &out->include_usage)) {
      e->param = "stream_options";
      e->message = "stream_options." + e->message;
      return e;
    }
  }
  if (auto e = ParseUniPrefill(body, &p)) return e;
  if (const json* user = Field(body, "user"); user && !user->is_string()) {
    return BadRequest("user must be a string", "user");
  }
  return std::nullopt;
}

int ResolveChatMaxTokens(int context_size, int prompt_tokens, int server_default) {
  const int left = context_size - prompt_tokens;
  int n = left < server_default ? left : server_default;
  return n < 1 ? 1 : n;
}

std::string ResponseId(Endpoint endpoint, int64_t request_id) {
  return (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(request_id);
}

void CompletionOutput::Append(const RequestUpdate& u) {
  text += u.text;
  tokens.insert(tokens.end(), u.tokens.begin(), u.tokens.end());
  if (u.finished) {
    finished = true;
    finish_reason = u.finish_reason;
    error = u.error;
    usage = u.usage;
  } else if (u.usage.prompt_tokens > 0) {
    usage.prompt_tokens = u.usage.prompt_tokens;
    usage.ttft_s = u.usage.ttft_s;
  }
}

nlohmann::json UniPrefillJson(const std::vector<KeptTokensInfo>& kept) {
  json layers = json::array();
  for (const KeptTokensInfo& k : kept) {
    layers.push_back({{"layer", k.layer}, {"kept", k.kept}, {"alive", k.alive}});
  }
  return {{"kept", layers}, {"keep_ratio", KeepRatio(kept)}};
}

nlohmann::json UsageJson(const RequestUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

namespace {
json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}
// A logprob as JSON: -inf (a token the model gives no mass) is not JSON, so it becomes -9999
// (OpenAI's own floor for such tokens).
json Logprob(float v) { return std::isfinite(v) ? json(v) : json(-9999.0); }
}  // namespace

nlohmann::json CompletionLogprobsJson(const std::vector<SampledToken>& tokens,
                                      const TokenTextFn& token_text, int* text_offset) {
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const SampledToken& t : tokens) {
    const std::string s = token_text(t.id);
    texts.push_back(s);
    lps.push_back(Logprob(t.logprob));
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[token_text(alt.id)] = Logprob(alt.logprob);
    top[s] = Logprob(t.logprob);  // OpenAI: the sampled token is always among them
    tops.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int>(s.size());
  }
  return {
      {"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

nlohmann::json ChatLogprobsJson(const std::vector<SampledToken>& tokens,
                                const TokenTextFn& token_text) {
  json content = json::array();
  for (const SampledToken& t : tokens) {
    const std::string s = token_text(t.id);
    json top = json::array();
    for (const TokenLogprob& alt : t.top) {
      const std::string a = token_text(alt.id);
      top.push_back({{"token", a}, {"logprob", Logprob(alt.logprob)}, {"bytes", Bytes(a)}});
    }
    content.push_back({{"token", s},
                       {"logprob", Logprob(t.logprob)},
                       {"bytes", Bytes(s)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

nlohmann::json CompletionResponse(const ResponseContext& ctx, const CompletionRequest& request,
                                  const CompletionOutput& output, const TokenTextFn& token_text) {
  const bool chat = request.endpoint == Endpoint::kChat;
  json logprobs = nullptr;
  if (request.logprobs >= 0) {
    int offset = 0;
    logprobs = chat ? ChatLogprobsJson(output.tokens, token_text)
                    : CompletionLogprobsJson(output.tokens, token_text, &offset);
  }
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", output.finish_reason}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", output.text}};
  } else {
    choice["text"] = output.text;
  }
  return {{"id", ctx.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", ctx.created},
          {"model", ctx.model},
          {"choices", json::array({choice})},
          {"usage", UsageJson(output.usage)},
          {"uniprefill", UniPrefillJson(output.usage.kept)}};
}

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string SseEvent(const nlohmann::json& j) { return "data: " + DumpJson(j) + "\n\n"; }

StreamEncoder::StreamEncoder(const CompletionRequest& request, ResponseContext ctx,
                             TokenTextFn token_text)
    : endpoint_(request.endpoint),
      include_usage_(request.include_usage),
      logprobs_(request.logprobs >= 0),
      ctx_(std::move(ctx)),
      token_text_(std::move(token_text)) {}

nlohmann::json StreamEncoder::Chunk(nlohmann::json choice) const {
  const bool chat = endpoint_ == Endpoint::kChat;
  json choices = json::array();
  if (!choice.is_null()) choices.push_back(std::move(choice));
  return {{"id", ctx_.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ctx_.created},
          {"model", ctx_.model},
          {"choices", std::move(choices)}};
}

std::string StreamEncoder::Begin() {
  if (endpoint_ != Endpoint::kChat) return "";
  return SseEvent(Chunk({{"index", 0},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}}));
}

std::string StreamEncoder::Encode(const RequestUpdate& u) {
  const bool chat = endpoint_ == Endpoint::kChat;
  std::string out;
  if (!u.text.empty() || (logprobs_ && !u.tokens.empty())) {
    json logprobs = nullptr;
    if (logprobs_) {
      logprobs = chat ? ChatLogprobsJson(u.tokens, token_text_)
                      : CompletionLogprobsJson(u.tokens, token_text_, &text_offset_);
    }
    json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
    if (chat) {
      choice["delta"] = {{"content", u.text}};
    } else {
      choice["text"] = u.text;
    }
    out += SseEvent(Chunk(std::move(choice)));
  }
  if (!u.finished) return out;
  if (u.finish_reason == "error") {
    ApiError error;
    error.http_status = 500;
    error.message = u.error.empty() ? "generation failed" : u.error;
    out += SseEvent(ErrorBody(error));
    return out + kSseDone;
  }
  json last = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", u.finish_reason}};
  if (chat) {
    last["delta"] = json::object();
  } else {
    last["text"] = "";
  }
  json chunk = Chunk(std::move(last));
  chunk["uniprefill"] = UniPrefillJson(u.usage.kept);
  out += SseEvent(chunk);
  if (include_usage_) {
    json usage = Chunk(nullptr);
    usage["usage"] = UsageJson(u.usage);
    out += SseEvent(usage);
  }
  return out + kSseDone;
}

}  // namespace uniprefill::server
