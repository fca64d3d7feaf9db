// The OpenAI protocol layer without a socket: request parsing (every field, defaults, each wrong
// type or range naming its field), error bodies, response and streaming chunk shapes, and
// invalid UTF-8 in generated text.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace uniprefill::server {
namespace {

using nlohmann::json;

CompletionRequest ParseOk(const json& body, Endpoint endpoint = Endpoint::kCompletions) {
  CompletionRequest r;
  auto e = ParseCompletionRequest(body, endpoint, &r);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  return r;
}

ApiError ParseErr(const json& body, Endpoint endpoint = Endpoint::kCompletions) {
  CompletionRequest r;
  auto e = ParseCompletionRequest(body, endpoint, &r);
  EXPECT_TRUE(e.has_value()) << body.dump();
  return e.value_or(ApiError{});
}

json Completion(json extra = json::object()) {
  json j = {{"model", "m"}, {"prompt", "hello"}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

json Chat(json extra = json::object()) {
  json j = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

// A wrong value of `field` gives 400 naming it, with `needle` in the message.
void ExpectBad(const json& body, const std::string& field, const std::string& needle,
               Endpoint endpoint = Endpoint::kCompletions) {
  SCOPED_TRACE(body.dump());
  ApiError e = ParseErr(body, endpoint);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, field);
  EXPECT_NE(e.message.find(needle), std::string::npos) << e.message;
}

TEST(OpenAiProtocolTest, CompletionDefaultsAreOpenAis) {
  CompletionRequest r = ParseOk(Completion());
  EXPECT_EQ(r.model, "m");
  ASSERT_TRUE(r.prompt_text.has_value());
  EXPECT_EQ(*r.prompt_text, "hello");
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 1.0f);
  EXPECT_EQ(r.params.top_k, 0);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.0f);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.params.logprobs, -1);
  EXPECT_TRUE(r.params.uniprefill);
  EXPECT_FALSE(r.params.uniprefill_options.has_value());
  EXPECT_TRUE(r.params.stop.empty());
  EXPECT_FALSE(r.params.ignore_eos);
}

TEST(OpenAiProtocolTest, ParsesEverySamplingField) {
  CompletionRequest r = ParseOk(Completion({{"max_tokens", 7},
                                            {"temperature", 0},
                                            {"top_p", 0.5},
                                            {"top_k", 5},
                                            {"min_p", 0.1},
                                            {"seed", 42},
                                            {"stop", {"a", "b"}},
                                            {"stop_token_ids", {1, 2}},
                                            {"presence_penalty", 0.5},
                                            {"frequency_penalty", -0.5},
                                            {"repetition_penalty", 1.2},
                                            {"ignore_eos", true},
                                            {"n", 1},
                                            {"best_of", 1},
                                            {"echo", false},
                                            {"logprobs", 3},
                                            {"stream", true},
                                            {"stream_options", {{"include_usage", true}}},
                                            {"user", "someone"},
                                            {"some_future_field", {1, 2, 3}}}));
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.5f);
  EXPECT_EQ(r.params.top_k, 5);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.2f);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiProtocolTest, NullMeansNotGiven) {
  CompletionRequest r = ParseOk(Completion({{"max_tokens", nullptr},
                                            {"temperature", nullptr},
                                            {"stop", nullptr},
                                            {"logprobs", nullptr},
                                            {"seed", nullptr},
                                            {"n", nullptr}}));
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.seed_given);
}

TEST(OpenAiProtocolTest, PromptForms) {
  EXPECT_EQ(*ParseOk(Completion({{"prompt", {"one"}}})).prompt_text, "one");
  CompletionRequest ids = ParseOk(Completion({{"prompt", {5, 6, 7}}}));
  EXPECT_FALSE(ids.prompt_text.has_value());
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(ParseOk(Completion({{"prompt", json::array({json::array({8, 9})})}})).prompt_ids,
            (std::vector<int32_t>{8, 9}));
  ExpectBad(Completion({{"prompt", {"a", "b"}}}), "prompt", "batched prompts are not supported");
  ExpectBad(Completion({{"prompt", json::array()}}), "prompt", "must not be empty");
  ExpectBad(Completion({{"prompt", {1, -2}}}), "prompt", "token ids");
  ExpectBad(Completion({{"prompt", {1, 2.5}}}), "prompt", "token ids");
  ExpectBad(Completion({{"prompt", 12}}), "prompt", "string or an array");
  json no_prompt = {{"model", "m"}};
  ExpectBad(no_prompt, "prompt", "prompt is required");
}

TEST(OpenAiProtocolTest, ModelIsRequiredAndAString) {
  ExpectBad(json{{"prompt", "x"}}, "model", "model is required");
  ExpectBad(Completion({{"model", 3}}), "model", "model must be a string");
  EXPECT_EQ(ParseErr(json::array()).http_status, 400);
}

TEST(OpenAiProtocolTest, WrongTypesNameTheField) {
  ExpectBad(Completion({{"max_tokens", "10"}}), "max_tokens", "max_tokens must be an integer");
  ExpectBad(Completion({{"max_tokens", 2.5}}), "max_tokens", "must be an integer");
  ExpectBad(Completion({{"temperature", "hot"}}), "temperature", "must be a number");
  ExpectBad(Completion({{"top_p", true}}), "top_p", "must be a number");
  ExpectBad(Completion({{"top_k", 1.5}}), "top_k", "must be an integer");
  ExpectBad(Completion({{"min_p", "0"}}), "min_p", "must be a number");
  ExpectBad(Completion({{"seed", "1"}}), "seed", "must be an integer");
  ExpectBad(Completion({{"stop", 5}}), "stop", "string or an array of strings");
  ExpectBad(Completion({{"stop", {"a", 1}}}), "stop", "string or an array of strings");
  ExpectBad(Completion({{"stop_token_ids", 5}}), "stop_token_ids", "array of token ids");
  ExpectBad(Completion({{"stop_token_ids", {-1}}}), "stop_token_ids", "array of token ids");
  ExpectBad(Completion({{"presence_penalty", "x"}}), "presence_penalty", "must be a number");
  ExpectBad(Completion({{"frequency_penalty", json::object()}}), "frequency_penalty",
            "must be a number");
  ExpectBad(Completion({{"repetition_penalty", "x"}}), "repetition_penalty", "must be a number");
  ExpectBad(Completion({{"ignore_eos", 1}}), "ignore_eos", "true or false");
  ExpectBad(Completion({{"stream", "yes"}}), "stream", "true or false");
  ExpectBad(Completion({{"stream_options", 1}}), "stream_options", "must be an object");
  ExpectBad(Completion({{"stream_options", {{"include_usage", "y"}}}}), "stream_options",
            "include_usage");
  ExpectBad(Completion({{"logprobs", true}}), "logprobs", "must be an integer");
  ExpectBad(Completion({{"user", 5}}), "user", "must be a string");
  ExpectBad(Completion({{"uniprefill", "on"}}), "uniprefill", "true, false or an object");
}

TEST(OpenAiProtocolTest, RangesNameTheField) {
  ExpectBad(Completion({{"max_tokens", 0}}), "max_tokens", "between 1 and");
  ExpectBad(Completion({{"max_tokens", -5}}), "max_tokens", "(got -5)");
  ExpectBad(Completion({{"max_tokens", int64_t{1} << 40}}), "max_tokens", "between 1 and");
  ExpectBad(Completion({{"max_tokens", uint64_t{18446744073709551615u}}}), "max_tokens",
            "between 1 and");
  ExpectBad(Completion({{"temperature", 2.5}}), "temperature", "between 0 and 2");
  ExpectBad(Completion({{"temperature", -0.1}}), "temperature", "between 0 and 2");
  ExpectBad(Completion({{"top_p", 0}}), "top_p", "greater than 0");
  ExpectBad(Completion({{"top_p", 1.5}}), "top_p", "at most 1");
  ExpectBad(Completion({{"top_k", -2}}), "top_k", "between -1");
  ExpectBad(Completion({{"min_p", 1.5}}), "min_p", "between 0 and 1");
  ExpectBad(Completion({{"presence_penalty", 3}}), "presence_penalty", "between -2 and 2");
  ExpectBad(Completion({{"frequency_penalty", -3}}), "frequency_penalty", "between -2 and 2");
  ExpectBad(Completion({{"repetition_penalty", 0}}), "repetition_penalty", "greater than 0");
  ExpectBad(Completion({{"stop", {"a", "b", "c", "d", "e"}}}), "stop", "at most 4");
  ExpectBad(Completion({{"logprobs", 21}}), "logprobs", "between 0 and 20");
  ExpectBad(Completion({{"logprobs", -1}}), "logprobs", "between 0 and 20");
}

TEST(OpenAiProtocolTest, TopKMinusOneMeansOff) {
  EXPECT_EQ(ParseOk(Completion({{"top_k", -1}})).params.top_k, 0);
}

TEST(OpenAiProtocolTest, StopStringForms) {
  EXPECT_EQ(ParseOk(Completion({{"stop", "\n"}})).params.stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(ParseOk(Completion({{"stop", {""}}})).params.stop.empty());  // can never match
}

TEST(OpenAiProtocolTest, UnsupportedFeaturesAreRejected) {
  ExpectBad(Completion({{"n", 2}}), "n", "n must be 1");
  ExpectBad(Completion({{"best_of", 3}}), "best_of", "best_of must be 1");
  ExpectBad(Completion({{"echo", true}}), "echo", "echo is not supported");
  ExpectBad(Completion({{"suffix", "x"}}), "suffix", "not supported");
  ExpectBad(Completion({{"logit_bias", {{"5", 10}}}}), "logit_bias", "not supported");
  ExpectBad(Chat({{"tools", {{{"type", "function"}}}}}), "tools", "not supported", Endpoint::kChat);
  ExpectBad(Chat({{"response_format", {{"type", "json_object"}}}}), "response_format",
            "not supported", Endpoint::kChat);
  ParseOk(Chat({{"response_format", {{"type", "text"}}}, {"tools", json::array()}}),
          Endpoint::kChat);
}

TEST(OpenAiProtocolTest, ChatMessages) {
  json body =
      Chat({{"messages",
             {{{"role", "system"}, {"content", "be brief"}},
              {{"role", "user"},
               {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
              {{"role", "assistant"}, {"content", nullptr}},
              {{"role", "developer"}, {"content", "d"}}}}});
  CompletionRequest r = ParseOk(body, Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, "system");
  EXPECT_FALSE(r.prompt_text.has_value());
  EXPECT_FALSE(r.max_tokens_given);

  const Endpoint chat = Endpoint::kChat;
  ExpectBad(json{{"model", "m"}}, "messages", "messages is required", chat);
  ExpectBad(Chat({{"messages", json::array()}}), "messages", "non-empty array", chat);
  ExpectBad(Chat({{"messages", "hi"}}), "messages", "non-empty array", chat);
  ExpectBad(Chat({{"messages", {{{"role", "tool"}, {"content", "x"}}}}}), "messages",
            "'tool' is not supported", chat);
  ExpectBad(Chat({{"messages", {{{"content", "x"}}}}}), "messages", "messages[0].role", chat);
  ExpectBad(Chat({{"messages", {{{"role", "user"}}}}}), "messages", "content is required", chat);
  ExpectBad(Chat({{"messages", {{{"role", "user"}, {"content", 5}}}}}), "messages",
            "string or an array of text parts", chat);
  ExpectBad(
      Chat({{"messages",
             {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}}),
      "messages", "only text is supported", chat);
}

TEST(OpenAiProtocolTest, ChatMaxTokensAndAlias) {
  EXPECT_EQ(ParseOk(Chat({{"max_tokens", 9}}), Endpoint::kChat).params.max_tokens, 9);
  CompletionRequest alias = ParseOk(Chat({{"max_completion_tokens", 11}}), Endpoint::kChat);
  EXPECT_TRUE(alias.max_tokens_given);
  EXPECT_EQ(alias.params.max_tokens, 11);
  ExpectBad(Chat({{"max_completion_tokens", "a"}}), "max_completion_tokens", "must be an integer",
            Endpoint::kChat);
  EXPECT_EQ(ResolveChatMaxTokens(100, 30, 1000), 70);
  EXPECT_EQ(ResolveChatMaxTokens(10000, 30, 512), 512);
  EXPECT_EQ(ResolveChatMaxTokens(100, 150, 512), 1);
}

TEST(OpenAiProtocolTest, ChatLogprobs) {
  const Endpoint chat = Endpoint::kChat;
  EXPECT_EQ(ParseOk(Chat({{"logprobs", true}}), chat).logprobs, 0);
  EXPECT_EQ(ParseOk(Chat({{"logprobs", true}, {"top_logprobs", 5}}), chat).params.logprobs, 5);
  EXPECT_EQ(ParseOk(Chat({{"logprobs", false}}), chat).logprobs, -1);
  ExpectBad(Chat({{"top_logprobs", 2}}), "top_logprobs", "requires logprobs", chat);
  ExpectBad(Chat({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs", "between 0 and 20",
            chat);
  ExpectBad(Chat({{"logprobs", 3}}), "logprobs", "true or false", chat);
}

TEST(OpenAiProtocolTest, UniPrefillExtension) {
  EXPECT_FALSE(ParseOk(Completion({{"uniprefill", false}})).params.uniprefill);
  CompletionRequest r = ParseOk(Completion(
      {{"uniprefill", {{"enabled", true}, {"mode", "fixed-ratio"}, {"keep_ratio", 0.25}}}}));
  EXPECT_TRUE(r.params.uniprefill);
  ASSERT_TRUE(r.params.uniprefill_options.has_value());
  EXPECT_EQ(*r.params.uniprefill_options->mode, SelectionMode::kFixedRatio);
  EXPECT_FLOAT_EQ(*r.params.uniprefill_options->keep_ratio, 0.25f);
  EXPECT_EQ(r.params.uniprefill_options->source, "request");
  EXPECT_FALSE(ParseOk(Completion({{"uniprefill", {{"enabled", false}}}})).params.uniprefill);
  ExpectBad(Completion({{"uniprefill", {{"keep_ration", 0.5}}}}), "uniprefill", "keep_ration");
  ExpectBad(Completion({{"uniprefill", {{"top_p", "high"}}}}), "uniprefill", "top_p");
}

TEST(OpenAiProtocolTest, UniPrefillKeepRatioWithoutModeMeansFixedRatio) {
  CompletionRequest r = ParseOk(Completion({{"uniprefill", {{"keep_ratio", 0.5}}}}));
  ASSERT_TRUE(r.params.uniprefill_options.has_value());
  ASSERT_TRUE(r.params.uniprefill_options->mode.has_value());
  EXPECT_EQ(*r.params.uniprefill_options->mode, SelectionMode::kFixedRatio);
  // An explicit mode stays what it says.
  r = ParseOk(Completion({{"uniprefill", {{"keep_ratio", 0.5}, {"mode", "top-p"}}}}));
  EXPECT_EQ(*r.params.uniprefill_options->mode, SelectionMode::kTopP);
  r = ParseOk(Completion({{"uniprefill", {{"top_p", 0.9}}}}));
  EXPECT_FALSE(r.params.uniprefill_options->mode.has_value());
}

TEST(OpenAiProtocolTest, UniPrefillErrorsListEveryKeyAndNameTheParam) {
  const std::vector<std::string> keys = {"enabled", "drop_layers", "mode",   "top_p", "keep_ratio",
                                         "block_size", "sink",     "last_n", "window"};
  const ApiError not_an_object = ParseErr(Completion({{"uniprefill", "on"}}));
  const ApiError unknown_key = ParseErr(Completion({{"uniprefill", {{"keep_ration", 0.5}}}}));
  for (const ApiError& e : {not_an_object, unknown_key}) {
    EXPECT_EQ(e.param, "uniprefill");
    for (const std::string& key : keys) EXPECT_NE(e.message.find(key), std::string::npos) << key;
  }
  // Values out of range are refused at parse time, naming the option and the param.
  ExpectBad(Completion({{"uniprefill", {{"keep_ratio", 2}}}}), "uniprefill", "keep_ratio");
  ExpectBad(Completion({{"uniprefill", {{"top_p", 0}}}}), "uniprefill", "top_p");
  ExpectBad(Completion({{"uniprefill", {{"block_size", 0}}}}), "uniprefill", "block_size");
  ExpectBad(Completion({{"uniprefill", {{"sink", -1}}}}), "uniprefill", "sink");
  ExpectBad(Completion({{"uniprefill", {{"last_n", 0}}}}), "uniprefill", "last_n");
  ExpectBad(Completion({{"uniprefill", {{"mode", "topp"}}}}), "uniprefill", "topp");
  ExpectBad(Completion({{"uniprefill", {{"window", "diagonal"}}}}), "uniprefill", "diagonal");
}

TEST(OpenAiProtocolTest, ErrorBodies) {
  ApiError e{400, "max_tokens must be an integer", "", "max_tokens", ""};
  json b = ErrorBody(e);
  EXPECT_EQ(b["error"]["message"], "max_tokens must be an integer");
  EXPECT_EQ(b["error"]["type"], "invalid_request_error");
  EXPECT_EQ(b["error"]["param"], "max_tokens");
  EXPECT_TRUE(b["error"]["code"].is_null());
  EXPECT_EQ(ErrorBody({401, "no", "", "", "invalid_api_key"})["error"]["type"],
            "authentication_error");
  EXPECT_EQ(ErrorBody({404, "no", "", "model", "model_not_found"})["error"]["code"],
            "model_not_found");
  EXPECT_EQ(ErrorBody({413, "big", "", "", ""})["error"]["type"], "invalid_request_error");
  EXPECT_EQ(ErrorBody({503, "x", "", "", ""})["error"]["type"], "server_error");
  EXPECT_EQ(ErrorBody({500, "x", "", "", ""})["error"]["type"], "server_error");
  EXPECT_TRUE(ErrorBody({500, "x", "", "", ""})["error"]["param"].is_null());
}

TEST(OpenAiProtocolTest, StatusMapping) {
  EXPECT_EQ(ApiErrorFromStatus(InvalidArgument("bad")).http_status, 400);
  EXPECT_EQ(ApiErrorFromStatus(OutOfRange("long")).http_status, 400);
  EXPECT_EQ(ApiErrorFromStatus(OutOfRange("long")).message, "long");
  EXPECT_EQ(ApiErrorFromStatus(Unavailable("stopping")).http_status, 503);
  EXPECT_EQ(ApiErrorFromStatus(Internal("x")).http_status, 500);
  EXPECT_EQ(ApiErrorFromStatus(NotFound("x")).http_status, 500);
}

std::string FakeText(int32_t id) { return id == 7 ? "\xE2" : "t" + std::to_string(id); }

CompletionOutput SampleOutput() {
  CompletionOutput o;
  RequestUpdate a;
  a.text = "t1";
  a.tokens = {{1, -0.5f, {{1, -0.5f}, {2, -1.5f}}}};
  a.usage.prompt_tokens = 3;
  o.Append(a);
  RequestUpdate b;
  b.text = "t2";
  b.tokens = {{2, -0.25f, {{2, -0.25f}, {1, -2.0f}}}};
  b.finished = true;
  b.finish_reason = "length";
  b.usage.prompt_tokens = 3;
  b.usage.completion_tokens = 2;
  b.usage.kept = {{5, 40, 100}, {11, 20, 40}};
  o.Append(b);
  return o;
}

TEST(OpenAiProtocolTest, CompletionResponseShape) {
  CompletionRequest r = ParseOk(Completion({{"logprobs", 1}}));
  CompletionOutput o = SampleOutput();
  EXPECT_EQ(o.text, "t1t2");
  json j = CompletionResponse({"cmpl-4", 1700000000, "m"}, r, o, FakeText);
  EXPECT_EQ(j["id"], "cmpl-4");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "m");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], "t1t2");
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["logprobs"]["tokens"], json({"t1", "t2"}));
  EXPECT_FLOAT_EQ(c["logprobs"]["token_logprobs"][1].get<float>(), -0.25f);
  EXPECT_EQ(c["logprobs"]["text_offset"], json({0, 2}));
  EXPECT_TRUE(c["logprobs"]["top_logprobs"][0].contains("t2"));
  EXPECT_TRUE(c["logprobs"]["top_logprobs"][0].contains("t1"));  // the sampled one
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["uniprefill"]["kept"].size(), 2u);
  EXPECT_EQ(j["uniprefill"]["kept"][1]["layer"], 11);
  // KeepRatio: the last drop layer's kept over the first's alive (20 / 100), not 20 / 40.
  EXPECT_DOUBLE_EQ(j["uniprefill"]["keep_ratio"].get<double>(), 0.2);
  EXPECT_EQ(ResponseId(Endpoint::kCompletions, 4), "cmpl-4");

  CompletionRequest plain = ParseOk(Completion());
  json p = CompletionResponse({"cmpl-5", 1, "m"}, plain, o, FakeText);
  EXPECT_TRUE(p["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiProtocolTest, ChatResponseShape) {
  CompletionRequest r = ParseOk(Chat({{"logprobs", true}, {"top_logprobs", 2}}), Endpoint::kChat);
  json j = CompletionResponse({"chatcmpl-9", 1, "m"}, r, SampleOutput(), FakeText);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-9");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "t1t2");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);
  EXPECT_EQ(lp[0]["token"], "t1");
  EXPECT_EQ(lp[0]["bytes"], json({116, 49}));
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp[0]["top_logprobs"][1]["token"], "t2");
  EXPECT_EQ(ResponseId(Endpoint::kChat, 9), "chatcmpl-9");
}

TEST(OpenAiProtocolTest, DenseKeepRatioIsOne) {
  EXPECT_DOUBLE_EQ(UniPrefillJson({})["keep_ratio"].get<double>(), 1.0);
  EXPECT_TRUE(UniPrefillJson({})["kept"].empty());
}

// The JSON payloads of an SSE text, [DONE] as the string "[DONE]".
std::vector<json> SsePayloads(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    const std::string event = sse.substr(pos, end - pos);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    const std::string data = event.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return out;
}

std::vector<RequestUpdate> SampleUpdates() {
  RequestUpdate a;
  a.text = "Hel";
  a.tokens = {{1, -0.1f, {}}};
  RequestUpdate b;
  b.text = "lo";
  b.tokens = {{2, -0.2f, {}}};
  RequestUpdate c;
  c.finished = true;
  c.finish_reason = "stop";
  c.usage.prompt_tokens = 4;
  c.usage.completion_tokens = 2;
  return {a, b, c};
}

TEST(OpenAiProtocolTest, CompletionStreamChunks) {
  CompletionRequest r = ParseOk(Completion({{"stream", true}}));
  StreamEncoder enc(r, {"cmpl-1", 5, "m"}, FakeText);
  std::string sse = enc.Begin();
  EXPECT_EQ(sse, "");
  for (const RequestUpdate& u : SampleUpdates()) sse += enc.Encode(u);
  std::vector<json> events = SsePayloads(sse);
  ASSERT_EQ(events.size(), 4u) << sse;
  EXPECT_EQ(events[0]["object"], "text_completion");
  EXPECT_EQ(events[0]["id"], "cmpl-1");
  EXPECT_EQ(events[0]["choices"][0]["text"], "Hel");
  EXPECT_TRUE(events[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(events[1]["choices"][0]["text"], "lo");
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[2]["choices"][0]["text"], "");
  EXPECT_TRUE(events[2].contains("uniprefill"));
  EXPECT_FALSE(events[2].contains("usage"));
  EXPECT_EQ(events[3], "[DONE]");
  EXPECT_EQ(sse.substr(sse.size() - std::string(kSseDone).size()), kSseDone);
}

TEST(OpenAiProtocolTest, ChatStreamChunksWithUsage) {
  CompletionRequest r = ParseOk(
      Chat({{"stream", true}, {"stream_options", {{"include_usage", true}}}}), Endpoint::kChat);
  StreamEncoder enc(r, {"chatcmpl-2", 5, "m"}, FakeText);
  std::string sse = enc.Begin();
  for (const RequestUpdate& u : SampleUpdates()) sse += enc.Encode(u);
  std::vector<json> events = SsePayloads(sse);
  ASSERT_EQ(events.size(), 6u) << sse;
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_FALSE(events[1]["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(events[2]["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(events[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(events[3]["choices"][0]["delta"].empty());
  EXPECT_TRUE(events[4]["choices"].empty());
  EXPECT_EQ(events[4]["usage"]["total_tokens"], 6);
  EXPECT_EQ(events[5], "[DONE]");
  std::string text;
  for (const json& e : events) {
    if (e.is_object() && !e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
      text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, "Hello");
}

TEST(OpenAiProtocolTest, StreamLogprobsOffsetsContinueAcrossChunks) {
  CompletionRequest r = ParseOk(Completion({{"stream", true}, {"logprobs", 0}}));
  StreamEncoder enc(r, {"cmpl-1", 5, "m"}, FakeText);
  std::string sse;
  for (const RequestUpdate& u : SampleUpdates()) sse += enc.Encode(u);
  std::vector<json> events = SsePayloads(sse);
  EXPECT_EQ(events[0]["choices"][0]["logprobs"]["text_offset"], json({0}));
  EXPECT_EQ(events[1]["choices"][0]["logprobs"]["text_offset"], json({2}));  // "t1" before it
}

TEST(OpenAiProtocolTest, StreamErrorFinishIsAnErrorEvent) {
  CompletionRequest r = ParseOk(Completion({{"stream", true}}));
  StreamEncoder enc(r, {"cmpl-1", 5, "m"}, FakeText);
  RequestUpdate u;
  u.finished = true;
  u.finish_reason = "error";
  u.error = "the model failed";
  std::vector<json> events = SsePayloads(enc.Encode(u));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["error"]["message"], "the model failed");
  EXPECT_EQ(events[0]["error"]["type"], "server_error");
  EXPECT_EQ(events[1], "[DONE]");
}

TEST(OpenAiProtocolTest, InvalidUtf8IsReplacedNotThrown) {
  CompletionRequest r = ParseOk(Completion({{"logprobs", 0}}));
  CompletionOutput o;
  RequestUpdate u;
  u.text = "ok \xE2\x82";       // a cut-off euro sign
  u.tokens = {{7, -1.0f, {}}};  // FakeText(7) is a lone lead byte
  u.finished = true;
  u.finish_reason = "length";
  o.Append(u);
  json j = CompletionResponse({"cmpl-1", 1, "m"}, r, o, FakeText);
  std::string dumped;
  ASSERT_NO_THROW(dumped = DumpJson(j));
  EXPECT_NE(dumped.find("ok \xEF\xBF\xBD"), std::string::npos) << dumped;  // U+FFFD
  EXPECT_NO_THROW(json::parse(dumped));
  StreamEncoder enc(r, {"cmpl-1", 5, "m"}, FakeText);
  EXPECT_NO_THROW(enc.Encode(u));
}

TEST(OpenAiProtocolTest, NonFiniteLogprobsStayValidJson) {
  CompletionRequest r = ParseOk(Completion({{"logprobs", 0}}));
  CompletionOutput o;
  RequestUpdate u;
  u.tokens = {{1, -std::numeric_limits<float>::infinity(), {}}};
  u.finished = true;
  u.finish_reason = "length";
  o.Append(u);
  const std::string dumped = DumpJson(CompletionResponse({"c", 1, "m"}, r, o, FakeText));
  EXPECT_NO_THROW(json::parse(dumped));
  EXPECT_NE(dumped.find("-9999"), std::string::npos);
}

}  // namespace
}  // namespace uniprefill::server
