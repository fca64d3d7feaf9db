// FrontDoorServer at its connection cap: a newcomer takes the place of the longest-idle keep-alive
// connection (which the server closes), and gets 503 only when every held connection is busy
// (here: a request head still arriving). A response whose handler finishes while the server stops
// still goes out whole. Raw sockets on a loopback server.
#include "server/front_door.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace uniprefill::server {
namespace {

constexpr int kCap = 3;

class FrontDoorCapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FrontDoorLimits l;
    l.max_connections = kCap;
    l.keep_alive_timeout_s = 30;  // idle ones stay: only eviction may close them
    l.header_timeout_s = 30;
    l.threads = 2;
    svr_ = std::make_unique<FrontDoorServer>(l, nullptr);
    svr_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    // Answers once the test releases it: a handler still running when the server stops.
    svr_->Get("/held", [this](const httplib::Request&, httplib::Response& res) {
      held_entered_ = true;
      while (!held_release_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      res.set_content("ok", "text/plain");
    });
    port_ = svr_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    svr_->StartFrontDoor();
    listener_ = std::thread([this] { svr_->listen_after_bind(); });
    while (!svr_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    Stop();
  }
  // What OpenAiServer::Stop does once its requests have ended: httplib's stop, then the front
  // door's. Idempotent.
  void Stop() {
    svr_->stop();
    if (listener_.joinable()) listener_.join();
    svr_->StopFrontDoor();
  }

  int Connect() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    fds_.push_back(fd);
    return fd;
  }
  // Sends one keep-alive GET and returns the response's status line ("" if none).
  static std::string Get(int fd, const std::string& path = "/health") {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) return "";
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos || got.find("ok") == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 5000) <= 0) break;
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
    return got.substr(0, got.find("\r\n"));
  }
  // Whether the server closed fd within `ms` (recv sees the end of the stream).
  static bool ClosedByServer(int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return false;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
  }
  void WaitOpen(int n) {
    for (int i = 0; i < 500 && svr_->open_connections() != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(svr_->open_connections(), n);
  }

  std::unique_ptr<FrontDoorServer> svr_;
  std::thread listener_;
  int port_ = -1;
  std::vector<int> fds_;
  std::atomic<bool> held_entered_{false}, held_release_{false};
};

TEST_F(FrontDoorCapTest, ANewcomerAtTheCapEvictsTheLongestIdleKeepAlive) {
  std::vector<int> idle;
  for (int i = 0; i < kCap; ++i) {
    idle.push_back(Connect());
    ASSERT_EQ(Get(idle.back()), "HTTP/1.1 200 OK");
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // idle_since strictly ordered
  }
  WaitOpen(kCap);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // the poll thread counts them idle
  const int newcomer = Connect();
  EXPECT_EQ(Get(newcomer), "HTTP/1.1 200 OK");
  EXPECT_TRUE(ClosedByServer(idle[0], 2000)) << "the longest-idle connection stays open";
  EXPECT_FALSE(ClosedByServer(idle[1], 100));
  EXPECT_EQ(Get(idle[2]), "HTTP/1.1 200 OK");  // the others keep working
  WaitOpen(kCap);
}

TEST_F(FrontDoorCapTest, ANewcomerAtTheCapGets503WhenNoneIsIdle) {
  for (int i = 0; i < kCap; ++i) {
    const int fd = Connect();
    ASSERT_EQ(send(fd, "GET /he", 7, MSG_NOSIGNAL), 7);  // a head still arriving: not idle
  }
  WaitOpen(kCap);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  const int newcomer = Connect();
  EXPECT_EQ(Get(newcomer), "HTTP/1.1 503 Service Unavailable");
  WaitOpen(kCap);  // the refused one is closed (its count drops just after the client sees EOF)
}

// The serve command stops the server when a tensor-parallel rank fails, right after that failure
// ended every request with a 500: the workers still writing those answers must finish (CI saw the
// client get a closed connection instead, when the stop came between the handler and its write).
TEST_F(FrontDoorCapTest, AResponseStillBeingWrittenWhenTheServerStopsGoesOut) {
  const int fd = Connect();
  std::string status;
  std::thread client([&] { status = Get(fd, "/held"); });
  for (int i = 0; i < 500 && !held_entered_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(held_entered_);
  std::thread stopper([this] { Stop(); });  // joins the worker, so it waits for the handler
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the front door is stopping
  held_release_ = true;
  client.join();
  stopper.join();
  EXPECT_EQ(status, "HTTP/1.1 200 OK");
}

}  // namespace
}  // namespace uniprefill::server
