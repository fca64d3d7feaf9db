// /metrics text: parsed back line by line, every sample belongs to a HELP'd and TYPE'd family,
// histogram buckets are cumulative and end at +Inf == _count, and the values are the snapshot's.
#include "server/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace uniprefill::server {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses `name{k="v",...} value`; fails the test on anything else.
Sample ParseSample(const std::string& line) {
  Sample s;
  const size_t brace = line.find('{');
  const size_t close = line.rfind('}');
  EXPECT_NE(brace, std::string::npos) << line;
  EXPECT_NE(close, std::string::npos) << line;
  if (brace == std::string::npos || close == std::string::npos) return s;
  s.name = line.substr(0, brace);
  std::string labels = line.substr(brace + 1, close - brace - 1);
  size_t pos = 0;
  while (pos < labels.size()) {
    const size_t eq = labels.find('=', pos);
    EXPECT_NE(eq, std::string::npos) << line;
    EXPECT_EQ(labels[eq + 1], '"') << line;
    std::string value;
    size_t i = eq + 2;
    for (; i < labels.size() && labels[i] != '"'; ++i) {
      if (labels[i] == '\\') ++i;
      value += labels[i];
    }
    s.labels[labels.substr(pos, eq - pos)] = value;
    pos = i + 1;
    if (pos < labels.size()) {
      EXPECT_EQ(labels[pos], ',') << line;
      ++pos;
    }
  }
  const std::string v = line.substr(close + 2);
  s.value = v == "+Inf" ? INFINITY : std::stod(v);
  EXPECT_EQ(line[close + 1], ' ') << line;
  return s;
}

struct Parsed {
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped;
  std::vector<Sample> samples;
};

Parsed Parse(const std::string& text) {
  Parsed p;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    EXPECT_FALSE(line.empty()) << "blank line in exposition";
    if (line.rfind("# HELP ", 0) == 0) {
      std::istringstream l(line.substr(7));
      std::string name;
      l >> name;
      p.helped.insert(name);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream l(line.substr(7));
      std::string name, type;
      l >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_EQ(p.types.count(name), 0u) << "TYPE twice: " << name;
      p.types[name] = type;
    } else {
      EXPECT_NE(line[0], '#') << line;
      p.samples.push_back(ParseSample(line));
    }
  }
  return p;
}

// The family a sample line belongs to (histogram samples carry a suffix).
std::string FamilyOf(const Parsed& p, const std::string& name) {
  if (p.types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = p.types.find(base);
      if (it != p.types.end() && it->second == "histogram") return base;
    }
  }
  return "";
}

ServingMetrics SampleMetrics() {
  ServingMetrics m;
  m.waiting = 2;
  m.running = 3;
  m.requests_finished_stop = 10;
  m.requests_finished_length = 4;
  m.requests_aborted = 1;
  m.requests_failed = 0;
  m.prompt_tokens = 1234;
  m.generation_tokens = 567;
  m.steps = 89;
  m.mixed_steps = 12;
  m.preemptions = 2;
  m.generation_tokens_per_s = 45.5;
  m.kv_blocks_total = 100;
  m.max_batched_tokens = 448;
  m.prefill_only_tokens = 8192;
  m.attention_slowdown = 1.75;
  m.kv_blocks_used = 25;
  m.kv_bytes_used = 1 << 20;
  m.kv_bytes_dense = 3 << 20;
  m.kv_bytes_saved = 2 << 20;
  m.uniprefill_alive_tokens = 1000;
  m.uniprefill_kept_tokens = 400;
  m.uniprefill_prefill_tokens = 500;
  m.uniprefill_prefill_kept_tokens = 100;
  m.ttft_s.bounds = {0.1, 0.5, 1.0};
  m.ttft_s.counts = {3, 0, 2, 1};
  m.ttft_s.count = 6;
  m.ttft_s.sum = 4.2;
  m.inter_token_s.bounds = {0.01, 0.1};
  m.inter_token_s.counts = {0, 0, 0};
  m.e2e_s.bounds = {1, 10};
  m.e2e_s.counts = {1, 1, 0};
  m.e2e_s.count = 2;
  m.e2e_s.sum = 3;
  return m;
}

double Value(const Parsed& p, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  for (const Sample& s : p.samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match &= s.labels.count(k) && s.labels.at(k) == v;
    if (match) return s.value;
  }
  ADD_FAILURE() << "no sample " << name;
  return -1;
}

TEST(PrometheusFormatTest, EverySampleIsTypedAndHelped) {
  const std::string text = FormatPrometheus(SampleMetrics(), "gemma \"3\"", {{200, 5}, {400, 2}});
  Parsed p = Parse(text);
  ASSERT_FALSE(p.samples.empty());
  for (const Sample& s : p.samples) {
    const std::string family = FamilyOf(p, s.name);
    EXPECT_FALSE(family.empty()) << "untyped sample " << s.name;
    EXPECT_TRUE(p.helped.count(family)) << family;
    EXPECT_EQ(s.labels.at("model_name"), "gemma \"3\"");  // escaped and read back
  }
  for (const char* name :
       {"uniprefill_time_to_first_token_seconds", "uniprefill_inter_token_latency_seconds",
        "uniprefill_e2e_request_latency_seconds"}) {
    EXPECT_EQ(p.types[name], "histogram") << name;
  }
  for (const char* name : {"uniprefill_requests_waiting", "uniprefill_requests_running",
                           "uniprefill_generation_tokens_per_second", "uniprefill_kv_blocks_total",
                           "uniprefill_kv_blocks_used", "uniprefill_kv_bytes_used",
                           "uniprefill_kv_bytes_dense_equivalent", "uniprefill_kv_bytes_saved",
                           "uniprefill_keep_ratio", "uniprefill_step_budget_tokens",
                           "uniprefill_prefill_only_step_budget_tokens",
                           "uniprefill_attention_price_slowdown"}) {
    EXPECT_EQ(p.types[name], "gauge") << name;
  }
  for (const char* name :
       {"uniprefill_requests_total", "uniprefill_prompt_tokens_total",
        "uniprefill_generation_tokens_total", "uniprefill_steps_total",
        "uniprefill_mixed_steps_total", "uniprefill_preemptions_total",
        "uniprefill_http_requests_total", "uniprefill_uniprefill_kept_tokens_total",
        "uniprefill_uniprefill_alive_tokens_total"}) {
    EXPECT_EQ(p.types[name], "counter") << name;
  }
}

TEST(PrometheusFormatTest, GpuClockAndPowerAreGaugesLabelledByTheirGpu) {
  const Parsed p = Parse(FormatPrometheus(
      SampleMetrics(), "m", {}, {{"0000:65:00.0", 1455, 699.5}, {"0000:66:\"x", 1980, 90}}));
  EXPECT_EQ(p.types.at("uniprefill_gpu_sm_clock_mhz"), "gauge");
  EXPECT_EQ(p.types.at("uniprefill_gpu_power_watts"), "gauge");
  std::map<std::string, double> clock, power;
  for (const Sample& s : p.samples) {
    if (s.name == "uniprefill_gpu_sm_clock_mhz") clock[s.labels.at("gpu")] = s.value;
    if (s.name == "uniprefill_gpu_power_watts") power[s.labels.at("gpu")] = s.value;
  }
  EXPECT_EQ(clock, (std::map<std::string, double>{{"0000:65:00.0", 1455}, {"0000:66:\"x", 1980}}));
  EXPECT_EQ(power, (std::map<std::string, double>{{"0000:65:00.0", 699.5}, {"0000:66:\"x", 90}}));
}

TEST(PrometheusFormatTest, WithoutAGpuItsFamiliesAreLeftOut) {
  const std::string text = FormatPrometheus(SampleMetrics(), "m");
  EXPECT_EQ(text.find("uniprefill_gpu_"), std::string::npos) << text;
}

TEST(PrometheusFormatTest, HistogramBucketsAreCumulative) {
  Parsed p = Parse(FormatPrometheus(SampleMetrics(), "m"));
  for (const char* h :
       {"uniprefill_time_to_first_token_seconds", "uniprefill_inter_token_latency_seconds",
        "uniprefill_e2e_request_latency_seconds"}) {
    SCOPED_TRACE(h);
    double last = -1, last_le = -INFINITY;
    bool saw_inf = false;
    for (const Sample& s : p.samples) {
      if (s.name != std::string(h) + "_bucket") continue;
      const std::string le = s.labels.at("le");
      const double le_v = le == "+Inf" ? INFINITY : std::stod(le);
      EXPECT_GT(le_v, last_le);
      EXPECT_GE(s.value, last);
      last = s.value;
      last_le = le_v;
      saw_inf |= le == "+Inf";
    }
    EXPECT_TRUE(saw_inf);
    EXPECT_EQ(last, Value(p, std::string(h) + "_count"));
  }
  EXPECT_EQ(Value(p, "uniprefill_time_to_first_token_seconds_bucket", {{"le", "0.1"}}), 3);
  EXPECT_EQ(Value(p, "uniprefill_time_to_first_token_seconds_bucket", {{"le", "1"}}), 5);
  EXPECT_EQ(Value(p, "uniprefill_time_to_first_token_seconds_bucket", {{"le", "+Inf"}}), 6);
  EXPECT_DOUBLE_EQ(Value(p, "uniprefill_time_to_first_token_seconds_sum"), 4.2);
}

TEST(PrometheusFormatTest, ValuesAreTheSnapshots) {
  Parsed p = Parse(FormatPrometheus(SampleMetrics(), "m", {{200, 5}, {413, 1}}));
  EXPECT_EQ(Value(p, "uniprefill_requests_waiting"), 2);
  EXPECT_EQ(Value(p, "uniprefill_requests_running"), 3);
  EXPECT_EQ(Value(p, "uniprefill_requests_total", {{"finish_reason", "stop"}}), 10);
  EXPECT_EQ(Value(p, "uniprefill_requests_total", {{"finish_reason", "length"}}), 4);
  EXPECT_EQ(Value(p, "uniprefill_requests_total", {{"finish_reason", "abort"}}), 1);
  EXPECT_EQ(Value(p, "uniprefill_requests_total", {{"finish_reason", "error"}}), 0);
  EXPECT_EQ(Value(p, "uniprefill_prompt_tokens_total"), 1234);
  EXPECT_EQ(Value(p, "uniprefill_generation_tokens_total"), 567);
  EXPECT_EQ(Value(p, "uniprefill_steps_total"), 89);
  EXPECT_EQ(Value(p, "uniprefill_mixed_steps_total"), 12);
  EXPECT_EQ(Value(p, "uniprefill_preemptions_total"), 2);
  EXPECT_DOUBLE_EQ(Value(p, "uniprefill_generation_tokens_per_second"), 45.5);
  EXPECT_EQ(Value(p, "uniprefill_kv_blocks_total"), 100);
  EXPECT_EQ(Value(p, "uniprefill_step_budget_tokens"), 448);
  EXPECT_EQ(Value(p, "uniprefill_prefill_only_step_budget_tokens"), 8192);
  EXPECT_DOUBLE_EQ(Value(p, "uniprefill_attention_price_slowdown"), 1.75);
  EXPECT_EQ(Value(p, "uniprefill_kv_blocks_used"), 25);
  EXPECT_EQ(Value(p, "uniprefill_kv_bytes_used"), 1 << 20);
  EXPECT_EQ(Value(p, "uniprefill_kv_bytes_dense_equivalent"), 3 << 20);
  EXPECT_EQ(Value(p, "uniprefill_kv_bytes_saved"), 2 << 20);
  // KeepRatio aggregated (last drop's kept / first drop's alive over the prefills), not the
  // per-drop-layer sums' ratio (400 / 1000).
  EXPECT_DOUBLE_EQ(Value(p, "uniprefill_keep_ratio"), 0.2);
  EXPECT_EQ(Value(p, "uniprefill_uniprefill_kept_tokens_total"), 400);
  EXPECT_EQ(Value(p, "uniprefill_uniprefill_alive_tokens_total"), 1000);
  EXPECT_EQ(Value(p, "uniprefill_uniprefill_prefill_tokens_total"), 500);
  EXPECT_EQ(Value(p, "uniprefill_uniprefill_prefill_kept_tokens_total"), 100);
  EXPECT_EQ(Value(p, "uniprefill_http_requests_total", {{"status", "200"}}), 5);
  EXPECT_EQ(Value(p, "uniprefill_http_requests_total", {{"status", "413"}}), 1);
}

TEST(PrometheusFormatTest, EmptyEngineIsValid) {
  Parsed p = Parse(FormatPrometheus(ServingMetrics{}, "m"));
  EXPECT_DOUBLE_EQ(Value(p, "uniprefill_keep_ratio"), 1.0);  // nothing dropped yet
  EXPECT_EQ(Value(p, "uniprefill_time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(Value(p, "uniprefill_time_to_first_token_seconds_bucket", {{"le", "+Inf"}}), 0);
}

}  // namespace
}  // namespace uniprefill::server
