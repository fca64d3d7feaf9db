#include "server/prometheus.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace uniprefill::server {
namespace {

std::string EscapeLabel(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Prometheus floats: the shortest text that reads back exactly (0.1, not 0.10000000000000001),
// and +Inf / -Inf / NaN spelled its way.
std::string Value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

class Writer {
 public:
  explicit Writer(const std::string& model)
      : model_label_("model_name=\"" + EscapeLabel(model) + "\"") {}

  void Family(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // `labels`: extra labels, already formatted ("k=\"v\""), or empty.
  void Sample(const std::string& name, double v, const std::string& labels = "") {
    out_ +=
        name + "{" + model_label_ + (labels.empty() ? "" : "," + labels) + "} " + Value(v) + "\n";
  }
  void Gauge(const std::string& name, const char* help, double v) {
    Family(name, "gauge", help);
    Sample(name, v);
  }
  void Counter(const std::string& name, const char* help, double v) {
    Family(name, "counter", help);
    Sample(name, v);
  }
  void Histo(const std::string& name, const char* help, const Histogram& h) {
    Family(name, "histogram", help);
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += i < h.counts.size() ? h.counts[i] : 0;
      Sample(name + "_bucket", double(cumulative), "le=\"" + Value(h.bounds[i]) + "\"");
    }
    // +Inf holds every observation; `count` is authoritative if the buckets lag it.
    int64_t total = 0;
    for (int64_t c : h.counts) total += c;
    Sample(name + "_bucket", double(total > h.count ? total : h.count), "le=\"+Inf\"");
    Sample(name + "_sum", h.sum);
    Sample(name + "_count", double(total > h.count ? total : h.count));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string model_label_;
  std::string out_;
};

}  // namespace

std::string FormatPrometheus(const ServingMetrics& m, const std::string& model_name,
                             const std::map<int, int64_t>& http,
                             const std::vector<GpuReading>& gpus) {
  Writer w(model_name);
  w.Histo("uniprefill_time_to_first_token_seconds",
          "Submission to first sampled token, per request.", m.ttft_s);
  w.Histo("uniprefill_inter_token_latency_seconds", "Time between consecutive output tokens.",
          m.inter_token_s);
  w.Histo("uniprefill_e2e_request_latency_seconds", "Submission to finish, per request.", m.e2e_s);

  w.Gauge("uniprefill_requests_waiting", "Requests queued (preempted ones included).", m.waiting);
  w.Gauge("uniprefill_requests_running", "Requests holding KV cache.", m.running);
  w.Gauge("uniprefill_generation_tokens_per_second", "Sampled tokens per second over ~10 s.",
          m.generation_tokens_per_s);
  w.Gauge("uniprefill_kv_blocks_total", "KV blocks in the pool.", m.kv_blocks_total);
  w.Gauge("uniprefill_step_budget_tokens",
          "Most tokens of one step (--max-batched-tokens; on the CPU measured at start).",
          m.max_batched_tokens);
  w.Gauge("uniprefill_prefill_only_step_budget_tokens",
          "The budget of a step without decodes (--prefill-only-tokens; 0: off).",
          m.prefill_only_tokens);
  w.Gauge("uniprefill_attention_price_slowdown",
          "The cached keys' price over their FLOPs' at the linear layers' rate, on top of the "
          "backend's own (--attention-slowdown; the CPU's measured at start with the step "
          "budget; 1: none).",
          m.attention_slowdown);
  w.Gauge("uniprefill_kv_blocks_used", "KV blocks in use.", m.kv_blocks_used);
  w.Gauge("uniprefill_kv_bytes_used", "Bytes of KV blocks in use.", double(m.kv_bytes_used));
  w.Gauge("uniprefill_kv_bytes_dense_equivalent",
          "Bytes the running requests' KV would use without UniPrefill.", double(m.kv_bytes_dense));
  w.Gauge("uniprefill_kv_bytes_saved", "KV bytes UniPrefill saves on the running requests.",
          double(m.kv_bytes_saved));
  // KeepRatio (uniprefill/engine.h) over all prefills that selected: the same figure as each
  // response's keep_ratio, aggregated.
  const double keep_ratio = m.uniprefill_prefill_tokens > 0
                                ? double(m.uniprefill_prefill_kept_tokens) /
                                      double(m.uniprefill_prefill_tokens)
                                : 1.0;
  w.Gauge("uniprefill_keep_ratio",
          "Tokens kept by the last UniPrefill drop layer / tokens at the first, over all prefills "
          "that selected (1: none did).",
          keep_ratio);

  if (!gpus.empty()) {
    w.Family("uniprefill_gpu_sm_clock_mhz", "gauge",
             "The GPU's SM clock at the scrape (NVML), in MHz.");
    for (const GpuReading& g : gpus) {
      w.Sample("uniprefill_gpu_sm_clock_mhz", g.sm_mhz,
               "gpu=\"" + EscapeLabel(g.pci_bus_id) + "\"");
    }
    w.Family("uniprefill_gpu_power_watts", "gauge",
             "The GPU's board power at the scrape (NVML), in watts.");
    for (const GpuReading& g : gpus) {
      w.Sample("uniprefill_gpu_power_watts", g.power_w,
               "gpu=\"" + EscapeLabel(g.pci_bus_id) + "\"");
    }
  }

  w.Family("uniprefill_requests_total", "counter", "Finished requests by finish reason.");
  w.Sample("uniprefill_requests_total", double(m.requests_finished_stop), "finish_reason=\"stop\"");
  w.Sample("uniprefill_requests_total", double(m.requests_finished_length),
           "finish_reason=\"length\"");
  w.Sample("uniprefill_requests_total", double(m.requests_aborted), "finish_reason=\"abort\"");
  w.Sample("uniprefill_requests_total", double(m.requests_failed), "finish_reason=\"error\"");
  w.Counter("uniprefill_prompt_tokens_total", "Prefilled tokens (recomputed ones included).",
            double(m.prompt_tokens));
  w.Counter("uniprefill_generation_tokens_total", "Sampled tokens.", double(m.generation_tokens));
  w.Counter("uniprefill_steps_total", "Engine steps (one batched forward each).", double(m.steps));
  w.Counter("uniprefill_mixed_steps_total", "Steps that ran prefills and decodes together.",
            double(m.mixed_steps));
  w.Family("uniprefill_segment_chunks_total", "counter",
           "Prefill chunks that ran one segment's layers (segment-wise), by prefill mode.");
  w.Sample("uniprefill_segment_chunks_total", double(m.segment_chunks - m.dense_segment_chunks),
           "mode=\"uniprefill\"");
  w.Sample("uniprefill_segment_chunks_total", double(m.dense_segment_chunks), "mode=\"dense\"");
  w.Counter("uniprefill_preemptions_total", "Requests preempted to free KV memory.",
            double(m.preemptions));
  w.Family("uniprefill_http_requests_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, count] : http) {
    w.Sample("uniprefill_http_requests_total", double(count),
             "status=\"" + std::to_string(status) + "\"");
  }
  w.Counter("uniprefill_uniprefill_kept_tokens_total",
            "Tokens kept by UniPrefill drop layers, summed over drop layers and prefills.",
            double(m.uniprefill_kept_tokens));
  w.Counter("uniprefill_uniprefill_alive_tokens_total",
            "Tokens alive at UniPrefill drop layers, summed over drop layers and prefills.",
            double(m.uniprefill_alive_tokens));
  w.Counter("uniprefill_uniprefill_prefill_tokens_total",
            "Tokens of prefills that UniPrefill selected from (alive at their first drop layer).",
            double(m.uniprefill_prefill_tokens));
  w.Counter("uniprefill_uniprefill_prefill_kept_tokens_total",
            "Of those, tokens kept by their last drop layer (keep_ratio's numerator).",
            double(m.uniprefill_prefill_kept_tokens));
  return w.Take();
}

}  // namespace uniprefill::server
