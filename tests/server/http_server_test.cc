// OpenAiServer end to end: an in-process server on a free port over a real BatchEngine and the
// tiny random-weight Gemma 3, spoken to with httplib's client (and raw sockets to disconnect
// mid-request). Every error answers OpenAI-style JSON and leaves the server serving.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/tiny_gemma3.h"
#include "uniprefill/batch_engine.h"
#include "uniprefill/engine.h"

namespace uniprefill::server {
namespace {

using nlohmann::json;
constexpr int kContext = 1024;
constexpr size_t kMaxBody = 64 << 10;

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.model_path = testing::WriteTempFile("http_server_tiny.gguf", testing::BuildTinyGemma3());
    eo.threads = 1;
    eo.context_size = kContext;
    auto engine = Engine::Load(eo);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = engine->release();
    ServingOptions so;
    so.kv_cache_memory = 64 << 20;
    auto batch = BatchEngine::Start(*engine_, so);
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    batch_ = batch->release();
    ServerConfig sc;
    sc.port = 0;
    sc.served_model_names = {"tiny"};
    sc.max_body_bytes = kMaxBody;
    sc.threads = 8;
    server_ = new OpenAiServer(*batch_, sc);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  static void TearDownTestSuite() {
    delete server_;  // before the BatchEngine it serves
    delete batch_;
    delete engine_;
    server_ = nullptr;
    batch_ = nullptr;
    engine_ = nullptr;
  }

  static std::unique_ptr<httplib::Client> Client(int port = -1) {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port < 0 ? server_->port() : port);
    c->set_read_timeout(60);
    return c;
  }

  static httplib::Result Post(const std::string& path, const std::string& body,
                              const httplib::Headers& headers = {}) {
    return Client()->Post(path.c_str(), headers, body, "application/json");
  }

  // A good greedy completion request; `extra` fields override.
  static json Greedy(json extra = json::object()) {
    json j = {{"model", "tiny"},
              {"prompt", "the theme"},
              {"max_tokens", 8},
              {"temperature", 0},
              {"ignore_eos", true}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }

  static json ChatBody(json extra = json::object()) {
    json j = {{"model", "tiny"},
              {"messages", {{{"role", "user"}, {"content", "the theme"}}}},
              {"max_tokens", 8},
              {"temperature", 0},
              {"ignore_eos", true}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }

  // The error object of an error response, checking its status.
  static json ExpectError(const httplib::Result& r, int status) {
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << r->body;
    json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << r->body;
    if (!j.is_object() || !j.contains("error")) return json();
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"].contains("type"));
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
    return j["error"];
  }

  // The server still answers a good request.
  static void ExpectStillServing() {
    auto r = Post("/v1/completions", Greedy({{"max_tokens", 2}}).dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }

  static Engine* engine_;
  static BatchEngine* batch_;
  static OpenAiServer* server_;
};
Engine* HttpServerTest::engine_ = nullptr;
BatchEngine* HttpServerTest::batch_ = nullptr;
OpenAiServer* HttpServerTest::server_ = nullptr;

// The JSON payloads of an SSE body; [DONE] becomes the string "[DONE]".
std::vector<json> SseEvents(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) {
      ADD_FAILURE() << "not an SSE data event: " << event;
      continue;
    }
    const std::string data = event.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data, nullptr, false));
  }
  return out;
}

TEST_F(HttpServerTest, Health) {
  auto r = Client()->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body), json({{"status", "ok"}}));
}

TEST_F(HttpServerTest, Models) {
  auto r = Client()->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["owned_by"], "uniprefill");
  EXPECT_EQ(j["data"][0]["max_model_len"], kContext);
  EXPECT_TRUE(j["data"][0]["created"].is_number_integer());
}

TEST_F(HttpServerTest, Metrics) {
  ExpectStillServing();
  // A response is counted by httplib's logger, which runs after the response is written: the
  // client can hold the body before the count is made, so the scrape waits for it (CI once
  // scraped in between).
  const std::string counted = "uniprefill_http_requests_total{model_name=\"tiny\",status=\"200\"}";
  int status = 0;
  std::string content_type, body;
  for (int attempt = 0; attempt < 200; ++attempt) {
    auto r = Client()->Get("/metrics");
    ASSERT_TRUE(r);
    status = r->status;
    content_type = r->get_header_value("Content-Type");
    body = r->body;
    if (body.find(counted) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, 200);
  EXPECT_EQ(content_type.rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_NE(body.find("# TYPE uniprefill_requests_running gauge"), std::string::npos);
  EXPECT_NE(body.find(counted), std::string::npos) << body;
  EXPECT_NE(body.find("uniprefill_time_to_first_token_seconds_bucket"), std::string::npos);
}

TEST_F(HttpServerTest, Completion) {
  auto r = Post("/v1/completions", Greedy().dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 1);
  EXPECT_EQ(j["usage"]["total_tokens"],
            j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
  EXPECT_TRUE(j["uniprefill"]["keep_ratio"].is_number());
}

TEST_F(HttpServerTest, PromptAsTokenIds) {
  auto r = Post("/v1/completions", Greedy({{"prompt", {2, 260, 261}}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"], 3);
}

TEST_F(HttpServerTest, CompletionLogprobs) {
  auto r = Post("/v1/completions", Greedy({{"logprobs", 2}, {"max_tokens", 3}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r->body;
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["text_offset"].size(), 3u);
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_GE(lp["top_logprobs"][0].size(), 1u);
  EXPECT_LE(lp["top_logprobs"][0].size(), 3u);
  EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
}

TEST_F(HttpServerTest, StreamedTextEqualsNonStreamedText) {
  auto plain = Post("/v1/completions", Greedy({{"max_tokens", 12}}).dump());
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200);
  const std::string expected = json::parse(plain->body)["choices"][0]["text"];

  auto r = Post(
      "/v1/completions",
      Greedy({{"max_tokens", 12}, {"stream", true}, {"stream_options", {{"include_usage", true}}}})
          .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<json> events = SseEvents(r->body);
  ASSERT_GE(events.size(), 3u) << r->body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, finish;
  json usage;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    EXPECT_EQ(e["object"], "text_completion");
    if (e.contains("usage")) usage = e["usage"];
    if (e["choices"].empty()) continue;
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, expected);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 12) << r->body;
}

TEST_F(HttpServerTest, Chat) {
  auto r = Post("/v1/chat/completions", ChatBody().dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  const std::string expected = j["choices"][0]["message"]["content"];

  auto s = Post("/v1/chat/completions", ChatBody({{"stream", true}}).dump());
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  std::vector<json> events = SseEvents(s->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const json& e : events) {
    if (e.is_object() && !e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
      text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, expected);
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpServerTest, ChatWithoutMaxTokensUsesTheServerDefault) {
  json body = ChatBody();
  body.erase("max_tokens");
  body["stop_token_ids"] = json::array();
  body["ignore_eos"] = false;
  auto r = Post("/v1/chat/completions", body.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // The default fills what the context has left (the server's 4096 is larger than it).
  EXPECT_LE(json::parse(r->body)["usage"]["total_tokens"].get<int>(), kContext);
}

TEST_F(HttpServerTest, ConcurrentRequestsAllSucceed) {
  std::vector<std::thread> threads;
  std::vector<int> status(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([i, &status] {
      auto r = Post("/v1/completions", Greedy({{"max_tokens", 6 + i}}).dump());
      status[i] = r ? r->status : -1;
    });
  }
  for (auto& t : threads) t.join();
  for (int s : status) EXPECT_EQ(s, 200);
}

TEST_F(HttpServerTest, MalformedJson) {
  json e = ExpectError(Post("/v1/completions", "{\"model\": \"tiny\", "), 400);
  EXPECT_EQ(e["type"], "invalid_request_error");
  ExpectError(Post("/v1/chat/completions", "not json"), 400);
  ExpectError(Post("/v1/completions", "[1, 2]"), 400);
  ExpectStillServing();
}

TEST_F(HttpServerTest, MissingFields) {
  json no_model = Greedy();
  no_model.erase("model");
  EXPECT_EQ(ExpectError(Post("/v1/completions", no_model.dump()), 400)["param"], "model");
  json no_prompt = Greedy();
  no_prompt.erase("prompt");
  EXPECT_EQ(ExpectError(Post("/v1/completions", no_prompt.dump()), 400)["param"], "prompt");
  json no_messages = ChatBody();
  no_messages.erase("messages");
  EXPECT_EQ(ExpectError(Post("/v1/chat/completions", no_messages.dump()), 400)["param"],
            "messages");
  ExpectStillServing();
}

TEST_F(HttpServerTest, WrongTypes) {
  json e = ExpectError(Post("/v1/completions", Greedy({{"max_tokens", "8"}}).dump()), 400);
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_EQ(e["message"], "max_tokens must be an integer");
  EXPECT_EQ(
      ExpectError(Post("/v1/completions", Greedy({{"temperature", "0"}}).dump()), 400)["param"],
      "temperature");
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"stop", 3}}).dump()), 400)["param"],
            "stop");
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"stream", "yes"}}).dump()), 400)["param"],
            "stream");
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"uniprefill", {{"mode", 3}}}}).dump()),
                        400)["param"],
            "uniprefill");
  ExpectStillServing();
}

TEST_F(HttpServerTest, MaxTokensRange) {
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"max_tokens", -1}}).dump()), 400)["param"],
            "max_tokens");
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"max_tokens", 0}}).dump()), 400)["param"],
            "max_tokens");
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"max_tokens", int64_t{1} << 40}}).dump()),
                        400)["param"],
            "max_tokens");
  // Within the API's bound but past the context: the engine says so.
  ExpectError(Post("/v1/completions", Greedy({{"max_tokens", kContext * 4}}).dump()), 400);
  ExpectStillServing();
}

TEST_F(HttpServerTest, PromptLongerThanTheContext) {
  std::string prompt;
  for (int i = 0; i < kContext + 100; ++i) prompt += "the ";
  json e = ExpectError(Post("/v1/completions", Greedy({{"prompt", prompt}}).dump()), 400);
  EXPECT_NE(e["message"].get<std::string>().find("context"), std::string::npos) << e;
  ExpectStillServing();
}

TEST_F(HttpServerTest, BadTokenIdIsRejected) {
  ExpectError(Post("/v1/completions", Greedy({{"prompt", {1, 99999}}}).dump()), 400);
  ExpectStillServing();
}

TEST_F(HttpServerTest, UnknownModel) {
  json e = ExpectError(Post("/v1/completions", Greedy({{"model", "gpt-4"}}).dump()), 404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  EXPECT_NE(e["message"].get<std::string>().find("tiny"), std::string::npos);
  ExpectStillServing();
}

TEST_F(HttpServerTest, BodyOverTheLimit) {
  json body = Greedy({{"prompt", std::string(kMaxBody + 10, 'x')}});
  json e = ExpectError(Post("/v1/completions", body.dump()), 413);
  EXPECT_NE(e["message"].get<std::string>().find(std::to_string(kMaxBody)), std::string::npos);
  ExpectStillServing();
}

TEST_F(HttpServerTest, UnknownRoute) {
  ExpectError(Client()->Get("/v1/engines"), 404);
  ExpectError(Post("/v1/embeddings", "{}"), 404);
  ExpectStillServing();
}

TEST_F(HttpServerTest, UnsupportedFeature) {
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"n", 3}}).dump()), 400)["param"], "n");
  EXPECT_EQ(ExpectError(Post("/v1/completions", Greedy({{"echo", true}}).dump()), 400)["param"],
            "echo");
  ExpectStillServing();
}

TEST_F(HttpServerTest, ApiKey) {
  ServerConfig sc;
  sc.port = 0;
  sc.api_key = "sekrit";
  sc.served_model_names = {"tiny"};
  sc.threads = 4;
  OpenAiServer keyed(*batch_, sc);
  ASSERT_TRUE(keyed.Start().ok());
  auto client = Client(keyed.port());
  json e = ExpectError(client->Post("/v1/completions", Greedy().dump(), "application/json"), 401);
  EXPECT_EQ(e["type"], "authentication_error");
  ExpectError(client->Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, Greedy().dump(),
                           "application/json"),
              401);
  ExpectError(client->Get("/v1/models"), 401);
  auto ok = client->Post("/v1/completions", {{"Authorization", "Bearer sekrit"}}, Greedy().dump(),
                         "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto models = client->Get("/v1/models", {{"Authorization", "Bearer sekrit"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  auto health = client->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = client->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  keyed.Stop();
}

// serve --device cuda hands the server GPU 0's clock sampler; here it reads the stand-in NVML
// (tests/testing/fake_nvml.cc: SM clock 1400 / 1500 / 1600 MHz in turn, 650 W).
TEST_F(HttpServerTest, MetricsReportTheGpuClockAndPowerAtEachScrape) {
  GpuClockSamplerOptions nvml;
  nvml.library = UP_FAKE_NVML;
  Result<std::unique_ptr<GpuClockSampler>> sampler = GpuClockSampler::Create("0000:01:00.0", nvml);
  ASSERT_TRUE(sampler.ok()) << sampler.status().message();
  ServerConfig sc;
  sc.port = 0;
  sc.served_model_names = {"tiny"};
  sc.threads = 2;
  sc.gpu_clocks = {sampler->get()};
  OpenAiServer with_gpu(*batch_, sc);
  ASSERT_TRUE(with_gpu.Start().ok());
  std::set<std::string> clocks;
  for (int scrape = 0; scrape < 3; ++scrape) {
    auto r = Client(with_gpu.port())->Get("/metrics");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("# TYPE uniprefill_gpu_sm_clock_mhz gauge"), std::string::npos);
    EXPECT_NE(
        r->body.find("uniprefill_gpu_power_watts{model_name=\"tiny\",gpu=\"0000:01:00.0\"} 650\n"),
        std::string::npos)
        << r->body;
    const std::string key =
        "uniprefill_gpu_sm_clock_mhz{model_name=\"tiny\",gpu=\"0000:01:00.0\"} ";
    const size_t at = r->body.find(key);
    ASSERT_NE(at, std::string::npos) << r->body;
    clocks.insert(r->body.substr(at + key.size(), 4));
  }
  // Read at each scrape, not once at start: the stand-in's clock changes between reads.
  EXPECT_GE(clocks.size(), 2u);
  for (const std::string& c : clocks) EXPECT_TRUE(c == "1400" || c == "1500" || c == "1600") << c;
  with_gpu.Stop();
  // The suite's server (no sampler) reports no GPU.
  auto plain = Client()->Get("/metrics");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->body.find("uniprefill_gpu_"), std::string::npos);
}

// Under --tensor-parallel serve samples every GPU its ranks drive on the host: one label set each.
TEST_F(HttpServerTest, MetricsReportEachGpuOfATensorParallelJob) {
  GpuClockSamplerOptions nvml;
  nvml.library = UP_FAKE_NVML;
  Result<std::unique_ptr<GpuClockSampler>> first = GpuClockSampler::Create("0000:01:00.0", nvml);
  Result<std::unique_ptr<GpuClockSampler>> second = GpuClockSampler::Create("0000:41:00.0", nvml);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_TRUE(second.ok()) << second.status().message();
  ServerConfig sc;
  sc.port = 0;
  sc.served_model_names = {"tiny"};
  sc.threads = 2;
  sc.gpu_clocks = {first->get(), second->get()};
  OpenAiServer server(*batch_, sc);
  ASSERT_TRUE(server.Start().ok());
  auto r = Client(server.port())->Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  for (const char* line :
       {"uniprefill_gpu_power_watts{model_name=\"tiny\",gpu=\"0000:01:00.0\"} 650\n",
        "uniprefill_gpu_power_watts{model_name=\"tiny\",gpu=\"0000:41:00.0\"} 300\n",
        "uniprefill_gpu_sm_clock_mhz{model_name=\"tiny\",gpu=\"0000:41:00.0\"} 1200\n",
        "uniprefill_gpu_sm_clock_mhz{model_name=\"tiny\",gpu=\"0000:01:00.0\"} 1"}) {
    EXPECT_NE(r->body.find(line), std::string::npos) << line << " in\n" << r->body;
  }
  // One TYPE line per family, however many GPUs.
  size_t types = 0;
  for (size_t at = r->body.find("# TYPE uniprefill_gpu_sm_clock_mhz"); at != std::string::npos;
       at = r->body.find("# TYPE uniprefill_gpu_sm_clock_mhz", at + 1)) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
  server.Stop();
}

TEST_F(HttpServerTest, PortInUseIsAClearError) {
  ServerConfig sc;
  sc.port = server_->port();
  sc.threads = 1;
  OpenAiServer second(*batch_, sc);
  Status st = second.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot listen on 127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("in use"), std::string::npos) << st.message();
  ExpectStillServing();
}

// ---- Disconnects: raw sockets, so the test decides exactly when the client goes away. ----

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendPost(int fd, const std::string& path, const std::string& body) {
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
}

// Waits until the engine has aborted one more request than `aborted_before` and runs none.
void ExpectAbortedAndIdle(BatchEngine& batch, int64_t aborted_before) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ServingMetrics m = batch.Metrics();
  while (std::chrono::steady_clock::now() < deadline &&
         (m.requests_aborted <= aborted_before || m.running != 0 || m.waiting != 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m = batch.Metrics();
  }
  EXPECT_EQ(m.requests_aborted, aborted_before + 1);
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
}

TEST_F(HttpServerTest, StreamingClientThatDisconnectsIsCancelled) {
  const int64_t aborted = batch_->Metrics().requests_aborted;
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  SendPost(fd, "/v1/completions", Greedy({{"max_tokens", kContext - 16}, {"stream", true}}).dump());
  // Read until the first generated text arrives, then hang up.
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  close(fd);
  ExpectAbortedAndIdle(*batch_, aborted);
  ExpectStillServing();
}

TEST_F(HttpServerTest, NonStreamingClientThatDisconnectsIsCancelled) {
  const int64_t aborted = batch_->Metrics().requests_aborted;
  const int64_t submitted = batch_->Metrics().requests_submitted;
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  SendPost(fd, "/v1/completions", Greedy({{"max_tokens", kContext - 16}}).dump());
  // Hang up once the engine has the request.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (batch_->Metrics().requests_submitted == submitted &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  close(fd);
  ExpectAbortedAndIdle(*batch_, aborted);
  ExpectStillServing();
}

TEST_F(HttpServerTest, StopCancelsRequestsInFlight) {
  ServerConfig sc;
  sc.port = 0;
  sc.served_model_names = {"tiny"};
  sc.threads = 2;
  sc.log_requests = false;
  auto other = std::make_unique<OpenAiServer>(*batch_, sc);
  ASSERT_TRUE(other->Start().ok());
  const int64_t aborted = batch_->Metrics().requests_aborted;
  std::string body;
  int status = -1;
  std::thread client([&] {
    auto c = Client(other->port());
    auto result =
        c->Post("/v1/completions", Greedy({{"max_tokens", kContext - 16}, {"stream", true}}).dump(),
                "application/json");
    if (result) {
      status = result->status;
      body = result->body;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (batch_->Metrics().running == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  other->Stop();
  client.join();
  ExpectAbortedAndIdle(*batch_, aborted);
  ASSERT_EQ(status, 200);
  std::vector<json> events = SseEvents(body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "abort");
}

}  // namespace
}  // namespace uniprefill::server
