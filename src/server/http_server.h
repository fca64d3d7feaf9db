// OpenAiServer: the OpenAI-compatible HTTP front of a BatchEngine (cpp-httplib underneath).
//
// Routes: GET /health, GET /v1/models, GET /metrics (Prometheus), POST /v1/completions and
// POST /v1/chat/completions (JSON or, with "stream": true, server-sent events). Errors are
// OpenAI-style JSON ({"error": {...}}) for every status, httplib's own (404 route, 413 body) too.
//
// Threading: connections wait for a complete request head in one poll thread (front_door.h:
// limits, deadlines, the connection cap); a complete request is served by one of `threads`
// workers with httplib's parser and routing. A handler submits
// its request to the BatchEngine and waits on that request's own queue. The engine's callback only
// appends to the queue and notifies, so the engine thread never waits for a socket. The queue is
// shared (shared_ptr) by the handler, the callback and the streaming provider, so it lives until
// the last of them is done, whichever returns first.
//
// Disconnects: a client that goes away frees its request. While waiting, a handler polls its
// connection's socket for the peer's FIN (found by matching the request's addresses against the
// process's sockets) every 100 ms; a streaming response also notices a failed write. Either way it
// calls BatchEngine::Cancel, which frees the request's KV at the next step.
//
// Lifetime: the BatchEngine must outlive the server. Stop() (also run by the destructor) refuses
// new requests (503), cancels those in flight and lets them answer (a stream ends with its "abort"
// chunk and [DONE]; at most a few seconds), then closes the listener and joins every worker.
// Stop() returns within shutdown_timeout_s plus ~0.2 s, whatever the clients do.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu_clock_sampler.h"
#include "core/status.h"
#include "uniprefill/batch_engine.h"

namespace uniprefill::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (port() tells which)
  // When set, /v1/* needs "Authorization: Bearer <api_key>"; /health and /metrics stay open.
  std::string api_key;
  // The model names requests may give (the first is listed first by /v1/models); the engine's
  // own model_name() is accepted too. Empty: the engine's model_name().
  std::vector<std::string> served_model_names;
  size_t max_body_bytes = size_t{8} << 20;  // larger request bodies: 413
  // max_tokens of a chat request that does not give one: the rest of the context, capped by this.
  int default_max_tokens = 4096;
  int threads = 64;          // HTTP worker threads: each request being served holds one
  bool log_requests = true;  // one line per request on stderr (client text escaped)
  bool json_logs = false;    // that line as a JSON object (--log-format json)
  // A prompt (or the chat messages' text) over this many bytes: 400 before tokenizing.
  size_t max_prompt_bytes = size_t{2} << 20;
  // Connection limits (front_door.h): head size, header count, request line, deadlines, cap.
  size_t max_header_bytes = size_t{32} << 10;
  int max_header_count = 100;
  size_t max_request_line = size_t{8} << 10;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double keep_alive_timeout_s = 5;
  int max_connections = 1024;
  // Stop(): requests in flight get this long to finish (then they are aborted and every
  // connection is closed, whatever the clients do).
  double shutdown_timeout_s = 5;
  // The GPUs whose SM clock and power GET /metrics reads at each scrape (serve --device cuda
  // where NVML answers: GPU 0, or under --tensor-parallel every GPU its ranks drive on this
  // host), one label set each (uniprefill_gpu_sm_clock_mhz{gpu=<PCI bus id>},
  // uniprefill_gpu_power_watts); a read that fails leaves that GPU out of that scrape. Each must
  // outlive the server.
  std::vector<const GpuClockSampler*> gpu_clocks;
};

class OpenAiServer {
 public:
  OpenAiServer(BatchEngine& engine, ServerConfig config);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds and starts serving on a background thread. Error (Unavailable): "cannot listen on
  // host:port: <reason>" (port in use, address not local).
  Status Start();
  // The bound port (the actual one when the config asked for 0); -1 before Start.
  int port() const;
  // Cancels requests in flight, stops listening and joins the workers. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uniprefill::server
