// FrontDoorServer: an httplib::Server whose connections wait for their request head in one poll
// thread instead of on a worker thread, so slow or idle clients cannot exhaust the workers.
//
// Why: Debian's cpp-httplib 0.11 is a compiled library (its CPPHTTPLIB_* limits are fixed at
// its build) that parses each connection on a worker thread with no header count or size limit,
// no deadline for a whole head and a blocking keep-alive wait. It does expose, as virtual and
// protected, the one step that serves a request from a Stream (process_request); this class
// keeps httplib's parser, routing and writers and replaces only the connection loop around it.
//
// Per connection: the poll thread reads bytes until the head ("\r\n\r\n") is complete, within
// `header_timeout_s` of its first byte (408 after), `max_header_bytes` (431), `max_header_count`
// (431), `max_request_line` (414), one Content-Length that is a plain number (400), and no
// Transfer-Encoding beside it (400). A complete head goes to a worker, which serves exactly one
// request (its body must arrive within `body_timeout_s`) and hands the connection back for
// keep-alive (closed after `keep_alive_timeout_s` idle). Bytes read past the request (pipelining)
// stay with the connection. Beyond `max_connections` open connections a new one takes the place of
// the longest-idle keep-alive connection (closed without a word), or gets 503 when none is idle.
// Not for: TLS, HTTP/2, upgrades.
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace uniprefill::server {

struct FrontDoorLimits {
  size_t max_header_bytes = size_t{32} << 10;   // the request line and every header
  int max_header_count = 100;                    // header lines
  size_t max_request_line = size_t{8} << 10;     // "METHOD target HTTP/1.1"
  double header_timeout_s = 10;                  // first byte of a head -> its end
  double body_timeout_s = 60;                    // head complete -> body read
  double keep_alive_timeout_s = 5;               // idle between requests
  int max_connections = 1024;                    // open connections, idle ones too
  int threads = 64;                              // workers serving complete requests
};

// A refusal the front door answered itself: (status, message, request line or "").
using FrontDoorLog = std::function<void(int, const std::string&, const std::string&)>;

class FrontDoorServer : public httplib::Server {
 public:
  FrontDoorServer(FrontDoorLimits limits, FrontDoorLog log);
  ~FrontDoorServer() override;
  // Starts the poll thread and the workers; call before listen_after_bind.
  void StartFrontDoor();
  // After httplib's stop(): closes waiting connections, makes reads in progress fail, joins.
  void StopFrontDoor();
  // Open connections (waiting and being served).
  int open_connections() const;
  struct Conn;  // one client connection (front_door.cc)

 private:
  struct Impl;
  // httplib's accept loop calls this (on its own thread: see StartFrontDoor's task queue).
  bool process_and_close_socket(socket_t sock) override;
  void ServeOne(std::unique_ptr<Conn> conn);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uniprefill::server
