// The load generator behind `uniprefill bench serve`: builds streaming /v1/completions requests
// (random token-id prompts or a JSONL dataset), sends them either from N closed-loop workers or at
// Poisson arrival times, times every request from its event stream (TTFT, inter-token gaps,
// end-to-end), polls /metrics for KV-memory peaks while the run lasts, and summarizes a run.
//
// Timing definitions (per request, all from the moment the request is handed to the client):
//   TTFT  = until the first token chunk: a chunk whose choices[0] has non-empty text, or empty text
//           and no finish_reason yet (a token whose text the server still holds back);
//   ITL   = the gaps between consecutive token chunks (a server that packs k tokens into one
//           chunk gives one gap for them, as in vLLM's benchmark);
//   E2E   = until the stream ends ([DONE] or connection close).
// Percentiles interpolate linearly between the two closest ranks (NumPy's default), see Percentile.
//
// Not for: the command line (apps/bench_serve_command.cc), closed-loop think time, or chat
// completions.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "loadgen/sse_client.h"

namespace uniprefill::loadgen {

// ---- Workload ----

// One request's prompt (text, or token ids when prompt_ids is not empty) and output length.
struct RequestSpec {
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  int max_tokens = 64;
  std::string cls;  // its class in a mixed workload ("short", "long"); empty: one class
};

// JSONL: one object per non-blank line, {"prompt": "text"} or {"prompt": [ids]} or
// {"prompt_token_ids": [ids]}, optionally "max_tokens": n (default_max_tokens otherwise); other
// keys are ignored. Errors name `source` and the line number ("data.jsonl:3: ...").
Result<std::vector<RequestSpec>> ParseDatasetJsonl(std::istream& in, const std::string& source,
                                                   int default_max_tokens);
Result<std::vector<RequestSpec>> LoadDatasetJsonl(const std::string& path, int default_max_tokens);

// `count` prompts of exactly prompt_tokens ids drawn uniformly from [lo, hi], each asking for
// output_tokens; the same seed gives the same prompts.
std::vector<RequestSpec> RandomTokenRequests(int count, int prompt_tokens, int output_tokens,
                                             int32_t lo, int32_t hi, uint64_t seed);

// Start offsets (seconds from the run's start) of n requests arriving as a Poisson process of
// `rate` requests/s: the first at 0, then exponential gaps of mean 1/rate.
std::vector<double> PoissonArrivals(int n, double rate, uint64_t seed);

// A mixed workload: `shorts` (class "short") arriving as a Poisson process of `rate` requests/s,
// and `longs` (class "long") arriving at evenly spaced times inside the shorts' span (long i of
// L at (i + 1) / (L + 1) of it), e.g. long documents landing among chat traffic. Requests come
// back ordered by arrival, with their start offsets.
struct TimedWorkload {
  std::vector<RequestSpec> requests;
  std::vector<double> arrivals;  // seconds from the run's start, ascending
};
TimedWorkload MixedWorkload(std::vector<RequestSpec> shorts, std::vector<RequestSpec> longs,
                            double rate, uint64_t seed);

// ---- Modes ----

// What one measured run asks of the server: the value of the request's "uniprefill" field.
struct BenchMode {
  std::string name;      // as given: "dense", "uniprefill", "uniprefill:keep_ratio=0.5,..."
  nlohmann::json field;  // false, true, or {"enabled": true, key: value, ...}
  bool dense() const { return field.is_boolean() && !field.get<bool>(); }
};

// A comma-separated list of modes: "dense", "uniprefill", or "uniprefill:key=value" where
// following items containing '=' but no ':' add keys to the same mode, e.g.
// "dense,uniprefill:mode=fixed-ratio,keep_ratio=0.5". Values are JSON (numbers, true/false) or
// else strings. InvalidArgument for unknown names, empty lists and repeated modes.
Result<std::vector<BenchMode>> ParseModes(const std::string& spec);

// The /v1/completions body: streaming with usage, ignore_eos (fixed output length), greedy.
nlohmann::json BuildCompletionRequest(const std::string& model, const RequestSpec& spec,
                                      const BenchMode& mode);

// ---- Stream chunks ----

// What the load generator reads from one SSE event of a completion stream.
struct CompletionChunk {
  bool done = false;        // the "[DONE]" sentinel
  bool has_choice = false;  // choices[0] is present
  std::string text;
  std::string finish_reason;  // empty while generating
  bool has_usage = false;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double keep_ratio = -1;  // the "uniprefill" extension's keep_ratio (top level or in usage)
  std::string error;       // an in-stream {"error": ...}: the server failed the request
  bool IsToken() const { return has_choice && (!text.empty() || finish_reason.empty()); }
};

// DataLoss when the data is neither "[DONE]" nor a JSON object.
Result<CompletionChunk> ParseCompletionChunk(const std::string& data);

// ---- Measurement ----

struct RequestRecord {
  int index = 0;  // into the request list
  bool ok = false;
  std::string error;    // why it failed (the server's message for HTTP errors)
  int http_status = 0;  // 0 when no response came
  double start_s = 0;   // since the run began
  double ttft_s = -1;   // < 0 when no token came
  double e2e_s = 0;
  std::vector<double> itl_s;
  std::string cls;            // the request's class (RequestSpec::cls)
  int prompt_tokens = 0;      // from usage (0 when the server sent none)
  int completion_tokens = 0;  // from usage, else the number of token chunks
  int token_chunks = 0;
  double keep_ratio = -1;  // < 0: the server reported none (dense, or no extension)
};

// Sends one streaming request and times it. Never throws; failures are in the record. A request
// still running after timeout_s is abandoned as failed.
// `json_body` is BuildCompletionRequest(...).dump(), made once per request before the run.
RequestRecord SendCompletion(const HttpClient& client, const std::string& json_body,
                             double timeout_s);

// Prometheus text exposition -> value per metric name (labels dropped, label sets summed);
// comments, blank and malformed lines are skipped.
std::map<std::string, double> ParsePrometheusText(const std::string& text);

// The values of metric `name`, one per label set, in the order the text gives them.
std::vector<double> PrometheusValues(const std::string& text, const std::string& name);

// KV-memory gauges seen while a run lasted (bytes), how many mixed prefill+decode steps ran, and
// the GPU's clock and power where the server reports them.
struct KvMetrics {
  bool available = false;  // some scrape of /metrics had uniprefill_kv_bytes_used
  int scrapes = 0;
  double kv_bytes_used_peak = 0;
  double kv_bytes_dense_equivalent_peak = 0;
  double kv_bytes_saved_peak = 0;
  double mixed_steps = 0;  // increase of uniprefill_mixed_steps_total over the run
  // The server's step budget (uniprefill_step_budget_tokens at the last scrape; 0: not reported):
  // on the CPU serve measures it at start, so a served figure needs it beside.
  double step_budget_tokens = 0;
  // And the price it puts on a chunk's attention over its FLOPs (uniprefill_attention_price_
  // slowdown; on the CPU measured at start too; 0: not reported).
  double attention_price_slowdown = 0;
  // serve --device cuda: the GPUs' SM clock and board power (uniprefill_gpu_sm_clock_mhz,
  // uniprefill_gpu_power_watts, a label set per GPU) over the scrapes made while the run lasted
  // (not the one before its first request nor the one after its last): a served figure means
  // little without the clock the power limit left it. With several GPUs (--tensor-parallel) a
  // scrape's clock is their mean, the minimum is over every GPU, the power their sum. gpu_scrapes
  // 0 (and the rest 0): the server reported none.
  int gpu_scrapes = 0;
  int gpus = 0;  // the most GPUs one scrape reported
  double gpu_sm_mhz_mean = 0, gpu_sm_mhz_min = 0, gpu_power_w_mean = 0;
};

struct LoadOptions {
  std::string model;
  int concurrency = 0;  // > 0: this many workers, each sending back to back
  double rate = 0;      // > 0 (and concurrency 0): Poisson arrivals at this many requests/s
  // Not empty (and concurrency 0): request i starts at arrivals[i] seconds (ascending), instead
  // of Poisson arrivals (MixedWorkload).
  std::vector<double> arrivals;
  uint64_t seed = 0;    // of the arrival times
  double timeout_s = 600;
  int max_in_flight = 1024;  // rate mode: requests running at once are capped (threads)
  double metrics_interval_s = 0.2;  // 0: do not poll /metrics
};

struct RunResult {
  std::vector<RequestRecord> records;  // in request order
  double duration_s = 0;               // first send -> last request finished
  KvMetrics metrics;
};

// Runs every request of `requests` once in `mode`. `progress(done, total)` is called after each
// request from one thread at a time (any thread).
RunResult RunLoad(const HttpClient& client, const LoadOptions& options, const BenchMode& mode,
                  const std::vector<RequestSpec>& requests,
                  const std::function<void(int done, int total)>& progress = nullptr);

// ---- Statistics ----

// The p-th percentile (0..100) with linear interpolation between closest ranks: sorted values
// v[0..n-1], rank r = p/100 * (n-1), result v[floor r] + (r - floor r) * (v[ceil r] - v[floor r])
// (NumPy's default). NaN for no values.
double Percentile(std::vector<double> values, double p);

struct LatencyStats {
  int count = 0;
  // NaN when count is 0. max shows a rare stall that p99 hides (one long prefill step among
  // thousands of decode gaps).
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
LatencyStats ComputeLatencyStats(const std::vector<double>& values);

// A service-level objective for goodput: a request is good when it succeeded, its TTFT is at most
// ttft_s and its time per output token (the mean of its inter-token gaps, vLLM's TPOT) at most
// itl_s.
struct Slo {
  double ttft_s = 2.0;
  double itl_s = 0.05;
};

struct ModeSummary {
  int ok = 0, failed = 0;
  int good = 0;          // requests that met the SLO given to SummarizeRun (0 without one)
  double goodput = 0;    // good requests / s
  std::string first_error;  // of the first failed request, in request order
  double duration_s = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // over successful requests
  double request_throughput = 0;                     // successful requests / s
  double output_tokens_per_s = 0, total_tokens_per_s = 0;
  LatencyStats ttft_s, itl_s, e2e_s;  // over successful requests
  double mean_keep_ratio = -1;        // < 0 when no request reported one
};
// Over every request of the run, or only those of class `cls` when it is not empty; with `slo`,
// also how many met it.
ModeSummary SummarizeRun(const RunResult& run, const std::string& cls = "",
                         const Slo* slo = nullptr);

nlohmann::json ToJson(const RequestRecord& r);
nlohmann::json ToJson(const LatencyStats& s);
nlohmann::json ToJson(const ModeSummary& s);
nlohmann::json ToJson(const KvMetrics& m);

}  // namespace uniprefill::loadgen
