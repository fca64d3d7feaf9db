#include "loadgen/sse_client.h"

#include <httplib.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

namespace uniprefill::loadgen {

bool SseParser::Feed(std::string_view bytes, const DataCallback& on_data) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the second half of "\r\n"
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      if (!EndLine(on_data)) return false;
      continue;
    }
    line_.push_back(c);
  }
  return true;
}

bool SseParser::Finish(const DataCallback& on_data) {
  if (!line_.empty() && !EndLine(on_data)) return false;
  return EndLine(on_data);  // an empty line: dispatch whatever data is pending
}

bool SseParser::EndLine(const DataCallback& on_data) {
  if (line_.empty()) {  // a blank line ends the event
    if (!has_data_) return true;
    std::string data;
    data.swap(data_);
    has_data_ = false;
    return on_data(data);
  }
  // Not a comment (":keep-alive"): "field:value" or "field" alone; only data matters here.
  if (line_[0] != ':') {
    const size_t colon = line_.find(':');
    if (line_.compare(0, colon, "data") == 0) {
      size_t value = colon == std::string::npos ? line_.size() : colon + 1;
      if (value < line_.size() && line_[value] == ' ') ++value;
      if (has_data_) data_.push_back('\n');
      data_.append(line_, value, std::string::npos);
      has_data_ = true;
    }
  }
  line_.clear();
  return true;
}

Result<ServerUrl> ParseServerUrl(const std::string& url) {
  const size_t scheme_end = url.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return InvalidArgument("URL '" + url + "' must start with http:// or https://");
  }
  const size_t host_begin = scheme_end + 3;
  const size_t path_begin = url.find('/', host_begin);
  const std::string host_port = url.substr(host_begin, path_begin - host_begin);
  if (host_port.empty() || host_port.find_first_of(" ?#@") != std::string::npos) {
    return InvalidArgument("URL '" + url + "' has no valid host (expected e.g. "
                           "http://127.0.0.1:8000)");
  }
  const size_t colon = host_port.rfind(':');
  if (colon != std::string::npos && host_port.find(']') == std::string::npos) {
    const std::string port = host_port.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 &&
                        port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return InvalidArgument("URL '" + url + "' has an invalid port '" + port + "'");
    }
  }
  ServerUrl out;
  out.scheme_host_port = scheme + "://" + host_port;
  std::string path = path_begin == std::string::npos ? "" : url.substr(path_begin);
  if (path.find_first_of("?#") != std::string::npos) {
    return InvalidArgument("URL '" + url + "' must not have a query or fragment");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  out.base_path = path;
  return out;
}

namespace {

// A fresh httplib client per call: httplib clients are not meant to be shared across threads.
httplib::Client MakeClient(const ServerUrl& url, const HttpClientOptions& o) {
  httplib::Client cli(url.scheme_host_port);
  auto usec = [](double s) { return static_cast<time_t>(std::llround(std::fmod(s, 1.0) * 1e6)); };
  cli.set_connection_timeout(static_cast<time_t>(o.connect_timeout_s), usec(o.connect_timeout_s));
  cli.set_read_timeout(static_cast<time_t>(o.read_timeout_s), usec(o.read_timeout_s));
  cli.set_write_timeout(static_cast<time_t>(o.read_timeout_s), usec(o.read_timeout_s));
  cli.set_keep_alive(false);
  return cli;
}

httplib::Headers MakeHeaders(const HttpClientOptions& o) {
  // identity: a compressed event stream would be buffered by the decoder and blur the timings.
  httplib::Headers h = {{"Accept-Encoding", "identity"}};
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

Status TransportError(const ServerUrl& url, const std::string& path, httplib::Error e) {
  const std::string what = url.ToString() + path;
  switch (e) {
    case httplib::Error::Connection:
    case httplib::Error::ConnectionTimeout:
    case httplib::Error::SSLConnection:
      return NotFound("cannot connect to " + url.ToString() + " (" +
                      (e == httplib::Error::ConnectionTimeout
                           ? "connection timed out"
                           : "connection refused or host unreachable") + ")");
    case httplib::Error::Read:
      return DataLoss("reading the response of " + what +
                      " failed (the server closed the connection or a read timed out)");
    case httplib::Error::Write:
      return DataLoss("sending the request to " + what + " failed (connection closed)");
    default:
      return DataLoss("request to " + what + " failed: " + httplib::to_string(e) + " error");
  }
}

}  // namespace

HttpClient::HttpClient(ServerUrl url, HttpClientOptions options)
    : url_(std::move(url)), options_(std::move(options)) {}

Result<HttpResponse> HttpClient::Get(const std::string& path) const {
  httplib::Client cli = MakeClient(url_, options_);
  httplib::Result res = cli.Get(url_.base_path + path, MakeHeaders(options_));
  if (!res) return TransportError(url_, path, res.error());
  return HttpResponse{res->status, res->body};
}

Result<HttpResponse> HttpClient::PostStream(const std::string& path, const std::string& json_body,
                                            const SseParser::DataCallback& on_data) const {
  httplib::Client cli = MakeClient(url_, options_);
  httplib::Request req;
  req.method = "POST";
  req.path = url_.base_path + path;
  req.headers = MakeHeaders(options_);
  req.headers.emplace("Accept", "text/event-stream");
  req.headers.emplace("Content-Type", "application/json");
  req.body = json_body;
  HttpResponse out;
  SseParser parser;
  bool stopped = false;
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.status < 200 || out.status >= 300) {
      out.body.append(data, n);
      return true;
    }
    stopped = !parser.Feed(std::string_view(data, n), on_data);
    return !stopped;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = cli.send(req, res, error);
  if (stopped) return OutOfRange("stopped by the caller");
  if (!sent) return TransportError(url_, path, error);
  out.status = res.status;
  if (out.status >= 200 && out.status < 300 && !parser.Finish(on_data)) {
    return OutOfRange("stopped by the caller");
  }
  return out;
}

std::string ErrorMessageFromBody(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    const auto err = j.find("error");
    if (err != j.end() && err->is_object()) {
      const auto msg = err->find("message");
      if (msg != err->end() && msg->is_string()) return msg->get<std::string>();
    }
    if (err != j.end() && err->is_string()) return err->get<std::string>();
    const auto msg = j.find("message");
    if (msg != j.end() && msg->is_string()) return msg->get<std::string>();
  }
  std::string cut = body.substr(0, 300);
  while (!cut.empty() && (cut.back() == '\n' || cut.back() == '\r')) cut.pop_back();
  return cut.empty() ? "(empty body)" : cut;
}

}  // namespace uniprefill::loadgen
