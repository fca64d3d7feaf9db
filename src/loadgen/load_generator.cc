#include "loadgen/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

namespace uniprefill::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is the useful part.
std::string JsonErrorText(const std::exception& e) {
  std::string what = e.what();
  const size_t close = what.find("] ");
  return what.rfind("[json.exception", 0) == 0 && close != std::string::npos
             ? what.substr(close + 2)
             : what;
}

// An array of integer token ids (non-empty), or an error naming `key`.
Result<std::vector<int32_t>> TokenIds(const nlohmann::json& v, const std::string& key) {
  if (!v.is_array() || v.empty()) {
    return InvalidArgument("\"" + key + "\" must be a non-empty array of token ids");
  }
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const nlohmann::json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
        x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("\"" + key + "\" holds " + x.dump() +
                             ", which is not a token id (a non-negative integer)");
    }
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

Result<RequestSpec> ParseDatasetLine(const nlohmann::json& j, int default_max_tokens) {
  if (!j.is_object()) return InvalidArgument("expected a JSON object, got " + std::string(j.type_name()));
  const bool has_prompt = j.contains("prompt"), has_ids = j.contains("prompt_token_ids");
  if (has_prompt == has_ids) {
    return InvalidArgument(has_prompt ? "give either \"prompt\" or \"prompt_token_ids\", not both"
                                      : "missing \"prompt\" (text or token ids) or "
                                        "\"prompt_token_ids\"");
  }
  RequestSpec spec;
  spec.max_tokens = default_max_tokens;
  if (has_ids) {
    UP_ASSIGN_OR_RETURN(spec.prompt_ids, TokenIds(j["prompt_token_ids"], "prompt_token_ids"));
  } else if (j["prompt"].is_string()) {
    spec.prompt_text = j["prompt"].get<std::string>();
    if (spec.prompt_text.empty()) return InvalidArgument("\"prompt\" is empty");
  } else {
    UP_ASSIGN_OR_RETURN(spec.prompt_ids, TokenIds(j["prompt"], "prompt"));
  }
  if (j.contains("max_tokens")) {
    const nlohmann::json& m = j["max_tokens"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 1000000) {
      return InvalidArgument("\"max_tokens\" must be a positive integer, got " + m.dump());
    }
    spec.max_tokens = m.get<int>();
  }
  return spec;
}

// A mode option's value: JSON when it parses (0.5, true, 64), else the text as a string.
nlohmann::json OptionValue(const std::string& text) {
  nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() || v.is_object() || v.is_array() ? nlohmann::json(text) : v;
}

double NumberOr(const nlohmann::json& obj, const char* key, double fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : fallback;
}

// Polls /metrics on its own thread from construction to Stop(): gauge peaks and the increase of
// the mixed-step counter (the first scrape, before the run starts, is its baseline).
class MetricsPoller {
 public:
  MetricsPoller(const HttpClient& client, double interval_s)
      : client_(client.url(), ShortTimeouts(client.options(), interval_s)), interval_s_(interval_s) {
    if (interval_s_ <= 0) return;
    Scrape(/*during_run=*/false);
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [this] { return stop_; });
        if (stop_) break;
        lock.unlock();
        Scrape(/*during_run=*/true);
        lock.lock();
      }
    });
  }
  ~MetricsPoller() { Stop(); }

  KvMetrics Stop() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      thread_.join();
      Scrape(/*during_run=*/false);  // the final state, after the last request
    }
    std::lock_guard<std::mutex> lock(mu_);
    KvMetrics m = metrics_;
    if (first_mixed_ >= 0 && last_mixed_ >= 0) m.mixed_steps = last_mixed_ - first_mixed_;
    if (m.gpu_scrapes > 0) {
      m.gpu_sm_mhz_mean = gpu_sm_mhz_sum_ / m.gpu_scrapes;
      m.gpu_power_w_mean = gpu_power_w_sum_ / m.gpu_scrapes;
    }
    return m;
  }

 private:
  static HttpClientOptions ShortTimeouts(HttpClientOptions o, double interval_s) {
    o.connect_timeout_s = std::min(o.connect_timeout_s, 5.0);
    o.read_timeout_s = std::min(o.read_timeout_s, std::max(5.0, 10 * interval_s));
    return o;
  }

  // `during_run`: made while requests run (the GPU's clock and power count only then).
  void Scrape(bool during_run) {
    Result<HttpResponse> res = client_.Get("/metrics");
    if (!res.ok() || res->status != 200) return;
    const std::map<std::string, double> values = ParsePrometheusText(res->body);
    auto get = [&](const char* name) {
      const auto it = values.find(name);
      return it == values.end() ? -1.0 : it->second;
    };
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.scrapes;
    const double used = get("uniprefill_kv_bytes_used");
    if (used >= 0) {
      metrics_.available = true;
      metrics_.kv_bytes_used_peak = std::max(metrics_.kv_bytes_used_peak, used);
    }
    metrics_.kv_bytes_dense_equivalent_peak = std::max(
        metrics_.kv_bytes_dense_equivalent_peak, get("uniprefill_kv_bytes_dense_equivalent"));
    metrics_.kv_bytes_saved_peak =
        std::max(metrics_.kv_bytes_saved_peak, get("uniprefill_kv_bytes_saved"));
    if (const double budget = get("uniprefill_step_budget_tokens"); budget > 0) {
      metrics_.step_budget_tokens = budget;
    }
    if (const double price = get("uniprefill_attention_price_slowdown"); price > 0) {
      metrics_.attention_price_slowdown = price;
    }
    const double mixed = get("uniprefill_mixed_steps_total");
    if (mixed >= 0) {
      if (first_mixed_ < 0) first_mixed_ = mixed;
      last_mixed_ = mixed;
    }
    const std::vector<double> mhz = PrometheusValues(res->body, "uniprefill_gpu_sm_clock_mhz");
    const std::vector<double> watts = PrometheusValues(res->body, "uniprefill_gpu_power_watts");
    if (during_run && !mhz.empty() && mhz.size() == watts.size()) {
      const double slowest = *std::min_element(mhz.begin(), mhz.end());
      metrics_.gpu_sm_mhz_min =
          metrics_.gpu_scrapes == 0 ? slowest : std::min(metrics_.gpu_sm_mhz_min, slowest);
      metrics_.gpus = std::max(metrics_.gpus, static_cast<int>(mhz.size()));
      ++metrics_.gpu_scrapes;
      gpu_sm_mhz_sum_ += std::accumulate(mhz.begin(), mhz.end(), 0.0) / mhz.size();
      gpu_power_w_sum_ += std::accumulate(watts.begin(), watts.end(), 0.0);
    }
  }

  HttpClient client_;
  double interval_s_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  KvMetrics metrics_;
  double first_mixed_ = -1, last_mixed_ = -1;
  double gpu_sm_mhz_sum_ = 0, gpu_power_w_sum_ = 0;  // over metrics_.gpu_scrapes
};

}  // namespace

Result<std::vector<RequestSpec>> ParseDatasetJsonl(std::istream& in, const std::string& source,
                                                   int default_max_tokens) {
  std::vector<RequestSpec> specs;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (Trim(line).empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument(where + "not valid JSON (" + JsonErrorText(e) + ")");
    }
    Result<RequestSpec> spec = ParseDatasetLine(j, default_max_tokens);
    if (!spec.ok()) return InvalidArgument(where + spec.status().message());
    specs.push_back(std::move(spec).value());
  }
  if (in.bad()) return DataLoss("error reading " + source);
  if (specs.empty()) return InvalidArgument(source + " holds no requests (no non-blank lines)");
  return specs;
}

Result<std::vector<RequestSpec>> LoadDatasetJsonl(const std::string& path, int default_max_tokens) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read '" + path + "' (does the file exist?)");
  return ParseDatasetJsonl(in, path, default_max_tokens);
}

std::vector<RequestSpec> RandomTokenRequests(int count, int prompt_tokens, int output_tokens,
                                             int32_t lo, int32_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<RequestSpec> specs(std::max(count, 0));
  for (RequestSpec& s : specs) {
    s.prompt_ids.resize(std::max(prompt_tokens, 0));
    for (int32_t& id : s.prompt_ids) id = dist(rng);
    s.max_tokens = output_tokens;
  }
  return specs;
}

TimedWorkload MixedWorkload(std::vector<RequestSpec> shorts, std::vector<RequestSpec> longs,
                            double rate, uint64_t seed) {
  const std::vector<double> short_at =
      PoissonArrivals(static_cast<int>(shorts.size()), rate, seed);
  const double span = short_at.empty() ? 0.0 : short_at.back();
  std::vector<std::pair<double, RequestSpec>> all;
  for (size_t i = 0; i < shorts.size(); ++i) {
    shorts[i].cls = "short";
    all.emplace_back(short_at[i], std::move(shorts[i]));
  }
  for (size_t i = 0; i < longs.size(); ++i) {
    longs[i].cls = "long";
    all.emplace_back(span * static_cast<double>(i + 1) / static_cast<double>(longs.size() + 1),
                     std::move(longs[i]));
  }
  // Stable: at equal times the shorts (added first) go first.
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  TimedWorkload w;
  for (auto& [at, spec] : all) {
    w.arrivals.push_back(at);
    w.requests.push_back(std::move(spec));
  }
  return w;
}

std::vector<double> PoissonArrivals(int n, double rate, uint64_t seed) {
  // A stream of its own (not the prompts' seed stream), so --rate does not change the prompts.
  std::mt19937_64 rng(seed ^ 0x9E3779B97F4A7C15ull);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> t(std::max(n, 0));
  for (int i = 1; i < n; ++i) t[i] = t[i - 1] + gap(rng);
  return t;
}

Result<std::vector<BenchMode>> ParseModes(const std::string& spec) {
  std::vector<std::string> items;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) items.push_back(Trim(item));
  std::vector<BenchMode> modes;
  for (const std::string& item : items) {
    if (item.empty()) continue;
    const bool option_only = item.find('=') != std::string::npos && item.find(':') == std::string::npos;
    std::string options;
    if (option_only) {
      if (modes.empty() || !modes.back().field.is_object()) {
        return InvalidArgument("--modes '" + spec + "': option '" + item +
                               "' must follow a mode with options, as in "
                               "'uniprefill:mode=fixed-ratio,keep_ratio=0.5'");
      }
      modes.back().name += "," + item;
      options = item;
    } else {
      const size_t colon = item.find(':');
      const std::string name = Trim(item.substr(0, colon));
      BenchMode m;
      m.name = item;
      if (name == "dense") {
        if (colon != std::string::npos) {
          return InvalidArgument("--modes '" + spec + "': dense takes no options");
        }
        m.field = false;
      } else if (name == "uniprefill") {
        m.field = colon == std::string::npos ? nlohmann::json(true)
                                             : nlohmann::json{{"enabled", true}};
        if (colon != std::string::npos) options = item.substr(colon + 1);
      } else {
        return InvalidArgument("--modes '" + spec + "': unknown mode '" + name +
                               "' (use dense, uniprefill or uniprefill:key=value,...)");
      }
      modes.push_back(std::move(m));
      if (colon != std::string::npos && Trim(options).empty()) {
        return InvalidArgument("--modes '" + spec + "': '" + item + "' has no key=value after ':'");
      }
    }
    if (!options.empty()) {
      const size_t eq = options.find('=');
      const std::string key = Trim(options.substr(0, eq));
      if (eq == std::string::npos || key.empty() || Trim(options.substr(eq + 1)).empty()) {
        return InvalidArgument("--modes '" + spec + "': '" + options + "' is not key=value");
      }
      modes.back().field[key] = OptionValue(Trim(options.substr(eq + 1)));
    }
  }
  if (modes.empty()) return InvalidArgument("--modes '" + spec + "' names no mode");
  for (size_t i = 0; i < modes.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (modes[i].name == modes[k].name) {
        return InvalidArgument("--modes '" + spec + "' repeats '" + modes[i].name + "'");
      }
    }
  }
  return modes;
}

nlohmann::json BuildCompletionRequest(const std::string& model, const RequestSpec& spec,
                                      const BenchMode& mode) {
  nlohmann::json body = {{"model", model},
                         {"max_tokens", spec.max_tokens},
                         {"temperature", 0},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"ignore_eos", true},  // every request generates exactly max_tokens
                         {"uniprefill", mode.field}};
  if (spec.prompt_ids.empty()) {
    body["prompt"] = spec.prompt_text;
  } else {
    body["prompt"] = spec.prompt_ids;
  }
  return body;
}

Result<CompletionChunk> ParseCompletionChunk(const std::string& data) {
  CompletionChunk c;
  const std::string trimmed = Trim(data);
  if (trimmed == "[DONE]") {
    c.done = true;
    return c;
  }
  const nlohmann::json j = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return DataLoss("the server sent an event that is not a JSON object: '" +
                    trimmed.substr(0, 200) + "'");
  }
  if (j.contains("error") && !j["error"].is_null()) {
    c.error = ErrorMessageFromBody(trimmed);
    return c;
  }
  const auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty() && (*choices)[0].is_object()) {
    const nlohmann::json& ch = (*choices)[0];
    c.has_choice = true;
    if (ch.contains("text") && ch["text"].is_string()) c.text = ch["text"].get<std::string>();
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
      c.finish_reason = ch["finish_reason"].get<std::string>();
    }
  }
  const auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    c.has_usage = true;
    c.prompt_tokens = static_cast<int>(NumberOr(*usage, "prompt_tokens", 0));
    c.completion_tokens = static_cast<int>(NumberOr(*usage, "completion_tokens", 0));
    if (usage->contains("uniprefill")) {
      c.keep_ratio = NumberOr((*usage)["uniprefill"], "keep_ratio", -1);
    }
  }
  if (j.contains("uniprefill")) c.keep_ratio = NumberOr(j["uniprefill"], "keep_ratio", c.keep_ratio);
  return c;
}

RequestRecord SendCompletion(const HttpClient& client, const std::string& json_body,
                             double timeout_s) {
  RequestRecord r;
  const Clock::time_point t0 = Clock::now();
  double last_token_s = 0, done_s = -1;
  std::string stream_error;
  auto on_data = [&](const std::string& data) {
    const double now = SecondsSince(t0);
    if (now > timeout_s) {
      stream_error = "timed out after " + std::to_string(static_cast<int>(timeout_s)) +
                     " s (--timeout-s)";
      return false;
    }
    Result<CompletionChunk> chunk = ParseCompletionChunk(data);
    if (!chunk.ok()) {
      stream_error = chunk.status().message();
      return false;
    }
    if (chunk->done) {
      done_s = now;
      return true;
    }
    if (!chunk->error.empty()) {
      stream_error = "error in the stream: " + chunk->error;
      return false;
    }
    if (chunk->IsToken()) {
      if (r.token_chunks == 0) {
        r.ttft_s = now;
      } else {
        r.itl_s.push_back(now - last_token_s);
      }
      last_token_s = now;
      ++r.token_chunks;
    }
    if (chunk->has_usage) {
      r.prompt_tokens = chunk->prompt_tokens;
      r.completion_tokens = chunk->completion_tokens;
    }
    if (chunk->keep_ratio >= 0) r.keep_ratio = chunk->keep_ratio;
    return true;
  };
  Result<HttpResponse> res = client.PostStream("/v1/completions", json_body, on_data);
  r.e2e_s = done_s >= 0 ? done_s : SecondsSince(t0);
  if (!stream_error.empty()) {
    r.error = stream_error;
  } else if (!res.ok()) {
    r.error = res.status().message();
  } else if (r.http_status = res->status; r.http_status < 200 || r.http_status >= 300) {
    r.error = "HTTP " + std::to_string(r.http_status) + ": " + ErrorMessageFromBody(res->body);
  } else if (r.token_chunks == 0) {
    r.error = "the stream ended without any token";
  } else if (done_s < 0) {
    r.error = "the stream ended without 'data: [DONE]' after " +
              std::to_string(r.token_chunks) + " token chunks";
  } else {
    r.ok = true;
    if (r.completion_tokens == 0) r.completion_tokens = r.token_chunks;  // no usage chunk
  }
  return r;
}

namespace {

// Each sample line of a Prometheus text exposition as (metric name, value), labels dropped;
// comments, blank and malformed lines are skipped.
template <typename Visit>
void ForEachPrometheusSample(const std::string& text, Visit visit) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string::npos) continue;
    const std::string name = line.substr(0, name_end);
    size_t value_begin = name_end;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);  // label values with '}' are not expected
      if (close == std::string::npos) continue;
      value_begin = close + 1;
    }
    std::istringstream rest(line.substr(value_begin));
    std::string value_text;
    if (!(rest >> value_text)) continue;
    char* end = nullptr;
    const double v = std::strtod(value_text.c_str(), &end);
    if (end == value_text.c_str() || *end != '\0') continue;
    visit(name, v);
  }
}

}  // namespace

std::map<std::string, double> ParsePrometheusText(const std::string& text) {
  std::map<std::string, double> out;
  ForEachPrometheusSample(text, [&](const std::string& name, double v) { out[name] += v; });
  return out;
}

std::vector<double> PrometheusValues(const std::string& text, const std::string& name) {
  std::vector<double> out;
  ForEachPrometheusSample(text, [&](const std::string& sample, double v) {
    if (sample == name) out.push_back(v);
  });
  return out;
}

RunResult RunLoad(const HttpClient& client, const LoadOptions& options, const BenchMode& mode,
                  const std::vector<RequestSpec>& requests,
                  const std::function<void(int done, int total)>& progress) {
  const int n = static_cast<int>(requests.size());
  std::vector<std::string> bodies;
  bodies.reserve(n);
  for (const RequestSpec& s : requests) {
    bodies.push_back(BuildCompletionRequest(options.model, s, mode)
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  RunResult out;
  out.records.resize(n);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, in_flight = 0;
  std::vector<int> finished;  // rate mode: threads to join

  MetricsPoller poller(client, options.metrics_interval_s);
  const Clock::time_point t0 = Clock::now();
  auto run_one = [&](int i) {
    const double start = SecondsSince(t0);
    RequestRecord rec = SendCompletion(client, bodies[i], options.timeout_s);
    rec.index = i;
    rec.cls = requests[i].cls;
    rec.start_s = start;
    std::lock_guard<std::mutex> lock(mu);
    out.records[i] = std::move(rec);
    ++done;
    if (progress) progress(done, n);
  };

  if (options.concurrency > 0) {
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < std::min(options.concurrency, n); ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < n; i = next++) run_one(i);
      });
    }
    for (std::thread& t : workers) t.join();
  } else {
    const std::vector<double> arrivals = options.arrivals.empty()
                                             ? PoissonArrivals(n, options.rate, options.seed)
                                             : options.arrivals;
    const int cap = std::max(options.max_in_flight, 1);
    std::vector<std::thread> threads(n);
    for (int i = 0; i < n; ++i) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(arrivals[i])));
      std::vector<int> to_join;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return in_flight < cap; });  // late starts when the cap is reached
        ++in_flight;
        to_join.swap(finished);
      }
      for (int k : to_join) threads[k].join();  // reap so finished threads free their stacks
      threads[i] = std::thread([&, i] {
        run_one(i);
        {
          std::lock_guard<std::mutex> lock(mu);
          --in_flight;
          finished.push_back(i);
        }
        cv.notify_all();
      });
    }
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  out.duration_s = SecondsSince(t0);
  out.metrics = poller.Stop();
  return out;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

LatencyStats ComputeLatencyStats(const std::vector<double>& values) {
  LatencyStats s;
  s.count = static_cast<int>(values.size());
  if (values.empty()) {
    s.mean = s.p50 = s.p90 = s.p99 = s.max = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

ModeSummary SummarizeRun(const RunResult& run, const std::string& cls, const Slo* slo) {
  ModeSummary s;
  s.duration_s = run.duration_s;
  std::vector<double> ttft, itl, e2e;
  double keep_sum = 0;
  int keep_n = 0;
  for (const RequestRecord& r : run.records) {
    if (!cls.empty() && r.cls != cls) continue;
    if (!r.ok) {
      if (s.failed++ == 0) s.first_error = r.error;
      continue;
    }
    ++s.ok;
    if (slo) {
      double tpot = 0;
      for (double g : r.itl_s) tpot += g;
      if (!r.itl_s.empty()) tpot /= static_cast<double>(r.itl_s.size());
      if (r.ttft_s >= 0 && r.ttft_s <= slo->ttft_s && tpot <= slo->itl_s) ++s.good;
    }
    s.prompt_tokens += r.prompt_tokens;
    s.completion_tokens += r.completion_tokens;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
    if (r.keep_ratio >= 0) {
      keep_sum += r.keep_ratio;
      ++keep_n;
    }
  }
  if (run.duration_s > 0) {
    s.request_throughput = s.ok / run.duration_s;
    s.goodput = s.good / run.duration_s;
    s.output_tokens_per_s = static_cast<double>(s.completion_tokens) / run.duration_s;
    s.total_tokens_per_s =
        static_cast<double>(s.prompt_tokens + s.completion_tokens) / run.duration_s;
  }
  s.ttft_s = ComputeLatencyStats(ttft);
  s.itl_s = ComputeLatencyStats(itl);
  s.e2e_s = ComputeLatencyStats(e2e);
  if (keep_n > 0) s.mean_keep_ratio = keep_sum / keep_n;
  return s;
}

namespace {
// null for "not measured" (negative sentinels, NaN) so JSON readers do not average them in.
nlohmann::json OrNull(double v) { return v < 0 || std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }
}  // namespace

nlohmann::json ToJson(const RequestRecord& r) {
  nlohmann::json j = {{"index", r.index},
                      {"class", r.cls},
                      {"ok", r.ok},
                      {"http_status", r.http_status},
                      {"start_s", r.start_s},
                      {"ttft_s", OrNull(r.ttft_s)},
                      {"e2e_s", r.e2e_s},
                      {"itl_s", r.itl_s},
                      {"prompt_tokens", r.prompt_tokens},
                      {"completion_tokens", r.completion_tokens},
                      {"token_chunks", r.token_chunks},
                      {"keep_ratio", OrNull(r.keep_ratio)}};
  if (!r.ok) j["error"] = r.error;
  return j;
}

nlohmann::json ToJson(const LatencyStats& s) {
  return {{"count", s.count}, {"mean", OrNull(s.mean)}, {"p50", OrNull(s.p50)},
          {"p90", OrNull(s.p90)}, {"p99", OrNull(s.p99)}, {"max", OrNull(s.max)}};
}

nlohmann::json ToJson(const ModeSummary& s) {
  nlohmann::json j = {{"ok", s.ok},
                      {"failed", s.failed},
                      {"duration_s", s.duration_s},
                      {"prompt_tokens", s.prompt_tokens},
                      {"completion_tokens", s.completion_tokens},
                      {"request_throughput", s.request_throughput},
                      {"output_tokens_per_s", s.output_tokens_per_s},
                      {"total_tokens_per_s", s.total_tokens_per_s},
                      {"ttft_s", ToJson(s.ttft_s)},
                      {"itl_s", ToJson(s.itl_s)},
                      {"e2e_s", ToJson(s.e2e_s)},
                      {"mean_keep_ratio", OrNull(s.mean_keep_ratio)},
                      {"good", s.good},
                      {"goodput", s.goodput}};
  if (s.failed > 0) j["first_error"] = s.first_error;
  return j;
}

nlohmann::json ToJson(const KvMetrics& m) {
  if (!m.available) return {{"available", false}, {"scrapes", m.scrapes}};
  return {{"available", true},
          {"scrapes", m.scrapes},
          {"kv_bytes_used_peak", m.kv_bytes_used_peak},
          {"kv_bytes_dense_equivalent_peak", m.kv_bytes_dense_equivalent_peak},
          {"kv_bytes_saved_peak", m.kv_bytes_saved_peak},
          {"mixed_steps", m.mixed_steps},
          {"step_budget_tokens", m.step_budget_tokens},
          {"attention_price_slowdown", m.attention_price_slowdown},
          {"gpu_scrapes", m.gpu_scrapes},
          {"gpus", m.gpus},
          {"gpu_sm_clock_mhz_mean", m.gpu_sm_mhz_mean},
          {"gpu_sm_clock_mhz_min", m.gpu_sm_mhz_min},
          {"gpu_power_watts_mean", m.gpu_power_w_mean}};
}

}  // namespace uniprefill::loadgen
