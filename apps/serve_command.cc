#include "serve_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "core/memory_check.h"
#include "dist/rank_devices.h"
#include "model_names.h"
#include "run_command.h"
#include "server/http_server.h"
#include "uniprefill/batch_engine.h"
#include "uniprefill/engine.h"

namespace uniprefill::cli {
namespace {

// Set by the SIGINT / SIGTERM handler, polled by ServeCommand. A signal handler can only reach
// static storage, and a lock-free atomic is the one thing it may safely write: hence this single
// global (with what the handler needs under tensor parallelism, set before it is installed).
struct StopSignals {
  std::atomic<int> signal{0};
  bool tensor_parallel = false;
  struct sigaction launcher_term {};  // SIGTERM's handler before serve's: the communicator's
};
StopSignals g_stop;
static_assert(std::atomic<int>::is_always_lock_free);

void OnStopSignal(int sig, siginfo_t* info, void* context) {
  // Under tensor parallelism a SIGTERM from mpirun (this rank's parent) means another rank ended
  // and mpirun is stopping the job (SIGKILL follows within a second): the communicator's peer-loss
  // handler says so in one `error:` line and exits 1. Any other SIGTERM stops serving cleanly.
  if (sig == SIGTERM && g_stop.tensor_parallel && info != nullptr && info->si_pid == getppid()) {
    const struct sigaction& prev = g_stop.launcher_term;
    if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, context);
    } else if ((prev.sa_flags & SA_SIGINFO) == 0 && prev.sa_handler != SIG_DFL &&
               prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);
    }
    _exit(1);
  }
  g_stop.signal = sig;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

void InstallStopSignals(bool tensor_parallel) {
  g_stop.signal = 0;
  g_stop.tensor_parallel = tensor_parallel;
  struct sigaction sa {};
  sa.sa_sigaction = OnStopSignal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, &g_stop.launcher_term);
}

// Ranks other than 0 under --tensor-parallel: run rank 0's steps until it stops serving. Only rank
// 0 decides when serving ends (its shutdown plan ends Follow), so the SIGINT of a Ctrl-C that
// reaches every rank of the job is ignored here; SIGTERM keeps the communicator's handler (mpirun
// sends it when another rank ended).
int FollowRankZero(Engine& engine, const ServingOptions& so) {
  std::signal(SIGINT, SIG_IGN);
  if (Status st = BatchEngine::Follow(engine, so); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string FormatBytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", double(b) / double(int64_t{1} << 30));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", double(b) / double(1 << 20));
  }
  return buf;
}

// The name clients use by default: the model file's stem (gemma-3-270m-q4_k_m), or the
// engine's own name for a path without one.
std::string DefaultServedName(const std::string& model_path, const Engine& engine) {
  std::filesystem::path p(model_path);
  if (p.filename().empty()) p = p.parent_path();  // "folder/" -> "folder"
  const std::string stem = p.stem().string();
  return stem.empty() ? engine.model_name() : stem;
}

// A size flag ("8MiB", "65536") into *bytes.
void AddSizeFlag(CLI::App& cmd, const std::string& name, int64_t* bytes, const std::string& help) {
  cmd.add_option_function<std::string>(
         name,
         [name, bytes](const std::string& v) {
           if (!ParseByteSize(v, bytes)) {
             throw CLI::ValidationError(name, "'" + v + "' is not a size (e.g. 8MiB, 65536)");
           }
         },
         help + " (bytes or K/M/G/KiB/MiB; default " + std::to_string(*bytes) + ")")
      ->group("HTTP limits");
}

// The limits a hostile client meets (docs/serving.md, "The front door").
void AddLimitFlags(CLI::App& cmd, ServeOptions& o) {
  AddSizeFlag(cmd, "--max-body-bytes", &o.max_body_bytes, "Largest request body: 413 beyond");
  AddSizeFlag(cmd, "--max-prompt-bytes", &o.max_prompt_bytes,
              "Largest prompt text (chat: all messages): 400 before tokenizing");
  AddSizeFlag(cmd, "--max-header-bytes", &o.max_header_bytes,
              "Largest request head (request line and headers): 431 beyond");
  AddSizeFlag(cmd, "--max-request-line", &o.max_request_line, "Longest request line: 414");
  auto num = [&cmd](const std::string& name, auto* v, double lo, double hi, const char* help) {
    cmd.add_option(name, *v, help)
        ->check(CLI::Range(lo, hi))
        ->capture_default_str()
        ->group("HTTP limits");
  };
  num("--max-header-count", &o.max_header_count, 1, 10000, "Most header lines: 431 beyond");
  num("--header-timeout", &o.header_timeout_s, 0.1, 3600,
      "Seconds from a request's first byte to the end of its headers: 408 after");
  num("--body-timeout", &o.body_timeout_s, 0.1, 3600,
      "Seconds from the end of the headers to the end of the body: 400 after");
  num("--keep-alive-timeout", &o.keep_alive_timeout_s, 0.1, 3600,
      "Seconds an idle keep-alive connection stays open");
  num("--max-connections", &o.max_connections, 1, 1 << 20,
      "Most open connections (idle ones too): beyond, a new one replaces the longest-idle "
      "keep-alive connection, or gets 503 when none is idle");
  num("--shutdown-timeout", &o.shutdown_timeout_s, 0, 3600,
      "Seconds SIGTERM / SIGINT give requests in flight before they are aborted");
}

// CUDA device `device`'s SM clock and power sampler: CUDA names its PCI bus id, NVML reads it.
Result<std::unique_ptr<GpuClockSampler>> ClockSamplerOfDevice(int device) {
  UP_ASSIGN_OR_RETURN(const std::string bus, CudaPciBusId(device));
  return GpuClockSampler::Create(bus);
}

}  // namespace

bool ParseByteSize(const std::string& text, int64_t* bytes) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return false;
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) return false;
  } catch (...) {
    return false;
  }
  std::string unit;
  for (char c : text.substr(i)) {
    if (c != ' ') unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "GB", "GiB" -> "G", "GI"
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();     // "GI" -> "G"
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K") {
    scale = 1024.0;
  } else if (unit == "M") {
    scale = 1024.0 * 1024;
  } else if (unit == "G") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return false;
  }
  const double b = value * scale;
  if (!std::isfinite(b) || b < 1 || b > 9.0e18) return false;
  *bytes = static_cast<int64_t>(b);
  return true;
}

void AddServeCommand(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("serve",
                         "Serve the model over an OpenAI-compatible HTTP API (/v1/completions, "
                         "/v1/chat/completions) with continuous batching");
  o.model = DefaultModelPath();
  cmd->add_option("-m,--model", o.model,
                  "Model: a GGUF file, a Hugging Face checkpoint folder, or a short name of one in "
                  "models/ (" + KnownModelNames() + ")")
      ->capture_default_str();
  cmd->add_option("--host", o.host,
                  "Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", o.port, "TCP port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (/health and /metrics stay open)");
  cmd->add_option("--served-model-name", o.served_model_names,
                  "Model name(s) clients send as \"model\" (repeatable; default: the model file's "
                  "name without extension)")
      ->allow_extra_args(false);
  cmd->add_option_function<std::string>(
         "--kv-cache-memory",
         [&o](const std::string& v) {
           if (!ParseByteSize(v, &o.kv_cache_memory)) {
             throw CLI::ValidationError("--kv-cache-memory",
                                        "'" + v + "' is not a size (e.g. 4GiB, 512M, 1073741824)");
           }
         },
         "Memory for the paged KV cache: bytes or K/M/G/KiB/MiB/GiB (default 4GiB)")
      ->group("Batching");
  cmd->add_option("--kv-block-tokens", o.kv_block_tokens, "Tokens per KV block")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str()
      ->group("Batching");
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Most requests running at once")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group("Batching");
  cmd->add_option("--max-batched-tokens", o.max_batched_tokens,
                  "Most tokens (prefill + decode) of all requests in one step [default: on the "
                  "CPU, measured at start for --target-step-ms; 2048 with --device cuda]")
      ->check(CLI::Range(1, 1 << 24))
      ->group("Batching");
  cmd->add_option("--target-step-ms", o.target_step_ms,
                  "CPU, without --max-batched-tokens: time a few forwards of the model at start "
                  "and take the step budget whose step lasts about this long, so a long prompt "
                  "stalls the decodes beside it for about this long per step on any machine; "
                  "0: a fixed 8192 tokens")
      ->check(CLI::Range(0, 60000))
      ->capture_default_str()
      ->group("Batching");
  cmd->add_option("--attention-slowdown", o.attention_slowdown,
                  "Price a prefill chunk's attention over its cached keys at this many times its "
                  "FLOPs' time at the linear layers' rate, so steps deep in a long prompt last "
                  "as long as shallow ones; 0: measured at start with the CPU's step budget "
                  "(--target-step-ms), else 1 (by FLOPs)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str()
      ->group("Batching");
  cmd->add_option("--prefill-only-tokens", o.prefill_only_tokens,
                  "The budget of a step with no decodes in it, when larger than "
                  "--max-batched-tokens: a long prompt with nobody decoding beside it is "
                  "prefilled in larger chunks, close to a whole prefill's rate (no one's next "
                  "token waits on those steps); 0: off [default: 0; 8192 with --device cuda]")
      ->check(CLI::Range(0, 1 << 24))
      ->group("Batching");
  cmd->add_flag("--no-chunked-prefill", o.no_chunked_prefill,
                "Run every prefill whole in one step (by default a long prefill is cut into "
                "chunks that share steps with the running decodes; UniPrefill prefills "
                "segment by segment)")
      ->group("Batching");
  cmd->add_flag("--dense-segment-chunks", o.dense_segment_chunks,
                "Run a dense prefill too long for one step segment by segment like a UniPrefill "
                "one (at the drop layers, every token kept): chunks deep into a long prompt run a "
                "few layers on many rows instead of every layer on a few hundred. Off by default: "
                "slower served beside decodes on an H100 (docs/serving.md)")
      ->group("Batching");
  cmd->add_flag("--budget-counts-rows", o.budget_counts_rows,
                "Count only rows against --max-batched-tokens (vLLM's rule). By default a prefill "
                "chunk is also charged for the cached keys it attends (the model's attention "
                "FLOPs per key over its linear FLOPs per row), so chunks deep into a long prompt "
                "are smaller and every step lasts about as long")
      ->group("Batching");
  cmd->add_flag("--host-sampling", o.host_sampling,
                "With --device cuda: copy every request's logits to the host and sample there "
                "(by default a request without penalties or top_logprobs is sampled on the GPU)")
      ->group("Batching");
  cmd->add_option("--max-tokens-default", o.max_tokens_default,
                  "max_tokens of chat requests that give none (capped by the context left)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "Compute threads (0 = every core)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  AddDeviceFlags(*cmd, o.device);
  cmd->add_option("-c,--ctx-size", o.ctx_size, "Context length (0 = the model's)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--http-threads", o.http_threads,
                  "HTTP worker threads (each open connection, streams included, holds one)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_flag("--f32-decode", o.f32_decode,
                "Decode with f32 activations in every matmul (exact, slower)");
  cmd->add_flag("-q,--quiet", o.quiet, "No progress bar and no per-request log lines");
  cmd->add_option("--log-format", o.log_format,
                  "Per-request log lines on stderr: text (one escaped line) or json (one JSON "
                  "object per line: time, method, path, status, tokens, durations, error)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddLimitFlags(*cmd, o);
  AddUniPrefillFlags(*cmd, o.uniprefill);
}

int ServeCommand(const ServeOptions& o) {
  // Before the model loads: a KV cache the host (CPU) or GPU 0 (CUDA, whose KV pool is allocated
  // whole at start-up) cannot hold would die in std::bad_alloc or a failed cudaMalloc later. A GPU
  // that cannot be queried is left to the engine's load, which says why.
  int64_t available = 0;
  std::string where = "this machine";
  if (o.device.device == "cuda") {
    Result<DeviceMemoryInfo> gpu = CudaMemoryInfo(0);
    if (gpu.ok()) available = gpu->free_bytes;
    where = "GPU 0";
  } else {
    available = HostAvailableBytes();
  }
  if (Status fits = CheckKvCacheFits(o.kv_cache_memory, available, where); !fits.ok()) {
    std::fprintf(stderr, "error: %s\n", fits.message().c_str());
    return 1;
  }
  EngineOptions eo;
  eo.model_path = o.model;
  eo.threads = o.threads;
  o.device.ApplyTo(eo);
  eo.context_size = o.ctx_size;
  eo.f32_decode = o.f32_decode;
  if (!IsLoopback(o.host) && o.api_key.empty()) {
    std::fprintf(stderr,
                 "warning: listening on %s without --api-key: anyone who can reach this address "
                 "can use the server\n",
                 o.host.c_str());
  }

  std::unique_ptr<Engine> loaded = LoadEngineWithProgress(eo, o.uniprefill, o.quiet);
  if (!loaded) return 1;
  Engine& engine = *loaded;
  ServingOptions so;
  so.kv_cache_memory = o.kv_cache_memory;
  so.kv_block_tokens = o.kv_block_tokens;
  so.max_num_seqs = o.max_num_seqs;
  // A budget the user did not give is the device's (DefaultStepBudgets).
  const StepBudgets budgets = DefaultStepBudgets(o.device.device);
  so.max_batched_tokens =
      o.max_batched_tokens > 0 ? o.max_batched_tokens : budgets.max_batched_tokens;
  so.prefill_only_tokens =
      o.prefill_only_tokens >= 0 ? o.prefill_only_tokens : budgets.prefill_only_tokens;
  so.device_sampling = !o.host_sampling;
  so.chunked_prefill = !o.no_chunked_prefill;
  so.budget_counts_attention = !o.budget_counts_rows;
  so.dense_segment_chunks = o.dense_segment_chunks;
  if (o.max_batched_tokens == 0 && o.target_step_ms > 0 && o.device.device != "cuda" &&
      so.chunked_prefill && o.device.tensor_parallel <= 1) {
    Result<StepBudgetCalibration> c = BatchEngine::CalibrateStepBudget(
        engine, o.target_step_ms / 1000.0, budgets.max_batched_tokens,
        /*measure_attention=*/o.attention_slowdown == 0);
    if (!c.ok()) {
      std::fprintf(stderr, "error: calibrating the step budget: %s\n",
                   c.status().message().c_str());
      return 1;
    }
    so.max_batched_tokens = c->max_batched_tokens;
    std::fprintf(stderr,
                 "serving: step budget %d tokens, for steps of about %d ms on this machine (a "
                 "%d-token forward took %.0f ms, a %d-token one %.0f ms; predicted %.0f ms; "
                 "--max-batched-tokens or --target-step-ms change it)\n",
                 so.max_batched_tokens, o.target_step_ms, c->small_rows, 1000 * c->small_s,
                 c->large_rows, 1000 * c->large_s, 1000 * c->predicted_step_s);
    if (o.attention_slowdown == 0 && c->deep_prefix > 0) {
      so.attention_slowdown = c->attention_slowdown;
      std::fprintf(stderr,
                   "serving: attention over cached keys priced at %.2fx its FLOPs (two %d-token "
                   "forwards after %d cached tokens took %.0f ms; --attention-slowdown changes "
                   "it)\n",
                   so.attention_slowdown, c->deep_rows, c->deep_prefix, 1000 * c->deep_s);
    }
  }
  if (o.attention_slowdown > 0) so.attention_slowdown = o.attention_slowdown;
  if (engine.tensor_parallel_rank() != 0) return FollowRankZero(engine, so);
  std::fprintf(stderr, "model: %s | %d threads | context %d\n", engine.model_description().c_str(),
               engine.threads(), engine.context_size());
  std::fprintf(stderr, "uniprefill: %s\n", engine.uniprefill_description().c_str());
  auto batch_or = BatchEngine::Start(engine, so);
  if (!batch_or.ok()) {
    std::fprintf(stderr, "error: %s\n", batch_or.status().message().c_str());
    return 1;
  }
  std::unique_ptr<BatchEngine> batch = std::move(*batch_or);
  if (batch->prepare_seconds() > 0.05) {
    std::fprintf(stderr, "serving: attention graphs for the step budget built in %.1f s\n",
                 batch->prepare_seconds());
  }

  server::ServerConfig sc;
  sc.host = o.host;
  sc.port = o.port;
  sc.api_key = o.api_key;
  sc.served_model_names = o.served_model_names;
  if (sc.served_model_names.empty()) {
    sc.served_model_names.push_back(DefaultServedName(o.model, engine));
  }
  sc.default_max_tokens = o.max_tokens_default;
  sc.threads = o.http_threads;
  sc.log_requests = !o.quiet;
  sc.json_logs = o.log_format == "json";
  sc.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  sc.max_prompt_bytes = static_cast<size_t>(o.max_prompt_bytes);
  sc.max_header_bytes = static_cast<size_t>(o.max_header_bytes);
  sc.max_header_count = o.max_header_count;
  sc.max_request_line = static_cast<size_t>(o.max_request_line);
  sc.header_timeout_s = o.header_timeout_s;
  sc.body_timeout_s = o.body_timeout_s;
  sc.keep_alive_timeout_s = o.keep_alive_timeout_s;
  sc.max_connections = o.max_connections;
  sc.shutdown_timeout_s = o.shutdown_timeout_s;
  // The GPUs' SM clock and power on /metrics, where NVML answers (the NVIDIA driver's library).
  std::vector<std::unique_ptr<GpuClockSampler>> gpu_clocks;
  if (o.device.device == "cuda") {
    // GPU 0, the one serve drives; under --tensor-parallel every GPU of a rank on this host
    // (ranks on other hosts are not reported: NVML reads this host's GPUs only).
    for (int device : dist::HostCudaDevices(o.device.tensor_parallel)) {
      Result<std::unique_ptr<GpuClockSampler>> made = ClockSamplerOfDevice(device);
      if (made.ok()) {
        gpu_clocks.push_back(std::move(*made));
        sc.gpu_clocks.push_back(gpu_clocks.back().get());
      } else {
        std::fprintf(stderr, "note: /metrics has no clock and power of GPU %d: %s\n", device,
                     made.status().message().c_str());
      }
    }
  }
  server::OpenAiServer server(*batch, sc);
  if (Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  }

  const ServingMetrics m = batch->Metrics();
  // A device model's pool is bf16 whatever --kv-cache-dtype says (that option is the CPU's).
  const std::string kv_type = o.device.device == "cuda" ? "bf16" : o.device.kv_cache_dtype;
  std::fprintf(stderr,
               "kv cache: %d blocks of %d tokens (%s keys and values), %s (--kv-cache-memory %s); "
               "up to %d requests at once, %d tokens per step (%d with no decodes)\n",
               m.kv_blocks_total, so.kv_block_tokens, kv_type.c_str(),
               FormatBytes(int64_t{m.kv_blocks_total} * m.kv_block_bytes).c_str(),
               FormatBytes(o.kv_cache_memory).c_str(), so.max_num_seqs, so.max_batched_tokens,
               std::max(so.max_batched_tokens, so.prefill_only_tokens));
  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  std::fprintf(stderr,
               "serving %s on http://%s:%d (OpenAI API: /v1/completions, /v1/chat/completions, "
               "/v1/models; /health, /metrics)\n",
               sc.served_model_names[0].c_str(), host.c_str(), server.port());
  std::fflush(stderr);

  InstallStopSignals(o.device.tensor_parallel > 1);
  Status health;
  while (g_stop.signal == 0 && (health = batch->Health()).ok()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!health.ok()) {
    // Tensor parallel: a rank died or hung. Every request already ended with this error; stop
    // taking new ones and let the answers go out.
    std::fprintf(stderr, "error: %s\n", health.message().c_str());
    std::fflush(stderr);
    server.Stop();
    (void)batch->Stop();
    return 1;
  }
  std::fprintf(stderr, "\nshutting down (%s): finishing connections, aborting requests\n",
               g_stop.signal == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();  // cancels what is in flight; the BatchEngine must outlive the server
  if (Status stopped = batch->Stop(); !stopped.ok()) {  // tensor parallel: the ranks' last word
    std::fprintf(stderr, "error: %s\n", stopped.message().c_str());
    return 1;
  }
  batch.reset();
  std::fprintf(stderr, "stopped\n");
  return 0;
}

}  // namespace uniprefill::cli
