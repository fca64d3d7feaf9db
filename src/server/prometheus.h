// ServingMetrics as Prometheus text exposition format 0.0.4 (what GET /metrics returns).
//
// Invariants: every sample line belongs to a family announced by a `# HELP` and a `# TYPE` line;
// every sample carries the label model_name="<served model>"; histogram buckets are cumulative
// (non-decreasing, the last one le="+Inf" equal to _count); label values are escaped (\\, \", \n).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "uniprefill/batch_engine.h"

namespace uniprefill::server {

// A GPU's SM clock and board power read at the scrape (core/gpu_clock_sampler.h): under load an
// H100 or H200 holds its power limit by lowering the clock, so throughput falls with no change of
// ours; these gauges show it beside the latencies.
struct GpuReading {
  std::string pci_bus_id;  // the label gpu="..."
  double sm_mhz = 0;
  double power_w = 0;
};

// `http_requests_by_status`: responses sent so far per HTTP status (the server counts them).
// `gpus`: none on the CPU (the two GPU families are left out).
std::string FormatPrometheus(const ServingMetrics& metrics, const std::string& model_name,
                             const std::map<int, int64_t>& http_requests_by_status = {},
                             const std::vector<GpuReading>& gpus = {});

// The content type of the format: "text/plain; version=0.0.4; charset=utf-8".
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace uniprefill::server
