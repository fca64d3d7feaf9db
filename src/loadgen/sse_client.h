// An HTTP client for an OpenAI-compatible server as a load generator needs it: a base URL, plain
// GETs (/v1/models, /metrics) and streaming POSTs whose Server-Sent Events reach a callback as soon
// as their bytes are read, so a caller can timestamp each one. The SSE framing is a separate class
// so that events split across socket reads can be tested without a socket.
//
// Not for: serving, retries, redirects, connection reuse (every call opens its own connection, so
// one HttpClient may be shared by any number of threads).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace uniprefill::loadgen {

// Splits a byte stream into Server-Sent Events and hands over each event's data: the `data:`
// lines of one event joined by '\n' (the leading space after the colon dropped). Lines may end in
// "\n", "\r\n" or "\r", also when the ending is split across two reads; comment lines (":...")
// and other fields (event:, id:, retry:) are ignored; an event without data lines is skipped.
class SseParser {
 public:
  // Returns false as soon as on_data returns false (the caller wants to stop reading).
  using DataCallback = std::function<bool(const std::string& data)>;

  bool Feed(std::string_view bytes, const DataCallback& on_data);
  // End of stream: dispatches an event whose final blank line never came (lenient servers).
  bool Finish(const DataCallback& on_data);

 private:
  bool EndLine(const DataCallback& on_data);

  std::string line_;  // the line being read
  std::string data_;  // data lines of the current event
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to the same ending
};

// A server address from a URL such as "http://127.0.0.1:8000" or "http://host:8000/prefix".
// A trailing "/v1" is dropped (OpenAI clients are often given the /v1 base), so paths passed to
// HttpClient always start with "/v1/...".
struct ServerUrl {
  std::string scheme_host_port;  // "http://127.0.0.1:8000"
  std::string base_path;         // "" or "/prefix" (no trailing slash)
  std::string ToString() const { return scheme_host_port + base_path; }
};

// InvalidArgument naming the URL when it is not http(s)://host[:port][/path].
Result<ServerUrl> ParseServerUrl(const std::string& url);

struct HttpClientOptions {
  std::string api_key;          // sent as "Authorization: Bearer <key>" when not empty
  double connect_timeout_s = 10;
  double read_timeout_s = 600;  // longest silence between two reads
};

struct HttpResponse {
  int status = 0;
  std::string body;  // the whole body; for a successful stream, empty (events went to the callback)
};

class HttpClient {
 public:
  HttpClient(ServerUrl url, HttpClientOptions options);

  // GET base_path + path. A transport failure is an error Status: kNotFound when no connection
  // could be made (refused, unresolvable, connect timeout), kDataLoss for other failures. Any
  // HTTP status (404, 500, ...) is a successful Result carrying that status and body.
  Result<HttpResponse> Get(const std::string& path) const;

  // POST a JSON body asking for an event stream. With a 2xx status, each SSE event's data goes
  // to on_data as it is read; on_data returning false stops reading and the call fails with
  // kOutOfRange ("stopped by the caller"). With any other status the body is collected into the
  // response instead (an error message, typically). Transport errors as for Get.
  Result<HttpResponse> PostStream(const std::string& path, const std::string& json_body,
                                  const SseParser::DataCallback& on_data) const;

  const ServerUrl& url() const { return url_; }
  const HttpClientOptions& options() const { return options_; }

 private:
  ServerUrl url_;
  HttpClientOptions options_;
};

// The human-readable message of an OpenAI-style error body ({"error": {"message": ...}} or
// {"error": "..."} or {"message": ...}); otherwise the body itself, cut to 300 bytes.
std::string ErrorMessageFromBody(const std::string& body);

}  // namespace uniprefill::loadgen
