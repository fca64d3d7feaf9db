// `uniprefill bench serve`: a load generator for a running OpenAI-compatible server (normally
// `uniprefill serve`). For each mode (dense, UniPrefill, UniPrefill with options) it sends the same
// streaming /v1/completions requests, at a fixed concurrency or at Poisson arrival times, and
// reports TTFT, inter-token and end-to-end latency percentiles, throughput, keep ratios and the KV
// memory peaks seen on /metrics; a table on stdout, everything (per request too) as JSON with -o.
// A mixed workload (short chat requests at Poisson times with long documents landing among them)
// reports each class apart, with goodput under a TTFT / time-per-token SLO.
// The measuring itself is loadgen/load_generator.h.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace uniprefill::cli {

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;     // empty: the first id /v1/models lists
  int concurrency = -1;  // -1: not given (then --rate must be)
  double rate = -1;      // requests/s; -1: not given
  int num_requests = 0;
  int prompt_tokens = 4096;
  int output_tokens = 64;
  std::string vocab_range = "1000,20000";
  std::string dataset;
  std::string modes = "dense,uniprefill";
  int warmup = 1;
  double timeout_s = 600;
  uint64_t seed = 0;
  std::string json_out;
  // Mixed workload (--long-prompt-tokens > 0, with --rate): the --num-requests short requests
  // arrive at --rate while --long-requests long ones land at evenly spaced times among them;
  // TTFT / ITL / goodput are reported per class too.
  int long_prompt_tokens = 0;
  int long_requests = 1;
  int long_output_tokens = 16;
  double slo_ttft_ms = 2000;  // goodput: TTFT at most this
  double slo_itl_ms = 50;     // and time per output token at most this
};

// Adds the "serve" subcommand to the `bench` group and returns it.
CLI::App* AddBenchServeCommand(CLI::App& bench_group, BenchServeOptions& options);
// 0 when every mode had successful requests; 1 when the server is unreachable or a mode had none;
// 2 for bad flags (as CLI11's own parse errors).
int BenchServeCommand(const BenchServeOptions& options);

}  // namespace uniprefill::cli
