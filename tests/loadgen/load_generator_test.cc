// The `bench serve` load generator: percentile math, JSONL datasets, --modes, SSE framing and
// completion chunks, Prometheus text, and whole runs against a small fake OpenAI-compatible server
// (httplib, port 0) that streams a token per chunk and records how many requests it had at once;
// then `uniprefill bench serve` itself against that server (flags, exit codes, table, JSON).
#include "loadgen/load_generator.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/cli_runner.h"
#include "loadgen/sse_client.h"

namespace uniprefill::loadgen {
namespace {

// ---- Statistics ----

TEST(LoadGenPercentileTest, LinearInterpolationBetweenClosestRanks) {
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  EXPECT_DOUBLE_EQ(Percentile({7}, 0), 7);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);  // unsorted input
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 100), 4);
  std::vector<double> ten;
  for (int i = 1; i <= 10; ++i) ten.push_back(i);
  EXPECT_NEAR(Percentile(ten, 90), 9.1, 1e-12);  // rank 8.1 -> 9 + 0.1 * (10 - 9)
  EXPECT_NEAR(Percentile(ten, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(ten, 150), 10);  // clamped
}

TEST(LoadGenPercentileTest, LatencyStats) {
  LatencyStats s = ComputeLatencyStats({1, 2, 3, 4, 5});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_NEAR(s.p90, 4.6, 1e-12);
  EXPECT_NEAR(s.p99, 4.96, 1e-12);
  LatencyStats empty = ComputeLatencyStats({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_TRUE(std::isnan(empty.p50));
  EXPECT_TRUE(ToJson(empty)["p50"].is_null());
}

TEST(LoadGenSummaryTest, ThroughputAndLatenciesOverSuccessfulRequests) {
  RunResult run;
  run.duration_s = 2;
  for (int i = 0; i < 3; ++i) {
    RequestRecord r;
    r.index = i;
    r.ok = true;
    r.ttft_s = 0.1 * (i + 1);
    r.e2e_s = 1.0 + i;
    r.itl_s = {0.01, 0.02};
    r.prompt_tokens = 100;
    r.completion_tokens = 3;
    r.keep_ratio = i == 0 ? -1 : 0.5;
    run.records.push_back(r);
  }
  RequestRecord bad;
  bad.error = "HTTP 500: boom";
  run.records.push_back(bad);
  bad.error = "second";
  run.records.push_back(bad);
  ModeSummary s = SummarizeRun(run);
  EXPECT_EQ(s.ok, 3);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.first_error, "HTTP 500: boom");
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 4.5);
  EXPECT_DOUBLE_EQ(s.total_tokens_per_s, 154.5);
  EXPECT_NEAR(s.ttft_s.p50, 0.2, 1e-12);
  EXPECT_EQ(s.itl_s.count, 6);
  EXPECT_DOUBLE_EQ(s.e2e_s.mean, 2);
  EXPECT_DOUBLE_EQ(s.mean_keep_ratio, 0.5);
  nlohmann::json j = ToJson(s);
  EXPECT_EQ(j["first_error"], "HTTP 500: boom");
  EXPECT_EQ(j["ttft_s"]["count"], 3);
}

// Per class and against an SLO: a request is good when TTFT <= ttft_s and its mean inter-token
// gap <= itl_s; failed requests never are.
TEST(LoadGenSummaryTest, ClassesAndGoodputUnderAnSlo) {
  RunResult run;
  run.duration_s = 4;
  auto add = [&](const char* cls, bool ok, double ttft, std::vector<double> itl) {
    RequestRecord r;
    r.cls = cls;
    r.ok = ok;
    r.ttft_s = ttft;
    r.itl_s = std::move(itl);
    r.e2e_s = 1;
    run.records.push_back(r);
  };
  add("short", true, 0.5, {0.01, 0.03});   // good: TTFT 0.5, TPOT 0.02
  add("short", true, 2.5, {0.01});         // TTFT over
  add("short", true, 0.1, {0.01, 0.2});    // TPOT 0.105 over (one gap of 0.2)
  add("short", false, 0.1, {});            // failed
  add("long", true, 1.9, {0.04, 0.05});    // good: TPOT 0.045
  const Slo slo{2.0, 0.05};
  const ModeSummary all = SummarizeRun(run, "", &slo);
  EXPECT_EQ(all.ok, 4);
  EXPECT_EQ(all.failed, 1);
  EXPECT_EQ(all.good, 2);
  EXPECT_DOUBLE_EQ(all.goodput, 0.5);
  const ModeSummary shorts = SummarizeRun(run, "short", &slo);
  EXPECT_EQ(shorts.ok, 3);
  EXPECT_EQ(shorts.good, 1);
  EXPECT_EQ(shorts.itl_s.count, 5);
  const ModeSummary longs = SummarizeRun(run, "long", &slo);
  EXPECT_EQ(longs.ok, 1);
  EXPECT_EQ(longs.good, 1);
  EXPECT_NEAR(longs.ttft_s.p50, 1.9, 1e-12);
  EXPECT_DOUBLE_EQ(shorts.itl_s.max, 0.2);
  EXPECT_EQ(SummarizeRun(run).good, 0);  // no SLO, nothing counted
  EXPECT_EQ(ToJson(all)["good"], 2);
}

// ---- Workload ----

TEST(LoadGenDatasetTest, ParsesTextAndTokenPrompts) {
  std::istringstream in(
      "{\"prompt\": \"hello world\", \"max_tokens\": 5}\n"
      "\n"
      "   \n"
      "{\"prompt_token_ids\": [1, 2, 3]}\n"
      "{\"prompt\": [9, 8], \"max_tokens\": 2, \"id\": \"extra keys are ignored\"}\r\n");
  auto specs = ParseDatasetJsonl(in, "d.jsonl", 64);
  ASSERT_TRUE(specs.ok()) << specs.status().message();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].prompt_text, "hello world");
  EXPECT_TRUE((*specs)[0].prompt_ids.empty());
  EXPECT_EQ((*specs)[0].max_tokens, 5);
  EXPECT_EQ((*specs)[1].prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ((*specs)[1].max_tokens, 64);
  EXPECT_EQ((*specs)[2].prompt_ids, (std::vector<int32_t>{9, 8}));
  EXPECT_EQ((*specs)[2].max_tokens, 2);
}

TEST(LoadGenDatasetTest, BadLinesNameTheLine) {
  struct Case {
    std::string text, needle;
  };
  const std::vector<Case> cases = {
      {"{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\"", "d.jsonl:3: not valid JSON"},
      {"{\"prompt\": \"a\"}\n[1, 2]\n", "d.jsonl:2: expected a JSON object"},
      {"{\"text\": \"a\"}\n", "d.jsonl:1: missing \"prompt\""},
      {"{\"prompt\": \"a\", \"prompt_token_ids\": [1]}\n", "d.jsonl:1: give either"},
      {"{\"prompt\": \"a\", \"max_tokens\": 0}\n", "d.jsonl:1: \"max_tokens\" must be a positive"},
      {"{\"prompt\": \"a\", \"max_tokens\": \"4\"}\n", "\"max_tokens\" must be"},
      {"{\"prompt_token_ids\": [1, -2]}\n", "d.jsonl:1: \"prompt_token_ids\" holds -2"},
      {"{\"prompt_token_ids\": []}\n", "non-empty array"},
      {"{\"prompt\": \"\"}\n", "\"prompt\" is empty"},
      {"\n\n", "holds no requests"},
  };
  for (const Case& c : cases) {
    std::istringstream in(c.text);
    auto specs = ParseDatasetJsonl(in, "d.jsonl", 8);
    ASSERT_FALSE(specs.ok()) << c.text;
    EXPECT_NE(specs.status().message().find(c.needle), std::string::npos)
        << specs.status().message();
  }
  auto missing = LoadDatasetJsonl("/nonexistent/x.jsonl", 8);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/x.jsonl"), std::string::npos);
}

TEST(LoadGenWorkloadTest, RandomPromptsAreSeededAndInRange) {
  auto a = RandomTokenRequests(3, 100, 7, 1000, 1010, 42);
  auto b = RandomTokenRequests(3, 100, 7, 1000, 1010, 42);
  auto c = RandomTokenRequests(3, 100, 7, 1000, 1010, 43);
  ASSERT_EQ(a.size(), 3u);
  for (const RequestSpec& s : a) {
    EXPECT_EQ(s.prompt_ids.size(), 100u);
    EXPECT_EQ(s.max_tokens, 7);
    for (int32_t id : s.prompt_ids) {
      EXPECT_GE(id, 1000);
      EXPECT_LE(id, 1010);
    }
  }
  EXPECT_EQ(a[2].prompt_ids, b[2].prompt_ids);
  EXPECT_NE(a[0].prompt_ids, a[1].prompt_ids);
  EXPECT_NE(a[0].prompt_ids, c[0].prompt_ids);
}

TEST(LoadGenWorkloadTest, PoissonArrivalsHaveTheRequestedRate) {
  const std::vector<double> t = PoissonArrivals(20000, 4.0, 1);
  EXPECT_EQ(t[0], 0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  EXPECT_NEAR(t.back() / (t.size() - 1), 0.25, 0.01);  // mean gap 1/rate
  EXPECT_EQ(PoissonArrivals(5, 4.0, 1), PoissonArrivals(5, 4.0, 1));
}

// Long requests land at evenly spaced times inside the short stream; the result is ordered by
// arrival and every request keeps its class.
TEST(LoadGenWorkloadTest, MixedWorkloadPlacesLongRequestsAmongTheShortOnes) {
  const std::vector<RequestSpec> shorts = RandomTokenRequests(30, 8, 4, 1, 100, 3);
  const std::vector<RequestSpec> longs = RandomTokenRequests(2, 64, 2, 1, 100, 4);
  const TimedWorkload w = MixedWorkload(shorts, longs, 5.0, 9);
  ASSERT_EQ(w.requests.size(), 32u);
  ASSERT_EQ(w.arrivals.size(), 32u);
  const std::vector<double> short_at = PoissonArrivals(30, 5.0, 9);
  std::vector<double> long_at;
  int n_short = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    if (i > 0) ASSERT_GE(w.arrivals[i], w.arrivals[i - 1]);
    if (w.requests[i].cls == "long") {
      EXPECT_EQ(w.requests[i].prompt_ids.size(), 64u);
      long_at.push_back(w.arrivals[i]);
    } else {
      ASSERT_EQ(w.requests[i].cls, "short");
      EXPECT_EQ(w.arrivals[i], short_at[n_short]);
      EXPECT_EQ(w.requests[i].prompt_ids, shorts[n_short].prompt_ids);
      ++n_short;
    }
  }
  ASSERT_EQ(long_at.size(), 2u);
  EXPECT_DOUBLE_EQ(long_at[0], short_at.back() / 3);
  EXPECT_DOUBLE_EQ(long_at[1], 2 * short_at.back() / 3);
}

TEST(LoadGenModesTest, DenseUniPrefillAndOptions) {
  auto both = ParseModes("dense,uniprefill");
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->size(), 2u);
  EXPECT_TRUE((*both)[0].dense());
  EXPECT_EQ((*both)[0].field, false);
  EXPECT_EQ((*both)[1].field, true);
  auto opt = ParseModes("dense, uniprefill:mode=fixed-ratio,keep_ratio=0.5,uniprefill");
  ASSERT_TRUE(opt.ok()) << opt.status().message();
  ASSERT_EQ(opt->size(), 3u);
  EXPECT_EQ((*opt)[1].name, "uniprefill:mode=fixed-ratio,keep_ratio=0.5");
  EXPECT_EQ((*opt)[1].field,
            (nlohmann::json{{"enabled", true}, {"mode", "fixed-ratio"}, {"keep_ratio", 0.5}}));
  EXPECT_FALSE((*opt)[1].dense());
  for (const std::string bad : {"", ",", "sparse", "dense:x=1", "dense,dense", "keep_ratio=0.5",
                                "uniprefill,keep_ratio=0.5", "uniprefill:", "uniprefill:x"}) {
    EXPECT_FALSE(ParseModes(bad).ok()) << bad;
  }
}

TEST(LoadGenModesTest, RequestBody) {
  RequestSpec ids;
  ids.prompt_ids = {5, 6};
  ids.max_tokens = 3;
  BenchMode dense{"dense", false};
  nlohmann::json b = BuildCompletionRequest("m", ids, dense);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], (std::vector<int>{5, 6}));
  EXPECT_EQ(b["max_tokens"], 3);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["temperature"], 0);
  EXPECT_EQ(b["uniprefill"], false);
  RequestSpec text;
  text.prompt_text = "hi";
  EXPECT_EQ(BuildCompletionRequest("m", text, dense)["prompt"], "hi");
}

// ---- SSE and chunks ----

std::vector<std::string> ParseAll(const std::vector<std::string>& reads) {
  SseParser p;
  std::vector<std::string> events;
  auto collect = [&](const std::string& d) {
    events.push_back(d);
    return true;
  };
  for (const std::string& r : reads) EXPECT_TRUE(p.Feed(r, collect));
  EXPECT_TRUE(p.Finish(collect));
  return events;
}

TEST(SseParserTest, EventsSplitAcrossReadsAtEveryByte) {
  const std::string stream =
      ": keep-alive comment\r\n\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: message\nid: 7\ndata:{\"b\":2}\n\n"
      "data: line1\ndata: line2\n\n"
      "data: [DONE]\r\r";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  EXPECT_EQ(ParseAll({stream}), want);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    EXPECT_EQ(ParseAll({stream.substr(0, cut), stream.substr(cut)}), want) << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : stream) bytes.push_back(std::string(1, c));
  EXPECT_EQ(ParseAll(bytes), want);
}

TEST(SseParserTest, FinishDispatchesAnEventWithoutItsBlankLineAndStopWorks) {
  EXPECT_EQ(ParseAll({"data: x\n\ndata: last"}), (std::vector<std::string>{"x", "last"}));
  SseParser p;
  int calls = 0;
  EXPECT_FALSE(p.Feed("data: 1\n\ndata: 2\n\n", [&](const std::string&) {
    ++calls;
    return false;
  }));
  EXPECT_EQ(calls, 1);
}

TEST(CompletionChunkTest, TokensFinishUsageDoneAndErrors) {
  auto tok = ParseCompletionChunk(
      R"({"choices":[{"index":0,"text":"Hello","finish_reason":null}]})");
  ASSERT_TRUE(tok.ok());
  EXPECT_TRUE(tok->IsToken());
  EXPECT_EQ(tok->text, "Hello");
  auto held = ParseCompletionChunk(R"({"choices":[{"text":"","finish_reason":null}]})");
  EXPECT_TRUE(held->IsToken());  // a token whose text is held back
  auto fin = ParseCompletionChunk(R"({"choices":[{"text":"","finish_reason":"length"}]})");
  EXPECT_FALSE(fin->IsToken());
  EXPECT_EQ(fin->finish_reason, "length");
  auto usage = ParseCompletionChunk(
      R"({"choices":[],"usage":{"prompt_tokens":256,"completion_tokens":8},)"
      R"("uniprefill":{"kept":[{"layer":5,"kept":128,"alive":256}],"keep_ratio":0.5}})");
  ASSERT_TRUE(usage.ok());
  EXPECT_FALSE(usage->IsToken());
  EXPECT_TRUE(usage->has_usage);
  EXPECT_EQ(usage->prompt_tokens, 256);
  EXPECT_EQ(usage->completion_tokens, 8);
  EXPECT_DOUBLE_EQ(usage->keep_ratio, 0.5);
  auto in_usage = ParseCompletionChunk(
      R"({"usage":{"prompt_tokens":1,"completion_tokens":1,"uniprefill":{"keep_ratio":0.25}}})");
  EXPECT_DOUBLE_EQ(in_usage->keep_ratio, 0.25);
  EXPECT_TRUE(ParseCompletionChunk("[DONE]")->done);
  EXPECT_TRUE(ParseCompletionChunk(" [DONE] ")->done);
  auto err = ParseCompletionChunk(R"({"error":{"message":"KV cache full","type":"server_error"}})");
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->error, "KV cache full");
  EXPECT_FALSE(ParseCompletionChunk("not json").ok());
  EXPECT_FALSE(ParseCompletionChunk("[1]").ok());
}

TEST(SseClientTest, ErrorMessagesAndUrls) {
  EXPECT_EQ(ErrorMessageFromBody(R"({"error":{"message":"no such model"}})"), "no such model");
  EXPECT_EQ(ErrorMessageFromBody(R"({"error":"bad"})"), "bad");
  EXPECT_EQ(ErrorMessageFromBody("Not Found\n"), "Not Found");
  EXPECT_EQ(ErrorMessageFromBody(""), "(empty body)");
  auto u = ParseServerUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->scheme_host_port, "http://127.0.0.1:8000");
  EXPECT_EQ(u->base_path, "");
  auto v1 = ParseServerUrl("http://localhost:8000/v1/");
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->base_path, "");
  EXPECT_EQ(ParseServerUrl("https://h/proxy/v1")->base_path, "/proxy");
  for (const std::string bad : {"127.0.0.1:8000", "ftp://h", "http://", "http://h:99999",
                                "http://h:x", "http://h/a?b=1"}) {
    EXPECT_FALSE(ParseServerUrl(bad).ok()) << bad;
  }
}

TEST(LoadGenPrometheusTest, ParsesValuesAndSumsLabelSets) {
  auto m = ParsePrometheusText(
      "# HELP uniprefill_kv_bytes_used KV bytes\n"
      "# TYPE uniprefill_kv_bytes_used gauge\n"
      "uniprefill_kv_bytes_used 1.5e6\n"
      "uniprefill_mixed_steps_total{model=\"a\"} 3\n"
      "uniprefill_mixed_steps_total{model=\"b\"} 4 1700000000\n"
      "broken_line\n"
      "bad_value abc\n");
  EXPECT_DOUBLE_EQ(m["uniprefill_kv_bytes_used"], 1.5e6);
  EXPECT_DOUBLE_EQ(m["uniprefill_mixed_steps_total"], 7);
  EXPECT_EQ(m.count("broken_line"), 0u);
  EXPECT_EQ(m.count("bad_value"), 0u);
}

// ---- Against a fake server ----

// A fake OpenAI-compatible server: /v1/models, /metrics, and /v1/completions streaming one token
// chunk per max_tokens with `token_delay` between them, then a finish chunk, a usage chunk and
// [DONE]. Model "fake-model" only (404 otherwise); the prompt "fail-mid-stream" sends an error
// event after one token.
class FakeServer {
 public:
  explicit FakeServer(std::chrono::milliseconds token_delay) : delay_(token_delay) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(16); };
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})",
                      "application/json");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const int n = in_flight_.load();
      std::ostringstream m;
      m << "# TYPE uniprefill_kv_bytes_used gauge\nuniprefill_kv_bytes_used " << n * 1000
        << "\nuniprefill_kv_bytes_dense_equivalent " << n * 2000 << "\nuniprefill_kv_bytes_saved "
        << n * 1000 << "\nuniprefill_mixed_steps_total " << completed_.load()
        << "\nuniprefill_step_budget_tokens{model_name=\"fake-model\"} 432"
        << "\nuniprefill_attention_price_slowdown{model_name=\"fake-model\"} 1.77\n";
      if (report_gpu_) {  // as serve --device cuda: 1400 / 1600 MHz in turn, 600 / 700 W
        const bool odd = scrapes_++ % 2 == 1;
        m << "uniprefill_gpu_sm_clock_mhz{gpu=\"0000:01:00.0\"} " << (odd ? 1600 : 1400)
          << "\nuniprefill_gpu_power_watts{gpu=\"0000:01:00.0\"} " << (odd ? 700 : 600) << "\n";
        if (second_gpu_) {  // a tensor-parallel server's other GPU: 1200 MHz, 300 W
          m << "uniprefill_gpu_sm_clock_mhz{gpu=\"0000:41:00.0\"} 1200\n"
            << "uniprefill_gpu_power_watts{gpu=\"0000:41:00.0\"} 300\n";
        }
      }
      res.set_content(m.str(), "text/plain; version=0.0.4");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Complete(req, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_in_flight() const { return max_in_flight_.load(); }
  // /metrics also reports a GPU's clock and power from now on.
  void ReportGpu() { report_gpu_ = true; }
  // ... and a second GPU's (a --tensor-parallel server's).
  void ReportTwoGpus() { report_gpu_ = second_gpu_ = true; }
  nlohmann::json last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }

 private:
  void Complete(const httplib::Request& req, httplib::Response& res) {
    const nlohmann::json body = nlohmann::json::parse(req.body);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = body;
    }
    if (body.value("model", "") != "fake-model") {
      res.status = 404;
      res.set_content(R"({"error":{"message":"model 'wrong' is not served here","type":"x"}})",
                      "application/json");
      return;
    }
    const int now = ++in_flight_;
    for (int seen = max_in_flight_.load(); now > seen;) {
      if (max_in_flight_.compare_exchange_weak(seen, now)) break;
    }
    const int tokens = body.value("max_tokens", 1);
    const bool fail = body["prompt"] == "fail-mid-stream";
    const bool up = body["uniprefill"] != false;
    const int prompt_tokens = body["prompt"].is_array() ? static_cast<int>(body["prompt"].size()) : 4;
    res.set_chunked_content_provider(
        "text/event-stream", [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& data) {
            const std::string event = "data: " + data + "\n\n";
            sink.write(event.data(), event.size());
          };
          const std::string tok = R"({"object":"text_completion","choices":[{"index":0,"text":"tok ","finish_reason":null}]})";
          for (int i = 0; i < tokens; ++i) {
            std::this_thread::sleep_for(delay_);
            send(tok);
            if (fail) {
              --in_flight_;
              send(R"({"error":{"message":"KV cache exhausted","type":"server_error"}})");
              sink.done();
              return true;
            }
          }
          send(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
          nlohmann::json usage = {
              {"choices", nlohmann::json::array()},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", tokens}}}};
          if (up) usage["uniprefill"] = {{"kept", {64}}, {"keep_ratio", 0.5}};
          send(usage.dump());
          --in_flight_;  // before [DONE], so a worker's next request never overlaps this one
          ++completed_;
          send("[DONE]");
          sink.done();
          return true;
        });
  }

  std::chrono::milliseconds delay_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> in_flight_{0}, max_in_flight_{0}, completed_{0};
  std::atomic<bool> report_gpu_{false};
  std::atomic<bool> second_gpu_{false};
  std::atomic<int> scrapes_{0};
  std::mutex mu_;
  nlohmann::json last_body_;
};

HttpClient ClientFor(const std::string& url, double timeout_s = 30) {
  HttpClientOptions o;
  o.read_timeout_s = timeout_s;
  return HttpClient(ParseServerUrl(url).value(), o);
}

TEST(LoadGeneratorTest, ConcurrencyRunAgainstFakeServer) {
  FakeServer server(std::chrono::milliseconds(10));
  HttpClient client = ClientFor(server.url());
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models.ok()) << models.status().message();
  EXPECT_EQ(models->status, 200);

  LoadOptions o;
  o.model = "fake-model";
  o.concurrency = 3;
  o.metrics_interval_s = 0.01;
  const int kTokens = 5;
  auto requests = RandomTokenRequests(9, 32, kTokens, 1000, 20000, 1);
  int last_done = 0, calls = 0;
  RunResult run = RunLoad(client, o, ParseModes("uniprefill").value()[0], requests,
                          [&](int done, int total) {
                            EXPECT_EQ(total, 9);
                            EXPECT_EQ(done, last_done + 1);
                            last_done = done;
                            ++calls;
                          });
  EXPECT_EQ(calls, 9);
  ASSERT_EQ(run.records.size(), 9u);
  for (const RequestRecord& r : run.records) {
    SCOPED_TRACE(r.index);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.http_status, 200);
    EXPECT_EQ(r.token_chunks, kTokens);
    EXPECT_EQ(r.completion_tokens, kTokens);
    EXPECT_EQ(r.prompt_tokens, 32);
    EXPECT_EQ(r.itl_s.size(), static_cast<size_t>(kTokens - 1));
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_LT(r.ttft_s, r.e2e_s);
    for (double gap : r.itl_s) EXPECT_GT(gap, 0.002);  // the server sleeps 10 ms per token
    EXPECT_DOUBLE_EQ(r.keep_ratio, 0.5);
  }
  EXPECT_LE(server.max_in_flight(), 3);
  EXPECT_GE(server.max_in_flight(), 2);
  ModeSummary s = SummarizeRun(run);
  EXPECT_EQ(s.ok, 9);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.completion_tokens, 9 * kTokens);
  EXPECT_DOUBLE_EQ(s.mean_keep_ratio, 0.5);
  EXPECT_GT(s.request_throughput, 0);
  // 9 requests of >= 50 ms on 3 workers take >= 150 ms.
  EXPECT_GE(run.duration_s, 0.14);
  EXPECT_TRUE(run.metrics.available);
  EXPECT_GE(run.metrics.kv_bytes_used_peak, 1000);
  EXPECT_LE(run.metrics.kv_bytes_used_peak, 3000);
  EXPECT_DOUBLE_EQ(run.metrics.kv_bytes_dense_equivalent_peak, 2 * run.metrics.kv_bytes_used_peak);
  EXPECT_DOUBLE_EQ(run.metrics.mixed_steps, 9);
  const nlohmann::json body = server.last_body();
  EXPECT_EQ(body["uniprefill"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["prompt"].size(), 32u);
}

// `requests` dense requests of `output_tokens` against `server`, two at a time, /metrics scraped
// every 10 ms: what the GPU-gauge tests below run.
RunResult RunScrapingOften(const FakeServer& server, int requests, int output_tokens) {
  LoadOptions o;
  o.model = "fake-model";
  o.concurrency = 2;
  o.metrics_interval_s = 0.01;
  return RunLoad(ClientFor(server.url()), o, ParseModes("dense").value()[0],
                 RandomTokenRequests(requests, 16, output_tokens, 1000, 20000, 3));
}

TEST(LoadGeneratorTest, TheGpuClockIsAveragedOverTheScrapesMadeDuringTheRun) {
  FakeServer server(std::chrono::milliseconds(10));
  server.ReportGpu();
  const RunResult run = RunScrapingOften(server, 6, 5);
  const KvMetrics& m = run.metrics;
  // Every scrape but the one before the first request and the one after the last.
  EXPECT_EQ(m.gpu_scrapes, m.scrapes - 2);
  ASSERT_GE(m.gpu_scrapes, 2);
  EXPECT_DOUBLE_EQ(m.gpu_sm_mhz_min, 1400);
  EXPECT_GT(m.gpu_sm_mhz_mean, 1400);
  EXPECT_LT(m.gpu_sm_mhz_mean, 1600);
  EXPECT_NEAR(m.gpu_power_w_mean, 600 + (m.gpu_sm_mhz_mean - 1400) / 2, 1e-9);
  const nlohmann::json j = ToJson(m);
  EXPECT_EQ(j["gpu_scrapes"], m.gpu_scrapes);
  EXPECT_EQ(m.gpus, 1);
  EXPECT_DOUBLE_EQ(j["gpu_sm_clock_mhz_mean"].get<double>(), m.gpu_sm_mhz_mean);
  // Without the gauges (a CPU server): none counted.
  FakeServer cpu(std::chrono::milliseconds(1));
  const RunResult plain = RunScrapingOften(cpu, 2, 2);
  EXPECT_GT(plain.metrics.scrapes, 0);
  EXPECT_EQ(plain.metrics.gpu_scrapes, 0);
}

// Two GPUs (a tensor-parallel server): a scrape's clock is their mean, the minimum over both,
// the power their sum; not the label sets' sums of ParsePrometheusText.
TEST(LoadGeneratorTest, SeveralGpusClocksAreAveragedAndTheirPowerSummed) {
  FakeServer server(std::chrono::milliseconds(10));
  server.ReportTwoGpus();
  const RunResult run = RunScrapingOften(server, 6, 5);
  const KvMetrics& m = run.metrics;
  ASSERT_GE(m.gpu_scrapes, 2);
  EXPECT_EQ(m.gpus, 2);
  EXPECT_DOUBLE_EQ(m.gpu_sm_mhz_min, 1200);
  // The first GPU's 1400 / 1600 in turn beside the second's 1200: means of 1300 / 1400.
  EXPECT_GT(m.gpu_sm_mhz_mean, 1300);
  EXPECT_LT(m.gpu_sm_mhz_mean, 1400);
  // 600 / 700 W beside 300 W: 900 / 1000 W, in step with the clock's mean.
  EXPECT_NEAR(m.gpu_power_w_mean, 900 + (m.gpu_sm_mhz_mean - 1300), 1e-9);
  EXPECT_EQ(ToJson(m)["gpus"], 2);
}

TEST(LoadGeneratorTest, PrometheusValuesKeepsEachLabelSet) {
  const std::string text = "# TYPE g gauge\ng{gpu=\"a\"} 1\ng{gpu=\"b\"} 2.5\ngx 7\nbad{ 3\ng 4\n";
  EXPECT_EQ(PrometheusValues(text, "g"), (std::vector<double>{1, 2.5, 4}));
  EXPECT_TRUE(PrometheusValues(text, "missing").empty());
  EXPECT_DOUBLE_EQ(ParsePrometheusText(text)["g"], 7.5);
}

TEST(LoadGeneratorTest, RateRunSendsEveryRequestDense) {
  FakeServer server(std::chrono::milliseconds(2));
  LoadOptions o;
  o.model = "fake-model";
  o.rate = 100;
  o.seed = 3;
  o.metrics_interval_s = 0;
  RunResult run = RunLoad(ClientFor(server.url()), o, ParseModes("dense").value()[0],
                          RandomTokenRequests(8, 4, 3, 1, 9, 2));
  ModeSummary s = SummarizeRun(run);
  EXPECT_EQ(s.ok, 8) << s.first_error;
  EXPECT_EQ(s.itl_s.count, 8 * 2);
  EXPECT_LT(s.mean_keep_ratio, 0);  // dense: no keep ratio reported
  EXPECT_FALSE(run.metrics.available);
  EXPECT_EQ(server.last_body()["uniprefill"], false);
  const std::vector<double> arrivals = PoissonArrivals(8, 100, 3);
  for (const RequestRecord& r : run.records) EXPECT_GE(r.start_s + 1e-3, arrivals[r.index]);
}

TEST(LoadGeneratorTest, HttpAndStreamErrorsAreCountedWithTheServersMessage) {
  FakeServer server(std::chrono::milliseconds(1));
  HttpClient client = ClientFor(server.url());
  LoadOptions o;
  o.model = "wrong";
  o.concurrency = 2;
  o.metrics_interval_s = 0;
  const BenchMode dense = ParseModes("dense").value()[0];
  ModeSummary s = SummarizeRun(RunLoad(client, o, dense, RandomTokenRequests(3, 4, 2, 1, 9, 2)));
  EXPECT_EQ(s.ok, 0);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.first_error, "HTTP 404: model 'wrong' is not served here");

  RequestSpec fail;
  fail.prompt_text = "fail-mid-stream";
  fail.max_tokens = 4;
  o.model = "fake-model";
  RunResult run = RunLoad(client, o, dense, {fail});
  ASSERT_EQ(run.records.size(), 1u);
  EXPECT_FALSE(run.records[0].ok);
  EXPECT_EQ(run.records[0].error, "error in the stream: KV cache exhausted");
}

TEST(LoadGeneratorTest, SlowRequestsTimeOut) {
  FakeServer server(std::chrono::milliseconds(150));
  LoadOptions o;
  o.model = "fake-model";
  o.concurrency = 1;
  o.timeout_s = 0.2;
  o.metrics_interval_s = 0;
  RunResult run = RunLoad(ClientFor(server.url(), 5), o, ParseModes("dense").value()[0],
                          RandomTokenRequests(1, 4, 3, 1, 9, 2));
  ASSERT_EQ(run.records.size(), 1u);
  EXPECT_FALSE(run.records[0].ok);
  EXPECT_NE(run.records[0].error.find("timed out"), std::string::npos) << run.records[0].error;
}

// A local port with nothing listening: bind port 0, read the port, close.
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(LoadGeneratorTest, UnreachableServerNamesTheUrl) {
  const std::string url = "http://127.0.0.1:" + std::to_string(UnusedPort());
  HttpClient client = ClientFor(url);
  auto models = client.Get("/v1/models");
  ASSERT_FALSE(models.ok());
  EXPECT_EQ(models.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(models.status().message().find("cannot connect to " + url), std::string::npos)
      << models.status().message();
  LoadOptions o;
  o.model = "m";
  o.concurrency = 1;
  RunResult run = RunLoad(client, o, ParseModes("dense").value()[0],
                          RandomTokenRequests(2, 4, 2, 1, 9, 2));
  ModeSummary s = SummarizeRun(run);
  EXPECT_EQ(s.failed, 2);
  EXPECT_NE(s.first_error.find("cannot connect"), std::string::npos) << s.first_error;
  EXPECT_FALSE(run.metrics.available);
}


// ---- The command line against the fake server ----

TEST(BenchServeCliTest, BadFlagsExitTwoWithOneErrorLine) {
  const std::string data = testing::TempPath("bench_serve_bad.jsonl");
  {
    std::ofstream f(data);
    f << "{\"prompt\": \"ok\"}\n{\"prompt\": \"no end\"\n";
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-n 2", "exactly one of --concurrency"},
      {"--concurrency 1 --rate 2 -n 2", "excludes"},
      {"--concurrency 0 -n 2", "--concurrency must be at least 1"},
      {"--rate 0 -n 2", "--rate must be more than 0"},
      {"--concurrency 1 -n 0", "--num-requests must be at least 1"},
      {"--concurrency 1 -n 2 --modes dense,sparse", "unknown mode 'sparse'"},
      {"--concurrency 1 -n 2 --vocab-range 9,1", "--vocab-range"},
      {"--concurrency 1 -n 2 --url localhost:8000", "http://"},
      {"--concurrency 1 -n 2 --dataset /nonexistent/d.jsonl", "/nonexistent/d.jsonl"},
      {"--concurrency 1 -n 2 --dataset " + data, "bench_serve_bad.jsonl:2: not valid JSON"},
      {"--concurrency 1 -n 2 --long-prompt-tokens 64", "--long-prompt-tokens needs --rate"},
      {"--rate 2 -n 2 --long-prompt-tokens 64 --long-requests 0", "--long-requests"},
      {"--rate 2 -n 2 --slo-itl-ms 0", "--slo-itl-ms"},
  };
  for (const auto& [args, needle] : cases) {
    ExpectCleanError("bench serve " + args, needle);
    EXPECT_EQ(RunCli("bench serve " + args).exit_code, 2) << args;
  }
}

TEST(BenchServeCliTest, UnreachableServerExitsOneNamingTheUrl) {
  const std::string url = "http://127.0.0.1:" + std::to_string(UnusedPort());
  ExpectCleanError("bench serve --concurrency 1 -n 1 --url " + url, "cannot connect to " + url);
  CliResult r = RunCli("bench serve --concurrency 1 -n 1 --url " + url);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("uniprefill serve"), std::string::npos) << r.err;
}

TEST(BenchServeCliTest, ComparesDenseAndUniPrefillAgainstFakeServer) {
  FakeServer server(std::chrono::milliseconds(10));
  const std::string json = testing::TempPath("bench_serve.json");
  CliResult r = RunCli("bench serve --url " + server.url() +
                       " --concurrency 2 -n 4 --prompt-tokens 16 --output-tokens 3 --seed 5 -o " +
                       json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* row : {"requests ok/failed", "TTFT p50 (ms)", "ITL p99 (ms)", "E2E p90 (s)",
                          "mean keep ratio", "KV peak used (MiB)", "uniprefill vs dense:",
                          "server step budget (tokens)", "server attention price (x FLOPs)"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  EXPECT_LE(server.max_in_flight(), 2);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["config"]["model"], "fake-model");
  EXPECT_EQ(j["config"]["concurrency"], 2);
  EXPECT_EQ(j["config"]["prompt_tokens"], 16);
  ASSERT_EQ(j["modes"].size(), 2u);
  EXPECT_EQ(j["modes"][0]["mode"], "dense");
  EXPECT_EQ(j["modes"][1]["uniprefill_field"], true);
  for (const nlohmann::json& m : j["modes"]) {
    EXPECT_EQ(m["summary"]["ok"], 4);
    EXPECT_EQ(m["requests"].size(), 4u);
    EXPECT_EQ(m["requests"][0]["itl_s"].size(), 2u);
    EXPECT_TRUE(m["kv_metrics"]["available"]);
    EXPECT_EQ(m["kv_metrics"]["step_budget_tokens"], 432);  // the server's gauge, recorded
    EXPECT_DOUBLE_EQ(m["kv_metrics"]["attention_price_slowdown"].get<double>(), 1.77);
  }
  EXPECT_GT(j["comparisons"][0]["ttft_p50_ratio"].get<double>(), 0);
  EXPECT_EQ(r.out.find("GPU SM clock"), std::string::npos) << "a CPU server has no GPU rows";
}

// `bench serve` against a fake GPU server, JSON to `json`: 2 rounds of 40 tokens 10 ms apart,
// ~0.8 s, several of bench serve's 0.2 s scrapes.
CliResult BenchServeLongEnoughToScrape(const FakeServer& server, const std::string& json) {
  return RunCli("bench serve --url " + server.url() +
                " --concurrency 2 -n 4 --prompt-tokens 16 --output-tokens 40 --modes dense -o " +
                json);
}

TEST(BenchServeCliTest, AGpuServersClockAndPowerAreRowsAndJson) {
  FakeServer server(std::chrono::milliseconds(10));
  server.ReportGpu();
  const std::string json = testing::TempPath("bench_serve_gpu.json");
  const CliResult r = BenchServeLongEnoughToScrape(server, json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* row :
       {"GPU SM clock mean (MHz)", "GPU SM clock min (MHz)", "GPU power mean (W)"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  const nlohmann::json& kv = j["modes"][0]["kv_metrics"];
  EXPECT_GT(kv["gpu_scrapes"].get<int>(), 0) << kv.dump();
  EXPECT_GE(kv["gpu_sm_clock_mhz_mean"].get<double>(), 1400);
  EXPECT_LE(kv["gpu_sm_clock_mhz_mean"].get<double>(), 1600);
  EXPECT_EQ(r.out.find("GPUs reported"), std::string::npos) << "one GPU: no count row";
}

TEST(BenchServeCliTest, ATensorParallelServersGpusAreCountedAndTheirPowerSummed) {
  FakeServer server(std::chrono::milliseconds(10));
  server.ReportTwoGpus();
  const std::string json = testing::TempPath("bench_serve_two_gpus.json");
  const CliResult r = BenchServeLongEnoughToScrape(server, json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* row :
       {"GPUs reported", "GPU SM clock mean (MHz)", "GPU power mean, GPUs summed (W)"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  const nlohmann::json& kv = j["modes"][0]["kv_metrics"];
  EXPECT_EQ(kv["gpus"], 2) << kv.dump();
  EXPECT_DOUBLE_EQ(kv["gpu_sm_clock_mhz_min"].get<double>(), 1200);
  EXPECT_GE(kv["gpu_power_watts_mean"].get<double>(), 900);
}

// A mixed workload: short requests at Poisson times, one long among them, each class reported.
TEST(BenchServeCliTest, MixedWorkloadReportsEachClass) {
  FakeServer server(std::chrono::milliseconds(5));
  const std::string json = testing::TempPath("bench_serve_mixed.json");
  CliResult r = RunCli("bench serve --url " + server.url() +
                       " --rate 50 -n 6 --prompt-tokens 16 --output-tokens 3 --modes dense "
                       "--long-prompt-tokens 200 --long-requests 1 --long-output-tokens 2 "
                       "--slo-ttft-ms 5000 --slo-itl-ms 1000 --warmup 0 -o " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* row : {"short: TTFT p99 (ms)", "long: ITL p99 (ms)", "goodput (req/s, SLO)",
                          "long: good / ok"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  }
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["config"]["long_prompt_tokens"], 200);
  const nlohmann::json& m = j["modes"][0];
  EXPECT_EQ(m["summary"]["ok"], 7);
  EXPECT_EQ(m["classes"]["short"]["ok"], 6);
  EXPECT_EQ(m["classes"]["long"]["ok"], 1);
  EXPECT_EQ(m["classes"]["long"]["good"], 1);  // a generous SLO against the fast fake server
  int longs = 0;
  for (const nlohmann::json& req : m["requests"]) longs += req["class"] == "long";
  EXPECT_EQ(longs, 1);
}

}  // namespace
}  // namespace uniprefill::loadgen
