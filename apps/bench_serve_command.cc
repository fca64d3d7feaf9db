#include "bench_serve_command.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "output_files.h"
#include "progress_bar.h"
#include "loadgen/load_generator.h"
#include "loadgen/sse_client.h"

namespace uniprefill::cli {
namespace {

using loadgen::BenchMode;
using loadgen::ModeSummary;
using loadgen::RequestSpec;
using loadgen::RunResult;

// One `error:` line; returns 2, the exit code of a bad flag.
int FlagError(const std::string& message) {
  std::fprintf(stderr, "error: %s (see 'uniprefill bench serve --help')\n", message.c_str());
  return 2;
}

bool ParseVocabRange(const std::string& s, int32_t* lo, int32_t* hi) {
  long long a = 0, b = 0;
  char extra = 0;
  if (std::sscanf(s.c_str(), "%lld,%lld%c", &a, &b, &extra) != 2) return false;
  if (a < 0 || b < a || b > INT32_MAX) return false;
  *lo = static_cast<int32_t>(a);
  *hi = static_cast<int32_t>(b);
  return true;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string HostName() {
  char buf[256] = {};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "unknown";
}

// A table cell: `v * scale` with `decimals`, or "-" for values not measured (NaN, negative).
std::string Cell(double v, double scale, int decimals) {
  if (std::isnan(v) || v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v * scale);
  return buf;
}

struct ModeRun {
  BenchMode mode;
  RunResult run;
  ModeSummary summary;
  std::vector<std::pair<std::string, ModeSummary>> classes;  // mixed workloads: short, long
};

void PrintTable(const std::vector<ModeRun>& runs) {
  constexpr int kLabel = 30;
  int width = 12;
  for (const ModeRun& r : runs) width = std::max<int>(width, static_cast<int>(r.mode.name.size()) + 2);
  auto row = [&](const char* label, auto cell) {
    std::printf("%-*s", kLabel, label);
    for (const ModeRun& r : runs) std::printf("%*s", width, cell(r).c_str());
    std::printf("\n");
  };
  constexpr double kMs = 1e3, kMiB = 1.0 / (1 << 20);
  std::printf("%-*s", kLabel, "");
  for (const ModeRun& r : runs) std::printf("%*s", width, r.mode.name.c_str());
  std::printf("\n");
  row("requests ok/failed", [](const ModeRun& r) {
    return std::to_string(r.summary.ok) + "/" + std::to_string(r.summary.failed);
  });
  row("duration (s)", [](const ModeRun& r) { return Cell(r.summary.duration_s, 1, 2); });
  row("request throughput (req/s)",
      [](const ModeRun& r) { return Cell(r.summary.request_throughput, 1, 3); });
  row("output tokens/s", [](const ModeRun& r) { return Cell(r.summary.output_tokens_per_s, 1, 1); });
  row("total tokens/s", [](const ModeRun& r) { return Cell(r.summary.total_tokens_per_s, 1, 1); });
  row("TTFT mean (ms)", [&](const ModeRun& r) { return Cell(r.summary.ttft_s.mean, kMs, 1); });
  row("TTFT p50 (ms)", [&](const ModeRun& r) { return Cell(r.summary.ttft_s.p50, kMs, 1); });
  row("TTFT p90 (ms)", [&](const ModeRun& r) { return Cell(r.summary.ttft_s.p90, kMs, 1); });
  row("TTFT p99 (ms)", [&](const ModeRun& r) { return Cell(r.summary.ttft_s.p99, kMs, 1); });
  row("ITL p50 (ms)", [&](const ModeRun& r) { return Cell(r.summary.itl_s.p50, kMs, 2); });
  row("ITL p90 (ms)", [&](const ModeRun& r) { return Cell(r.summary.itl_s.p90, kMs, 2); });
  row("ITL p99 (ms)", [&](const ModeRun& r) { return Cell(r.summary.itl_s.p99, kMs, 2); });
  row("ITL max (ms)", [&](const ModeRun& r) { return Cell(r.summary.itl_s.max, kMs, 2); });
  row("E2E p50 (s)", [](const ModeRun& r) { return Cell(r.summary.e2e_s.p50, 1, 3); });
  row("E2E p90 (s)", [](const ModeRun& r) { return Cell(r.summary.e2e_s.p90, 1, 3); });
  row("E2E p99 (s)", [](const ModeRun& r) { return Cell(r.summary.e2e_s.p99, 1, 3); });
  row("mean keep ratio", [](const ModeRun& r) { return Cell(r.summary.mean_keep_ratio, 1, 3); });
  auto kv = [&](double loadgen::KvMetrics::*field) {
    return [=](const ModeRun& r) { return r.run.metrics.available ? Cell(r.run.metrics.*field, kMiB, 2) : "-"; };
  };
  row("KV peak used (MiB)", kv(&loadgen::KvMetrics::kv_bytes_used_peak));
  row("KV peak dense-equiv. (MiB)", kv(&loadgen::KvMetrics::kv_bytes_dense_equivalent_peak));
  row("KV peak saved (MiB)", kv(&loadgen::KvMetrics::kv_bytes_saved_peak));
  row("mixed prefill+decode steps", [](const ModeRun& r) {
    return r.run.metrics.available ? Cell(r.run.metrics.mixed_steps, 1, 0) : "-";
  });
  row("server step budget (tokens)", [](const ModeRun& r) {
    return r.run.metrics.step_budget_tokens > 0 ? Cell(r.run.metrics.step_budget_tokens, 1, 0)
                                                : "-";
  });
  row("server attention price (x FLOPs)", [](const ModeRun& r) {
    return r.run.metrics.attention_price_slowdown > 0
               ? Cell(r.run.metrics.attention_price_slowdown, 1, 2)
               : "-";
  });
  // The GPU's clock under the power limit (serve --device cuda): ratios between modes compare
  // like with like only at like clocks.
  bool any_gpu = false;
  for (const ModeRun& r : runs) any_gpu |= r.run.metrics.gpu_scrapes > 0;
  if (any_gpu) {
    auto gpu = [](double loadgen::KvMetrics::*field, int decimals) {
      return [=](const ModeRun& r) {
        return r.run.metrics.gpu_scrapes > 0 ? Cell(r.run.metrics.*field, 1, decimals) : "-";
      };
    };
    // A tensor-parallel server reports each of its GPUs: the clock is their mean (the minimum
    // over all), the power their sum.
    int most_gpus = 0;
    for (const ModeRun& r : runs) most_gpus = std::max(most_gpus, r.run.metrics.gpus);
    if (most_gpus > 1) {
      row("GPUs reported", [](const ModeRun& r) { return Cell(r.run.metrics.gpus, 1, 0); });
    }
    row("GPU SM clock mean (MHz)", gpu(&loadgen::KvMetrics::gpu_sm_mhz_mean, 0));
    row("GPU SM clock min (MHz)", gpu(&loadgen::KvMetrics::gpu_sm_mhz_min, 0));
    row(most_gpus > 1 ? "GPU power mean, GPUs summed (W)" : "GPU power mean (W)",
        gpu(&loadgen::KvMetrics::gpu_power_w_mean, 0));
  }
  row("goodput (req/s, SLO)", [](const ModeRun& r) { return Cell(r.summary.goodput, 1, 3); });
  if (runs.empty() || runs[0].classes.empty()) return;
  for (size_t k = 0; k < runs[0].classes.size(); ++k) {
    const std::string cls = runs[0].classes[k].first;
    auto of = [k](const ModeRun& r) -> const ModeSummary& { return r.classes[k].second; };
    const std::string p = cls + ": ";
    row((p + "requests ok/failed").c_str(), [&](const ModeRun& r) {
      return std::to_string(of(r).ok) + "/" + std::to_string(of(r).failed);
    });
    using loadgen::LatencyStats;
    auto latency = [&](const char* label, LatencyStats ModeSummary::*stats,
                       double LatencyStats::*pct, int decimals) {
      row((p + label).c_str(),
          [&](const ModeRun& r) { return Cell(of(r).*stats.*pct, kMs, decimals); });
    };
    latency("TTFT p50 (ms)", &ModeSummary::ttft_s, &LatencyStats::p50, 1);
    latency("TTFT p90 (ms)", &ModeSummary::ttft_s, &LatencyStats::p90, 1);
    latency("TTFT p99 (ms)", &ModeSummary::ttft_s, &LatencyStats::p99, 1);
    latency("ITL p50 (ms)", &ModeSummary::itl_s, &LatencyStats::p50, 2);
    latency("ITL p90 (ms)", &ModeSummary::itl_s, &LatencyStats::p90, 2);
    latency("ITL p99 (ms)", &ModeSummary::itl_s, &LatencyStats::p99, 2);
    latency("ITL max (ms)", &ModeSummary::itl_s, &LatencyStats::max, 2);
    row((p + "goodput (req/s, SLO)").c_str(),
        [&](const ModeRun& r) { return Cell(of(r).goodput, 1, 3); });
    row((p + "good / ok").c_str(), [&](const ModeRun& r) {
      return std::to_string(of(r).good) + "/" + std::to_string(of(r).ok);
    });
  }
}

// UniPrefill modes against the first dense mode: ratios of TTFT p50 and throughput (both > 0).
nlohmann::json Comparisons(const std::vector<ModeRun>& runs) {
  nlohmann::json out = nlohmann::json::array();
  const ModeRun* dense = nullptr;
  for (const ModeRun& r : runs) {
    if (r.mode.dense() && !dense) dense = &r;
  }
  if (!dense || dense->summary.ok == 0) return out;
  const ModeSummary& d = dense->summary;
  for (const ModeRun& r : runs) {
    const ModeSummary& u = r.summary;
    if (r.mode.dense() || u.ok == 0) continue;
    const double ttft = u.ttft_s.p50 / d.ttft_s.p50;
    const double req = u.request_throughput / d.request_throughput;
    const double tok = u.output_tokens_per_s / d.output_tokens_per_s;
    std::printf("%s vs %s: TTFT p50 ratio %.3f (speedup %.2fx), request throughput ratio %.3f, "
                "output tokens/s ratio %.3f\n",
                r.mode.name.c_str(), dense->mode.name.c_str(), ttft, 1 / ttft, req, tok);
    out.push_back({{"mode", r.mode.name},
                   {"baseline", dense->mode.name},
                   {"ttft_p50_ratio", ttft},
                   {"request_throughput_ratio", req},
                   {"output_tokens_per_s_ratio", tok}});
  }
  return out;
}

}  // namespace

CLI::App* AddBenchServeCommand(CLI::App& bench_group, BenchServeOptions& o) {
  CLI::App* cmd = bench_group.add_subcommand(
      "serve",
      "Load-test a running OpenAI-compatible server (uniprefill serve): TTFT, ITL, E2E latency and "
      "throughput, dense vs UniPrefill");
  cmd->add_option("--url", o.url, "Server base URL")->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--model", o.model, "Model name in requests (default: the first of /v1/models)");
  auto* conc = cmd->add_option("--concurrency", o.concurrency,
                               "Closed loop: N requests in flight, each sent when one finishes");
  auto* rate = cmd->add_option("--rate", o.rate,
                               "Open loop: requests/s arriving as a Poisson process (--seed)");
  conc->excludes(rate);
  cmd->add_option("-n,--num-requests", o.num_requests, "Measured requests per mode")->required();
  auto* prompt = cmd->add_option("--prompt-tokens", o.prompt_tokens,
                                 "Random token-id prompts of exactly this many tokens")
                     ->capture_default_str();
  cmd->add_option("--output-tokens", o.output_tokens,
                  "Tokens generated per request (ignore_eos); for --dataset lines without "
                  "max_tokens")
      ->capture_default_str();
  auto* vocab = cmd->add_option("--vocab-range", o.vocab_range,
                                "LO,HI: the token ids random prompts are drawn from")
                    ->capture_default_str();
  auto* dataset = cmd->add_option(
      "--dataset", o.dataset,
      "JSONL prompts: {\"prompt\": \"text\" | [ids]} or {\"prompt_token_ids\": [ids]}, optional "
      "\"max_tokens\"; reused in a cycle when shorter than --num-requests");
  dataset->excludes(prompt);
  dataset->excludes(vocab);
  cmd->add_option("--modes", o.modes,
                  "Comma list: dense, uniprefill, uniprefill:key=value[,key=value] (server options, "
                  "e.g. uniprefill:mode=fixed-ratio,keep_ratio=0.5)")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Unmeasured requests per mode before its run")
      ->capture_default_str();
  cmd->add_option("--timeout-s", o.timeout_s, "A request still running after this fails")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of random prompts and arrival times")
      ->capture_default_str();
  cmd->add_option("-o,--output", o.json_out, "Write configuration, summaries and every request "
                                             "as JSON");
  cmd->add_option("--long-prompt-tokens", o.long_prompt_tokens,
                  "Mixed workload (with --rate): long random prompts of this many tokens land "
                  "among the short requests (0: none)")
      ->capture_default_str()
      ->group("Mixed workload");
  cmd->add_option("--long-requests", o.long_requests,
                  "How many long requests, at evenly spaced times within the short stream")
      ->capture_default_str()
      ->group("Mixed workload");
  cmd->add_option("--long-output-tokens", o.long_output_tokens, "Tokens each long request makes")
      ->capture_default_str()
      ->group("Mixed workload");
  cmd->add_option("--slo-ttft-ms", o.slo_ttft_ms,
                  "Goodput: a request is good when its TTFT is at most this...")
      ->capture_default_str()
      ->group("Mixed workload");
  cmd->add_option("--slo-itl-ms", o.slo_itl_ms,
                  "...and its time per output token (mean inter-token gap) at most this")
      ->capture_default_str()
      ->group("Mixed workload");
  return cmd;
}

int BenchServeCommand(const BenchServeOptions& o) {
  // Flags first: nothing is sent until all of them make sense.
  if ((o.concurrency < 0) == (o.rate < 0)) {
    return FlagError("give exactly one of --concurrency N (requests in flight) or --rate R "
                     "(requests/s)");
  }
  if (o.concurrency == 0 || (o.concurrency < 0 && !(o.rate > 0))) {
    return FlagError(o.concurrency == 0 ? "--concurrency must be at least 1"
                                        : "--rate must be more than 0 requests/s");
  }
  if (o.num_requests < 1) return FlagError("--num-requests must be at least 1");
  if (o.output_tokens < 1) return FlagError("--output-tokens must be at least 1");
  if (o.warmup < 0) return FlagError("--warmup must be 0 or more");
  if (!(o.timeout_s > 0)) return FlagError("--timeout-s must be more than 0");
  int32_t vocab_lo = 0, vocab_hi = 0;
  if (o.dataset.empty()) {
    if (o.prompt_tokens < 1) return FlagError("--prompt-tokens must be at least 1");
    if (!ParseVocabRange(o.vocab_range, &vocab_lo, &vocab_hi)) {
      return FlagError("--vocab-range '" + o.vocab_range +
                       "' is not LO,HI with 0 <= LO <= HI (token ids)");
    }
  }
  Result<std::vector<BenchMode>> modes = loadgen::ParseModes(o.modes);
  if (!modes.ok()) return FlagError(modes.status().message());
  Result<loadgen::ServerUrl> url = loadgen::ParseServerUrl(o.url);
  if (!url.ok()) return FlagError("--url: " + url.status().message());
  std::vector<RequestSpec> requests, warmups;
  if (!o.dataset.empty()) {
    auto lines = loadgen::LoadDatasetJsonl(o.dataset, o.output_tokens);
    if (!lines.ok()) return FlagError("--dataset: " + lines.status().message());
    for (int i = 0; i < o.num_requests; ++i) requests.push_back((*lines)[i % lines->size()]);
    for (int i = 0; i < o.warmup; ++i) warmups.push_back((*lines)[i % lines->size()]);
  } else {
    // Warm-up prompts are drawn after the measured ones, so they never prime a prefix cache.
    requests = loadgen::RandomTokenRequests(o.num_requests + o.warmup, o.prompt_tokens,
                                           o.output_tokens, vocab_lo, vocab_hi, o.seed);
    warmups.assign(requests.begin() + o.num_requests, requests.end());
    requests.resize(o.num_requests);
  }
  const bool mixed = o.long_prompt_tokens > 0;
  if (mixed) {
    if (o.rate <= 0) return FlagError("--long-prompt-tokens needs --rate (the short stream)");
    if (!o.dataset.empty()) return FlagError("--long-prompt-tokens needs random prompts");
    if (o.long_requests < 1) return FlagError("--long-requests must be at least 1");
    if (o.long_output_tokens < 1) return FlagError("--long-output-tokens must be at least 1");
  }
  if (!(o.slo_ttft_ms > 0) || !(o.slo_itl_ms > 0)) {
    return FlagError("--slo-ttft-ms and --slo-itl-ms must be more than 0");
  }
  std::vector<double> arrivals;
  if (mixed) {
    std::vector<RequestSpec> longs = loadgen::RandomTokenRequests(
        o.long_requests, o.long_prompt_tokens, o.long_output_tokens, vocab_lo, vocab_hi,
        o.seed + 1);
    loadgen::TimedWorkload w = loadgen::MixedWorkload(requests, longs, o.rate, o.seed);
    requests = std::move(w.requests);
    arrivals = std::move(w.arrivals);
  }
  const loadgen::Slo slo{o.slo_ttft_ms / 1e3, o.slo_itl_ms / 1e3};
  if (!CheckOutputWritable(o.json_out, "--output")) return 1;

  loadgen::HttpClientOptions http;
  http.api_key = o.api_key;
  http.read_timeout_s = o.timeout_s;
  const loadgen::HttpClient client(*url, http);
  const std::string where = url->ToString();
  Result<loadgen::HttpResponse> models = client.Get("/v1/models");
  if (!models.ok()) {
    if (models.status().code() == ErrorCode::kNotFound) {
      std::fprintf(stderr, "error: %s; is the server running? Start one with `uniprefill serve "
                   "--port 8000` or pass --url\n", models.status().message().c_str());
    } else {
      std::fprintf(stderr, "error: GET %s/v1/models failed: %s\n", where.c_str(),
                   models.status().message().c_str());
    }
    return 1;
  }
  std::vector<std::string> served;
  if (models->status == 200) {
    const nlohmann::json j = nlohmann::json::parse(models->body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array()) {
      for (const nlohmann::json& m : j["data"]) {
        if (m.is_object() && m.contains("id") && m["id"].is_string()) served.push_back(m["id"]);
      }
    }
  }
  std::string model = o.model;
  if (model.empty()) {
    if (served.empty()) {
      std::fprintf(stderr, "error: GET %s/v1/models %s; pass --model\n", where.c_str(),
                   models->status == 200
                       ? "lists no model"
                       : ("answered HTTP " + std::to_string(models->status) + ": " +
                          loadgen::ErrorMessageFromBody(models->body)).c_str());
      return 1;
    }
    model = served[0];
  } else if (!served.empty() && std::find(served.begin(), served.end(), model) == served.end()) {
    std::fprintf(stderr, "warning: the server lists models '%s', not --model '%s'\n",
                 served[0].c_str(), model.c_str());
  }

  loadgen::LoadOptions load;
  load.model = model;
  load.concurrency = std::max(o.concurrency, 0);
  load.rate = o.concurrency > 0 ? 0 : o.rate;
  load.seed = o.seed;
  load.timeout_s = o.timeout_s;
  load.arrivals = arrivals;
  const std::string load_text = o.concurrency > 0
                                    ? "concurrency " + std::to_string(o.concurrency)
                                    : "rate " + Cell(o.rate, 1, 2) + " req/s (Poisson)";
  std::string workload =
      o.dataset.empty() ? "random " + std::to_string(o.prompt_tokens) + "-token prompts, " +
                              std::to_string(o.output_tokens) + " output tokens"
                        : "dataset " + o.dataset;
  if (mixed) {
    workload += " + " + std::to_string(o.long_requests) + " long " +
                std::to_string(o.long_prompt_tokens) + "-token prompts (" +
                std::to_string(o.long_output_tokens) + " output tokens) among them";
  }
  std::printf("server %s | model %s | %s | %d requests per mode | %s\n", where.c_str(),
              model.c_str(), load_text.c_str(), o.num_requests, workload.c_str());
  std::fflush(stdout);

  std::vector<ModeRun> runs;
  for (const BenchMode& mode : *modes) {
    for (const RequestSpec& w : warmups) {
      const std::string body = loadgen::BuildCompletionRequest(model, w, mode)
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      loadgen::RequestRecord r = loadgen::SendCompletion(client, body, o.timeout_s);
      if (!r.ok) std::fprintf(stderr, "warning: %s warm-up request failed: %s\n",
                              mode.name.c_str(), r.error.c_str());
    }
    ProgressBar bar(mode.name, "requests", /*enabled=*/true);
    ModeRun mr{mode, {}, {}, {}};
    mr.run = loadgen::RunLoad(client, load, mode, requests,
                             [&](int done, int total) { bar.Update(done, total); });
    bar.Finish();
    mr.summary = loadgen::SummarizeRun(mr.run, "", &slo);
    if (mixed) {
      for (const char* cls : {"short", "long"}) {
        mr.classes.emplace_back(cls, loadgen::SummarizeRun(mr.run, cls, &slo));
      }
    }
    std::fprintf(stderr, "%s: %d ok, %d failed in %.2f s\n", mode.name.c_str(), mr.summary.ok,
                 mr.summary.failed, mr.summary.duration_s);
    runs.push_back(std::move(mr));
  }

  std::printf("\n");
  PrintTable(runs);
  std::printf("\n");
  const nlohmann::json comparisons = Comparisons(runs);
  bool all_measured = true;
  for (const ModeRun& r : runs) {
    if (r.summary.failed > 0) {
      std::printf("%s: %d of %d requests failed; first error: %s\n", r.mode.name.c_str(),
                  r.summary.failed, o.num_requests, r.summary.first_error.c_str());
    }
    all_measured &= r.summary.ok > 0;
  }
  std::fflush(stdout);

  if (!o.json_out.empty()) {
    nlohmann::json config = {{"url", where},
                             {"model", model},
                             {"num_requests", o.num_requests},
                             {"warmup", o.warmup},
                             {"timeout_s", o.timeout_s},
                             {"seed", o.seed},
                             {"modes", o.modes},
                             {"date", UtcNow()},
                             {"host", HostName()}};
    if (o.concurrency > 0) {
      config["concurrency"] = o.concurrency;
    } else {
      config["rate"] = o.rate;
    }
    config["slo"] = {{"ttft_ms", o.slo_ttft_ms},
                     {"itl_ms", o.slo_itl_ms},
                     {"good", "ttft <= ttft_ms and mean inter-token gap <= itl_ms"}};
    if (mixed) {
      config["long_prompt_tokens"] = o.long_prompt_tokens;
      config["long_requests"] = o.long_requests;
      config["long_output_tokens"] = o.long_output_tokens;
    }
    if (o.dataset.empty()) {
      config["prompt_tokens"] = o.prompt_tokens;
      config["output_tokens"] = o.output_tokens;
      config["vocab_range"] = {vocab_lo, vocab_hi};
    } else {
      config["dataset"] = o.dataset;
      config["default_output_tokens"] = o.output_tokens;
    }
    nlohmann::json mode_json = nlohmann::json::array();
    for (const ModeRun& r : runs) {
      nlohmann::json records = nlohmann::json::array();
      for (const loadgen::RequestRecord& rec : r.run.records) {
        records.push_back(loadgen::ToJson(rec));
      }
      nlohmann::json classes = nlohmann::json::object();
      for (const auto& [cls, summary] : r.classes) classes[cls] = loadgen::ToJson(summary);
      mode_json.push_back({{"mode", r.mode.name},
                           {"uniprefill_field", r.mode.field},
                           {"summary", loadgen::ToJson(r.summary)},
                           {"classes", classes},
                           {"kv_metrics", loadgen::ToJson(r.run.metrics)},
                           {"requests", records}});
    }
    const nlohmann::json j = {
        {"config", config}, {"modes", mode_json}, {"comparisons", comparisons}};
    if (!WriteJsonFile(o.json_out, j, "--output")) return 1;
  }
  if (!all_measured) {
    std::fprintf(stderr, "error: a mode had no successful request (see the errors above)\n");
    return 1;
  }
  return 0;
}

}  // namespace uniprefill::cli
