#include "server/front_door.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace uniprefill::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTickMs = 100;  // deadlines and the stop flag are checked this often
constexpr double kStopWriteGraceS = 2;  // a response still being written when the server stops

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

void Address(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    *ip = host;
    *port = std::atoi(serv);
  }
}

const char* Reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

// Best effort: the client may be gone or not reading; a refusal never blocks the poll thread.
void WriteRefusal(int fd, int status, const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  const std::string type = status >= 500 ? "server_error" : "invalid_request_error";
  const std::string body = "{\"error\":{\"message\":\"" + escaped + "\",\"type\":\"" + type +
                           "\",\"param\":null,\"code\":null}}";
  const std::string out = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) +
                          "\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// "Name: value" lines of a head (after the request line), lower-cased name.
bool HeaderIs(const std::string& line, const char* name) {
  const size_t n = std::strlen(name);
  if (line.size() <= n || line[n] != ':') return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  return true;
}

std::string ValueOf(const std::string& line) {
  size_t b = line.find(':') + 1, e = line.size();
  while (b < e && (line[b] == ' ' || line[b] == '\t')) ++b;
  while (e > b && (line[e - 1] == ' ' || line[e - 1] == '\t')) --e;
  return line.substr(b, e - b);
}

}  // namespace

struct FrontDoorServer::Conn {
  int fd = -1;
  std::string buf;  // bytes read and not yet consumed (the head, pipelined requests)
  size_t pos = 0;   // consumed prefix of buf
  bool idle = true; // no byte of the next request yet
  bool over_cap = false;  // accepted beyond max_connections: takes an idle connection's place
  Clock::time_point deadline;
  Clock::time_point idle_since;  // when it last became idle
  std::string remote_ip, local_ip;
  int remote_port = -1, local_port = -1;
  size_t pending() const { return buf.size() - pos; }
};

struct FrontDoorServer::Impl {
  FrontDoorLimits limits;
  FrontDoorLog log;
  std::atomic<bool> stopping{false};
  std::atomic<int> open{0};
  std::atomic<int> idle{0};  // connections with idle set (in the inbox or the poll thread's list)
  int wake_fd = -1;
  std::mutex mu;  // guards inbox
  std::vector<std::unique_ptr<Conn>> inbox;
  std::thread poller;
  std::unique_ptr<httplib::ThreadPool> workers;

  void Close(Conn& c) {
    shutdown(c.fd, SHUT_RDWR);
    close(c.fd);
    if (c.idle) --idle;
    --open;
  }
  void Refuse(Conn& c, int status, const std::string& message, const std::string& line) {
    WriteRefusal(c.fd, status, message);
    if (log) log(status, message, line);
    Close(c);
  }
  // Counted idle under the lock, so a newcomer that saw the count is queued after this one.
  void Hand(std::unique_ptr<Conn> c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (c->idle) ++idle;
      inbox.push_back(std::move(c));
    }
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof(one));
  }
  // At the cap, each newcomer takes the place of the longest-idle keep-alive connection (as nginx
  // does with its reusable connections); one that finds none gets the 503.
  void Evict(std::vector<std::unique_ptr<Conn>>& conns) {
    for (auto& n : conns) {
      if (!n || !n->over_cap) continue;
      n->over_cap = false;
      std::unique_ptr<Conn>* oldest = nullptr;
      for (auto& c : conns) {
        if (c && c->idle && (!oldest || c->idle_since < (*oldest)->idle_since)) oldest = &c;
      }
      if (oldest) {
        Close(**oldest);  // closed without a word, as at its keep-alive timeout
        oldest->reset();
      } else {
        Refuse(*n, 503, TooMany(), "");
        n.reset();
      }
    }
    std::erase_if(conns, [](const std::unique_ptr<Conn>& c) { return !c; });
  }
  std::string TooMany() const {
    return "too many open connections (" + std::to_string(limits.max_connections) +
           ", --max-connections); retry later";
  }
};

// The connection as httplib's parser sees it: reads come from the bytes the poll thread read,
// then from the socket, and fail at the body deadline or when the server stops.
class ConnStream : public httplib::Stream {
 public:
  ConnStream(FrontDoorServer::Conn& c, const std::atomic<bool>& stopping, double body_timeout_s)
      : c_(c), stopping_(stopping), deadline_(After(body_timeout_s)) {}

  bool is_readable() const override { return c_.pending() > 0 || Wait(POLLIN, deadline_); }
  bool is_writable() const override { return !write_failed_ && Writable(); }

  ssize_t read(char* ptr, size_t size) override {
    if (c_.pending() > 0) {
      const size_t n = std::min(size, c_.pending());
      std::memcpy(ptr, c_.buf.data() + c_.pos, n);
      c_.pos += n;
      return static_cast<ssize_t>(n);
    }
    if (!Wait(POLLIN, deadline_)) return -1;
    return recv(c_.fd, ptr, size, 0);  // never more than asked: the next request stays queued
  }

  // A response being written when the server stops still goes out: its request has ended (often
  // with the very error that stops the server: a tensor-parallel rank that died), and a client
  // cut off before its answer learns nothing. A client that does not read gets kStopWriteGraceS
  // once the server stops, so stopping stays bounded.
  ssize_t write(const char* ptr, size_t size) override {
    if (!head_written_) NoteHead(ptr, size);
    size_t done = 0;
    while (done < size) {
      if (!Writable()) break;
      const ssize_t n = send(c_.fd, ptr + done, size - done, MSG_NOSIGNAL);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (done < size) write_failed_ = true;
    return write_failed_ ? -1 : static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.remote_ip;
    port = c_.remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local_ip;
    port = c_.local_port;
  }
  socket_t socket() const override { return c_.fd; }

  // The response said "Connection: close" (httplib's choice or a handler's, e.g. a 413 whose
  // body was left unread), or a write failed: the connection must not be reused.
  bool must_close() const { return close_ || write_failed_; }

 private:
  bool Wait(short events, Clock::time_point deadline, bool stop_aborts = true) const {
    for (;;) {
      if (stop_aborts && stopping_.load()) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                             Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{c_.fd, events, 0};
      const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), kTickMs)));
      if (rc < 0 && errno != EINTR) return false;
      if (rc > 0) return (p.revents & (POLLERR | POLLNVAL)) == 0;
    }
  }
  bool Writable() const {
    return Wait(POLLOUT, After(stopping_.load() ? kStopWriteGraceS : 30), /*stop_aborts=*/false);
  }
  void NoteHead(const char* ptr, size_t size) {
    head_.append(ptr, size);
    if (head_.find("\r\n\r\n") == std::string::npos) return;
    head_written_ = true;
    close_ = head_.find("\r\nConnection: close\r\n") != std::string::npos;
  }

  FrontDoorServer::Conn& c_;
  const std::atomic<bool>& stopping_;
  Clock::time_point deadline_;
  std::string head_;
  bool head_written_ = false, close_ = false, write_failed_ = false;
};

namespace {

// httplib's accept loop hands each socket to its task queue; this one runs the hand-off inline
// (it only registers the socket), so accepting never waits for a worker.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// What is wrong with a complete head ("" when nothing): limits and framing a worker must not see.
int CheckHead(const std::string& head, const FrontDoorLimits& l, std::string* why) {
  const size_t line_end = head.find("\r\n");
  if (line_end > l.max_request_line) {
    *why = "the request line is longer than " + std::to_string(l.max_request_line) +
           " bytes (--max-request-line)";
    return 414;
  }
  int count = 0, lengths = 0, chunked = 0;
  std::string length;
  for (size_t b = line_end + 2; b < head.size();) {
    size_t e = head.find("\r\n", b);
    if (e == std::string::npos) e = head.size();
    const std::string line = head.substr(b, e - b);
    b = e + 2;
    if (line.empty()) continue;
    if (++count > l.max_header_count) {
      *why = "more than " + std::to_string(l.max_header_count) + " headers (--max-header-count)";
      return 431;
    }
    if (HeaderIs(line, "transfer-encoding")) ++chunked;
    if (!HeaderIs(line, "content-length")) continue;
    const std::string v = ValueOf(line);
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) {
      *why = "Content-Length must be a non-negative decimal number (got '" + v.substr(0, 32) +
             "')";
      return 400;
    }
    if (lengths++ > 0 && v != length) {
      *why = "the request has two different Content-Length headers";
      return 400;
    }
    length = v;
  }
  if (lengths > 0 && chunked > 0) {
    *why = "the request has both Content-Length and Transfer-Encoding";
    return 400;
  }
  return 0;
}

}  // namespace

FrontDoorServer::FrontDoorServer(FrontDoorLimits limits, FrontDoorLog log)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->log = std::move(log);
  new_task_queue = [] { return new InlineQueue(); };
}

FrontDoorServer::~FrontDoorServer() { StopFrontDoor(); }

int FrontDoorServer::open_connections() const { return impl_->open.load(); }

bool FrontDoorServer::process_and_close_socket(socket_t sock) {
  Impl& s = *impl_;
  auto c = std::make_unique<Conn>();
  c->fd = sock;
  c->deadline = After(s.limits.header_timeout_s);
  c->idle = false;  // a new connection must start its request within the header deadline
  ++s.open;
  if (!s.stopping && s.open > s.limits.max_connections && s.idle > 0) {
    c->over_cap = true;  // the poll thread closes an idle keep-alive connection for it
  } else if (s.stopping || s.open > s.limits.max_connections) {
    s.Refuse(*c, 503, s.stopping ? "the server is shutting down" : s.TooMany(), "");
    return true;
  }
  // httplib writes a response's head and body in two send()s: with Nagle's algorithm the body
  // waits for the client's delayed ACK of the head, 40 ms on every keep-alive request after the
  // first few (measured: docs/serving.md, "the front door").
  const int one = 1;
  (void)setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Address(sock, true, &c->remote_ip, &c->remote_port);
  Address(sock, false, &c->local_ip, &c->local_port);
  s.Hand(std::move(c));
  return true;
}

void FrontDoorServer::ServeOne(std::unique_ptr<Conn> c) {
  Impl& s = *impl_;
  bool closed = false;
  bool must_close = true;
  {
    ConnStream strm(*c, s.stopping, s.limits.body_timeout_s);
    const bool ok = process_request(strm, s.stopping.load(), closed, [&](httplib::Request& req) {
      req.remote_addr = c->remote_ip;
      req.remote_port = c->remote_port;
      req.local_addr = c->local_ip;
      req.local_port = c->local_port;
    });
    must_close = !ok || closed || strm.must_close() || s.stopping;
  }
  if (must_close) {
    s.Close(*c);
    return;
  }
  c->buf.erase(0, c->pos);
  c->pos = 0;
  c->idle = c->buf.empty();
  c->idle_since = Clock::now();
  c->deadline = After(c->idle ? s.limits.keep_alive_timeout_s : s.limits.header_timeout_s);
  s.Hand(std::move(c));
}

void FrontDoorServer::StartFrontDoor() {
  Impl& s = *impl_;
  set_keep_alive_timeout(static_cast<time_t>(s.limits.keep_alive_timeout_s));
  set_keep_alive_max_count(1000);
  s.wake_fd = eventfd(0, EFD_NONBLOCK);
  s.workers = std::make_unique<httplib::ThreadPool>(std::max(1, s.limits.threads));
  s.poller = std::thread([this, &s] {
    std::vector<std::unique_ptr<Conn>> conns;
    std::vector<pollfd> fds;
    char chunk[16384];
    while (!s.stopping) {
      {
        std::lock_guard<std::mutex> lock(s.mu);
        for (auto& c : s.inbox) conns.push_back(std::move(c));
        s.inbox.clear();
      }
      s.Evict(conns);
      fds.assign(1, pollfd{s.wake_fd, POLLIN, 0});
      for (auto& c : conns) fds.push_back(pollfd{c->fd, POLLIN, 0});
      // A connection handed back with a whole pipelined request already read needs no poll.
      const bool ready = std::any_of(conns.begin(), conns.end(), [](auto& c) {
        return c->buf.find("\r\n\r\n") != std::string::npos;
      });
      if (poll(fds.data(), fds.size(), ready ? 0 : kTickMs) < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) {
        uint64_t n;
        (void)!read(s.wake_fd, &n, sizeof(n));
      }
      const auto now = Clock::now();
      std::vector<std::unique_ptr<Conn>> keep;
      for (size_t i = 0; i < conns.size(); ++i) {
        std::unique_ptr<Conn> c = std::move(conns[i]);
        if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) {
          const size_t room = s.limits.max_header_bytes + 4 - std::min(
              c->buf.size(), s.limits.max_header_bytes + 4);
          const ssize_t n = recv(c->fd, chunk, std::min(sizeof(chunk), std::max<size_t>(room, 1)),
                                 MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            s.Close(*c);  // the client left before finishing a request
            continue;
          }
          if (n > 0) {
            if (c->idle) {
              c->deadline = After(s.limits.header_timeout_s);
              --s.idle;
            }
            c->idle = false;
            c->buf.append(chunk, static_cast<size_t>(n));
          }
        }
        const size_t end = c->buf.find("\r\n\r\n");
        if (end != std::string::npos && end + 4 <= s.limits.max_header_bytes + 4) {
          std::string why;
          const std::string head = c->buf.substr(0, end + 4);
          const std::string line = head.substr(0, std::min<size_t>(head.find("\r\n"), 200));
          if (int status = CheckHead(head, s.limits, &why)) {
            s.Refuse(*c, status, why, line);
            continue;
          }
          auto job = std::make_shared<std::unique_ptr<Conn>>(std::move(c));
          s.workers->enqueue([this, job] { ServeOne(std::move(*job)); });
          continue;
        }
        if (c->buf.size() > s.limits.max_header_bytes) {
          const bool line_too_long = c->buf.find("\r\n") > s.limits.max_request_line;
          s.Refuse(*c, line_too_long ? 414 : 431,
                   line_too_long ? "the request line is longer than " +
                                       std::to_string(s.limits.max_request_line) +
                                       " bytes (--max-request-line)"
                                 : "the request head is larger than " +
                                       std::to_string(s.limits.max_header_bytes) +
                                       " bytes (--max-header-bytes)",
                   c->buf.substr(0, std::min<size_t>(c->buf.find("\r\n"), 200)));
          continue;
        }
        if (now > c->deadline) {
          if (c->idle) {
            s.Close(*c);  // an idle keep-alive connection: closed without a word, as usual
          } else {
            s.Refuse(*c, 408, "the request head did not arrive within the header timeout (" +
                                  std::to_string(s.limits.header_timeout_s) +
                                  " s, --header-timeout)", "");
          }
          continue;
        }
        keep.push_back(std::move(c));
      }
      conns.swap(keep);
    }
    for (auto& c : conns) s.Close(*c);
  });
}

void FrontDoorServer::StopFrontDoor() {
  Impl& s = *impl_;
  s.stopping = true;
  if (s.poller.joinable()) s.poller.join();
  if (s.workers) {
    s.workers->shutdown();  // reads in progress fail within kTickMs; workers finish their request
    s.workers.reset();
  }
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& c : s.inbox) s.Close(*c);
  s.inbox.clear();
  if (s.wake_fd >= 0) close(s.wake_fd);
  s.wake_fd = -1;
}

}  // namespace uniprefill::server
