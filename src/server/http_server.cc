#include "server/http_server.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "server/front_door.h"
#include "server/log_escape.h"
#include "server/openai_protocol.h"
#include "server/prometheus.h"

namespace uniprefill::server {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr auto kPollInterval = std::chrono::milliseconds(100);

// ---- The client's connection, found so a handler can tell when its client has gone. ----

int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// httplib 0.11 does not hand the socket to handlers, so it is found among the process's
// descriptors by the request's two endpoints (the same getnameinfo text httplib wrote into
// remote_addr). While the handler runs the connection stays open, so the descriptor stays ours.
// -1 when not found (then only failed writes reveal a disconnect).
int FindConnectionSocket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    if (PortOf(local) != req.local_port || PortOf(peer) != req.remote_port) continue;
    char host[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0 ||
        req.remote_addr != host) {
      continue;
    }
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return found;
}

// True once the client has closed its side (FIN or reset). A client sends nothing after its
// request, so a readable end-of-stream means it left.
bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// ---- One request's state, shared by its handler, the engine callback and the stream. ----

struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  bool streaming = false;
  std::deque<RequestUpdate> pending;  // streaming: updates not yet written
  CompletionOutput output;            // every update accumulated (response, log line)
  bool cancelled = false;
  std::string cancel_reason;  // "client disconnected" or "server stopping"
  int fd = -1;                // the client's socket (FindConnectionSocket), -1 if unknown
  Clock::time_point next_check = Clock::now() + kPollInterval;

  // Runs on the engine thread: copies and notifies, never waits on anything but `mu`.
  void Push(const RequestUpdate& u) {
    {
      std::lock_guard<std::mutex> lock(mu);
      output.Append(u);
      if (streaming) pending.push_back(u);
    }
    cv.notify_all();
  }
};

// What the log line of one HTTP request says beyond httplib's request and response.
struct LogInfo {
  Clock::time_point start = Clock::now();
  std::string error;
  std::shared_ptr<RequestState> state;
};

FrontDoorLimits LimitsOf(const ServerConfig& c) {
  FrontDoorLimits l;
  l.max_header_bytes = c.max_header_bytes;
  l.max_header_count = c.max_header_count;
  l.max_request_line = c.max_request_line;
  l.header_timeout_s = c.header_timeout_s;
  l.body_timeout_s = c.body_timeout_s;
  l.keep_alive_timeout_s = c.keep_alive_timeout_s;
  l.max_connections = c.max_connections;
  l.threads = c.threads > 0 ? c.threads : 1;
  return l;
}

// Bytes of prompt text a request carries (chat: every message's content).
size_t PromptBytes(const CompletionRequest& r) {
  if (r.endpoint != Endpoint::kChat) return r.prompt_text ? r.prompt_text->size() : 0;
  size_t n = 0;
  for (const auto& m : r.messages) n += m.content.size();
  return n;
}

}  // namespace

struct OpenAiServer::Impl {
  BatchEngine& engine;
  ServerConfig config;
  FrontDoorServer svr;
  std::thread listener;
  std::atomic<bool> stopping{false};
  std::atomic<bool> listener_done{false};
  // Requests submitted whose response is not yet complete; Stop() lets them end cleanly.
  std::atomic<int> in_flight{0};
  int bound_port = -1;
  int listen_fd = -1;  // the listening socket (set while binding)
  int64_t created = 0;
  std::mutex mu;  // guards the two maps below
  std::map<int, int64_t> http_counts;
  std::map<const httplib::Request*, LogInfo> log_info;

  Impl(BatchEngine& e, ServerConfig c)
      : engine(e),
        config(std::move(c)),
        svr(LimitsOf(config), [this](int status, const std::string& why, const std::string& line) {
          LogRefusal(status, why, line);
        }) {
    if (config.served_model_names.empty()) {
      config.served_model_names.push_back(engine.engine().model_name());
    }
    created = static_cast<int64_t>(std::time(nullptr));
  }

  // ---- Responses and the log. ----

  void SetJson(httplib::Response& res, int status, const json& j) {
    res.status = status;
    res.set_content(DumpJson(j), "application/json");
  }

  void SetError(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
    SetJson(res, e.http_status, ErrorBody(e));
    std::lock_guard<std::mutex> lock(mu);
    auto it = log_info.find(&req);
    if (it != log_info.end()) it->second.error = e.message;
  }

  void NoteState(const httplib::Request& req, std::shared_ptr<RequestState> state) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = log_info.find(&req);
    if (it != log_info.end()) it->second.state = std::move(state);
  }

  // httplib's logger: runs after every response is written, streams included.
  void Log(const httplib::Request& req, const httplib::Response& res) {
    LogInfo info;
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++http_counts[res.status];
      auto it = log_info.find(&req);
      if (it != log_info.end()) {
        info = std::move(it->second);
        log_info.erase(it);
        known = true;
      }
    }
    if (!config.log_requests) return;
    const double secs =
        known ? std::chrono::duration<double>(Clock::now() - info.start).count() : 0.0;
    if (config.json_logs) {
      LogJson(req, res, info, secs);
      return;
    }
    std::string line = EscapeForLog(req.method, 16) + " " + EscapeForLog(req.path, 300) + " " +
                       std::to_string(res.status);
    char buf[160];
    if (info.state) {
      std::lock_guard<std::mutex> lock(info.state->mu);
      const CompletionOutput& o = info.state->output;
      // A stream whose client left is logged before its final update: count what was sent.
      const int completion =
          o.finished ? o.usage.completion_tokens : static_cast<int>(o.tokens.size());
      std::snprintf(buf, sizeof(buf), " prompt=%d completion=%d ttft=%.3fs", o.usage.prompt_tokens,
                    completion, o.usage.ttft_s);
      line += buf;
      if (!o.finish_reason.empty()) line += " finish=" + o.finish_reason;
      if (info.state->cancelled) line += " (" + info.state->cancel_reason + ")";
      if (!o.error.empty()) line += " error: " + EscapeForLog(o.error, 200);
    }
    std::snprintf(buf, sizeof(buf), " %.3fs", secs);
    line += buf;
    if (!info.error.empty()) line += " error: " + EscapeForLog(info.error, 300);
    std::fprintf(stderr, "serve: %s\n", line.c_str());
  }

  // The access log as one JSON object per line (--log-format json): the same fields as the text
  // line, for log shippers. JSON string escaping keeps every client byte inside its field.
  void LogJson(const httplib::Request& req, const httplib::Response& res, const LogInfo& info,
               double secs) {
    json j = {{"time", UtcTimestamp()},
              {"method", req.method.substr(0, 16)},
              {"path", req.path.substr(0, 300)},
              {"status", res.status},
              {"duration_s", secs}};
    if (info.state) {
      std::lock_guard<std::mutex> lock(info.state->mu);
      const CompletionOutput& o = info.state->output;
      j["prompt_tokens"] = o.usage.prompt_tokens;
      j["completion_tokens"] =
          o.finished ? o.usage.completion_tokens : static_cast<int>(o.tokens.size());
      j["ttft_s"] = o.usage.ttft_s;
      if (!o.finish_reason.empty()) j["finish_reason"] = o.finish_reason;
      if (info.state->cancelled) j["cancelled"] = info.state->cancel_reason;
      if (!o.error.empty()) j["error"] = o.error.substr(0, 300);
    }
    if (!info.error.empty()) j["error"] = info.error.substr(0, 300);
    // Invalid UTF-8 from a client is replaced, never an exception in the logger.
    std::fprintf(stderr, "%s\n", j.dump(-1, ' ', true, json::error_handler_t::replace).c_str());
  }

  static std::string UtcTimestamp() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
  }

  // A connection the front door refused before httplib saw a request (408, 414, 431, 400, 503).
  void LogRefusal(int status, const std::string& why, const std::string& request_line) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++http_counts[status];
    }
    if (!config.log_requests) return;
    if (config.json_logs) {
      const json j = {{"time", UtcTimestamp()},
                      {"request_line", request_line.substr(0, 200)},
                      {"status", status},
                      {"refused", true},
                      {"error", why.substr(0, 300)}};
      std::fprintf(stderr, "%s\n", j.dump(-1, ' ', true, json::error_handler_t::replace).c_str());
      return;
    }
    const std::string what = request_line.empty() ? "-" : EscapeForLog(request_line, 200);
    std::fprintf(stderr, "serve: %s %d (refused) error: %s\n", what.c_str(), status,
                 EscapeForLog(why, 300).c_str());
  }

  // ---- Routes. ----

  bool KnownModel(const std::string& name) const {
    for (const std::string& n : config.served_model_names) {
      if (n == name) return true;
    }
    return name == engine.engine().model_name();
  }

  void Models(httplib::Response& res) {
    json data = json::array();
    for (const std::string& name : config.served_model_names) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "uniprefill"},
                      {"max_model_len", engine.engine().context_size()}});
    }
    SetJson(res, 200, {{"object", "list"}, {"data", data}});
  }

  void Metrics(httplib::Response& res) {
    std::map<int, int64_t> counts;
    {
      std::lock_guard<std::mutex> lock(mu);
      counts = http_counts;
    }
    std::vector<GpuReading> gpus;
    for (const GpuClockSampler* gpu : config.gpu_clocks) {
      if (Result<ClockSample> c = gpu->Read(); c.ok()) {
        gpus.push_back({gpu->pci_bus_id(), double(c->sm_mhz), c->power_w});
      }
    }
    res.status = 200;
    res.set_content(
        FormatPrometheus(engine.Metrics(), config.served_model_names[0], counts, gpus),
        kPrometheusContentType);
  }

  // Cancels the request once (outside the state's lock: Cancel takes the engine's).
  void CancelOnce(RequestState& state, int64_t id, const char* reason,
                  std::unique_lock<std::mutex>& lock) {
    if (state.cancelled) return;
    state.cancelled = true;
    state.cancel_reason = reason;
    lock.unlock();
    engine.Cancel(id);
    lock.lock();
  }

  // Checks, every kPollInterval at most and with `lock` held, whether the request must end early
  // (the server stops or the client left). Called on every wake-up, tokens arriving or not.
  void CheckGone(RequestState& state, int64_t id, std::unique_lock<std::mutex>& lock) {
    if (state.cancelled || state.output.finished) return;
    const Clock::time_point now = Clock::now();
    if (now < state.next_check && !stopping.load()) return;
    state.next_check = now + kPollInterval;
    if (stopping.load()) {
      CancelOnce(state, id, "server stopping", lock);
    } else if (PeerClosed(state.fd)) {
      CancelOnce(state, id, "client disconnected", lock);
    }
  }

  // The prompt's token ids, or the error to answer with.
  std::optional<ApiError> PromptIds(const CompletionRequest& r, std::vector<int32_t>* ids) {
    Engine& e = engine.engine();
    ApiError err;
    err.http_status = 400;
    if (r.endpoint == Endpoint::kChat) {
      if (!e.has_chat_template()) {
        err.message = "this model has no chat template; use /v1/completions";
        err.param = "messages";
        return err;
      }
    } else if (!r.prompt_text) {
      *ids = r.prompt_ids;
      return std::nullopt;
    }
    if (!e.can_tokenize()) {
      err.message =
          "this model has no tokenizer the engine can read; send the prompt as token "
          "ids to /v1/completions";
      err.param = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
      return err;
    }
    const std::string text =
        r.endpoint == Endpoint::kChat ? e.FormatChat(r.messages) : *r.prompt_text;
    *ids = e.Tokenize(text, /*add_bos=*/true);
    return std::nullopt;
  }

  // Reads the body while it arrives, stopping at max_body_bytes (httplib's own limit reads a
  // chunked body whole first). False with the error set when the body is refused; the body is
  // then left unread, so the connection is closed after the answer.
  bool ReadBody(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader, std::string* body) {
    // A Content-Length over the limit: httplib's reader refuses it before any byte is read (the
    // front door has already checked that the value is a plain number).
    const std::string length = req.get_header_value("Content-Length");
    bool too_large = !length.empty() && std::strtoull(length.c_str(), nullptr, 10) >
                                            static_cast<unsigned long long>(config.max_body_bytes);
    const bool complete = !too_large && reader([&](const char* data, size_t n) {
      if (body->size() + n > config.max_body_bytes) {
        too_large = true;
        return false;
      }
      body->append(data, n);
      return true;
    });
    if (complete && !too_large) return true;
    res.set_header("Connection", "close");
    SetError(req, res,
             too_large ? BodyTooLarge()
                       : ApiError{400,
                                  "the request body ended early or did not arrive within the "
                                  "body timeout (--body-timeout)",
                                  "", "", ""});
    return false;
  }

  void Completion(const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader, Endpoint endpoint) {
    if (!Authorized(req, res) || stopping) {
      if (stopping) SetError(req, res, {503, "the server is shutting down", "", "", ""});
      res.set_header("Connection", "close");  // the body is not read
      return;
    }
    std::string raw;
    if (!ReadBody(req, res, reader, &raw)) return;
    const json body = json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      SetError(req, res, {400, "the request body is not valid JSON", "", "", ""});
      return;
    }
    CompletionRequest r;
    if (auto e = ParseCompletionRequest(body, endpoint, &r)) {
      SetError(req, res, *e);
      return;
    }
    if (!KnownModel(r.model)) {
      std::string names;
      for (const std::string& n : config.served_model_names)
        names += (names.empty() ? "" : ", ") + n;
      SetError(req, res,
               {404, "the model '" + r.model + "' does not exist; this server serves: " + names, "",
                "model", "model_not_found"});
      return;
    }
    if (PromptBytes(r) > config.max_prompt_bytes) {  // tokenizing megabytes takes seconds
      SetError(req, res,
               {400,
                "the prompt is " + std::to_string(PromptBytes(r)) + " bytes, over the limit of " +
                    std::to_string(config.max_prompt_bytes) + " (--max-prompt-bytes)",
                "", r.endpoint == Endpoint::kChat ? "messages" : "prompt", ""});
      return;
    }
    std::vector<int32_t> ids;
    if (auto e = PromptIds(r, &ids)) {
      SetError(req, res, *e);
      return;
    }
    if (endpoint == Endpoint::kChat && !r.max_tokens_given) {
      r.params.max_tokens = ResolveChatMaxTokens(
          engine.engine().context_size(), static_cast<int>(ids.size()), config.default_max_tokens);
    }
    if (!r.seed_given)
      r.params.seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();

    auto state = std::make_shared<RequestState>();
    state->streaming = r.stream;
    state->fd = FindConnectionSocket(req);
    // Counted from before the engine sees the request until its response is complete (Wait
    // below, or the stream's releaser): Stop() waits for it, so a request the engine admits
    // while the server stops still gets its answer.
    ++in_flight;
    auto submitted = engine.Submit(std::move(ids), r.params,
                                   [state](const RequestUpdate& u) { state->Push(u); });
    if (!submitted.ok()) {
      --in_flight;
      SetError(req, res, ApiErrorFromStatus(submitted.status()));
      return;
    }
    const int64_t id = *submitted;
    NoteState(req, state);
    const ResponseContext ctx{ResponseId(endpoint, id), static_cast<int64_t>(std::time(nullptr)),
                              r.model};
    Engine& e = engine.engine();
    TokenTextFn token_text = [&e](int32_t t) {
      return e.Detokenize(std::span<const int32_t>(&t, 1));
    };
    if (r.stream) {
      Stream(res, r, ctx, state, id, std::move(token_text));
    } else {
      Wait(req, res, r, ctx, *state, id, token_text);
      --in_flight;
    }
  }

  void Wait(const httplib::Request& req, httplib::Response& res, const CompletionRequest& r,
            const ResponseContext& ctx, RequestState& state, int64_t id,
            const TokenTextFn& token_text) {
    std::unique_lock<std::mutex> lock(state.mu);
    while (!state.output.finished) {
      state.cv.wait_for(lock, kPollInterval);
      CheckGone(state, id, lock);
    }
    const CompletionOutput& out = state.output;
    if (out.finish_reason == "error") {
      const std::string message = out.error.empty() ? "generation failed" : out.error;
      lock.unlock();
      SetError(req, res, {500, message, "", "", ""});
      return;
    }
    if (out.finish_reason == "abort") {
      // Nobody reads this when the client left; a stopping server says so.
      const bool client_gone = state.cancel_reason == "client disconnected";
      lock.unlock();
      SetError(
          req, res,
          {client_gone ? 499 : 503,
           client_gone ? "the client disconnected" : "the server is shutting down", "", "", ""});
      return;
    }
    const json response = CompletionResponse(ctx, r, out, token_text);
    lock.unlock();
    SetJson(res, 200, response);
  }

  void Stream(httplib::Response& res, const CompletionRequest& r, const ResponseContext& ctx,
              std::shared_ptr<RequestState> state, int64_t id, TokenTextFn token_text) {
    auto encoder = std::make_shared<StreamEncoder>(r, ctx, std::move(token_text));
    auto begun = std::make_shared<bool>(false);
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        // Called repeatedly by httplib until sink.done(): each call writes what is available,
        // waiting for at least one update.
        [this, state, encoder, begun, id](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!*begun) {
            *begun = true;
            out = encoder->Begin();
          }
          std::deque<RequestUpdate> updates;
          {
            std::unique_lock<std::mutex> lock(state->mu);
            CheckGone(*state, id, lock);
            while (out.empty() && state->pending.empty()) {
              state->cv.wait_for(lock, kPollInterval);
              CheckGone(*state, id, lock);
            }
            updates.swap(state->pending);
          }
          bool done = false;
          for (const RequestUpdate& u : updates) {
            out += encoder->Encode(u);
            done |= u.finished;
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            std::unique_lock<std::mutex> lock(state->mu);
            if (!state->output.finished) CancelOnce(*state, id, "client disconnected", lock);
            return false;
          }
          if (done) sink.done();
          return true;
        },
        // Runs when httplib is done with the response, written or not: a request still running
        // here lost its client (or the server is stopping).
        [this, state, id](bool) {
          std::unique_lock<std::mutex> lock(state->mu);
          if (!state->output.finished) CancelOnce(*state, id, "client disconnected", lock);
          --in_flight;
        });
  }

  ApiError BodyTooLarge() const {
    return {413,
            "the request body exceeds the server's limit of " +
                std::to_string(config.max_body_bytes) + " bytes",
            "", "", ""};
  }

  // httplib's own errors (no route, body too large, malformed HTTP) get OpenAI-style JSON too.
  httplib::Server::HandlerResponse OnError(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_)
      return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 413) {
      e = BodyTooLarge();
    } else if (res.status == 404) {
      e.message = "no route " + req.method + " " + req.path +
                  " (routes: GET /health, /metrics, /v1/models; POST /v1/completions, "
                  "/v1/chat/completions)";
    } else if (res.status == 400) {
      e.message = "malformed HTTP request";
    } else {
      e.message = "HTTP error " + std::to_string(res.status);
    }
    SetError(req, res, e);
    return httplib::Server::HandlerResponse::Handled;
  }

  // An exception escaping a handler: a JSON value of an unexpected type is the client's fault
  // (400); anything else is a 500. The client never sees the exception's text (it names library
  // internals); the log line does.
  void OnException(const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    bool client_fault = false;
    try {
      std::rethrow_exception(ep);
    } catch (const json::exception& ex) {
      what = ex.what();
      client_fault = true;
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    res.set_header("Connection", "close");
    SetJson(res, client_fault ? 400 : 500,
            ErrorBody({client_fault ? 400 : 500,
                       client_fault ? "a field of the request has a type or value the server "
                                      "cannot use"
                                    : "internal server error (the server log has the details)",
                       "", "", ""}));
    std::lock_guard<std::mutex> lock(mu);
    auto it = log_info.find(&req);
    if (it != log_info.end()) it->second.error = "exception: " + what;
  }

  httplib::Server::HandlerResponse PreRouting(const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(mu);
      log_info[&req] = LogInfo{};
    }
    // POST bodies are read only after pre-routing: answering a POST here would leave its body
    // in a keep-alive connection, to be parsed as the next request. POST routes check the key
    // themselves (Completion), after httplib has read the body.
    if (req.method == "POST" || Authorized(req, res)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    return httplib::Server::HandlerResponse::Handled;
  }

  // True when no key is configured, the path is not under /v1/, or the request carries the key;
  // otherwise sets the 401 error.
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return true;
    const std::string auth = req.get_header_value("Authorization");
    const std::string expected = "Bearer " + config.api_key;
    // Constant-time comparison: the key must not leak through response timing.
    unsigned char diff = auth.size() != expected.size();
    for (size_t i = 0; i < auth.size() && i < expected.size(); ++i) diff |= auth[i] ^ expected[i];
    if (diff == 0) return true;
    SetError(req, res,
             {401,
              auth.empty() ? "missing API key: send the header 'Authorization: Bearer <key>'"
                           : "invalid API key",
              "", "", auth.empty() ? "missing_api_key" : "invalid_api_key"});
    return false;
  }

  void Routes() {
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return PreRouting(req, res);
    });
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) { return OnError(req, res); }));
    svr.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          OnException(req, res, ep);
        });
    svr.set_logger(
        [this](const httplib::Request& req, const httplib::Response& res) { Log(req, res); });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      SetJson(res, stopping ? 503 : 200, {{"status", stopping ? "stopping" : "ok"}});
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { Models(res); });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { Metrics(res); });
    // Content-reader routes: the handler reads the body itself, so the limit holds while reading.
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) {
      Completion(req, res, reader, Endpoint::kCompletions);
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& reader) {
      Completion(req, res, reader, Endpoint::kChat);
    });
  }
};

OpenAiServer::OpenAiServer(BatchEngine& engine, ServerConfig config)
    : impl_(std::make_unique<Impl>(engine, std::move(config))) {}

OpenAiServer::~OpenAiServer() { Stop(); }

Status OpenAiServer::Start() {
  Impl& s = *impl_;
  if (s.listener.joinable()) return InvalidArgument("the server is already started");
  // A client that leaves mid-write must not kill the process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which lets a second server share a
  // port that is in use instead of failing.
  // The callback also records the listening socket, for the backlog below.
  s.svr.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    s.listen_fd = sock;
  });
  s.svr.set_payload_max_length(s.config.max_body_bytes);
  s.Routes();

  errno = 0;
  const std::string where = s.config.host + ":" + std::to_string(s.config.port);
  int port = -1;
  if (s.config.port == 0) {
    port = s.svr.bind_to_any_port(s.config.host);
  } else if (s.svr.bind_to_port(s.config.host, s.config.port)) {
    port = s.config.port;
  }
  if (port < 0) {
    const std::string reason =
        errno != 0 ? std::strerror(errno) : "the host does not resolve to a local address";
    return Unavailable("cannot listen on " + where + ": " + reason +
                       " (pick another --port or --host)");
  }
  // Debian's httplib listens with a backlog of 5 (compiled in): clients connecting at the same
  // instant overflow it and get reset. Linux lets a second listen() raise the backlog.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);
  s.bound_port = port;
  s.svr.StartFrontDoor();
  s.listener = std::thread([&s] {
    s.svr.listen_after_bind();
    s.listener_done = true;
  });
  // httplib's stop() is a no-op until the accept loop runs, so Stop() must not come earlier.
  while (!s.svr.is_running() && !s.listener_done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return OkStatus();
}

int OpenAiServer::port() const { return impl_->bound_port; }

void OpenAiServer::Stop() {
  Impl& s = *impl_;
  s.stopping = true;  // waiting handlers cancel their requests within kPollInterval
  // Let the cancelled requests answer (streams: their "abort" chunk and [DONE]) before httplib's
  // stop() makes its stream writer quit mid-stream; a stuck client gets a few seconds at most.
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(s.config.shutdown_timeout_s));
  while (s.in_flight > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (s.listener.joinable()) {
    s.svr.stop();
    s.listener.join();
  }
  s.svr.StopFrontDoor();  // closes waiting connections; reads and writes in progress fail
}

}  // namespace uniprefill::server
