// tests/server/server_test_util: an in-process `sluice serve` on a free port of 127.0.0.1 and
// a raw-socket HTTP/1.1 client, so tests can send what no well-behaved client would (broken
// JSON, bytes that are not UTF-8, a body past the limit, a connection closed mid-stream).
#pragma once
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "models/model.h"
#include "server/http_server.h"
#include "test_util.h"

namespace sluice::test {

struct HttpReply {
  int status = -1;  // -1: no answer (connection failed or closed early)
  std::string head, body;
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false); }
};

inline int connect_local(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // No test waits longer for a byte. A non-streamed answer comes only when generation ends: a
  // 2,000-token prefill of SmolLM2 takes about 70 s under ASan on 2 cores, hence the margin.
  timeval tv{300, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::string& extra_headers = {}) {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers +
         (body.empty() && method == "GET"
              ? ""
              : "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") +
         "\r\n" + body;
}

// Undoes Transfer-Encoding: chunked.
inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t p = 0;
  while (p < s.size()) {
    const size_t eol = s.find("\r\n", p);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(s.substr(p, eol - p), nullptr, 16);
    if (n == 0) break;
    out += s.substr(eol + 2, n);
    p = eol + 2 + n + 2;
  }
  return out;
}

// One request on its own connection (Connection: close), read to the end.
inline HttpReply http(int port, const std::string& method, const std::string& path, const std::string& body = {},
                      const std::string& extra_headers = {}) {
  HttpReply r;
  const int fd = connect_local(port);
  if (fd < 0) return r;
  if (!send_all(fd, request_text(method, path, body, extra_headers))) {
    ::close(fd);
    return r;
  }
  std::string all;
  char buf[16384];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) all.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t end = all.find("\r\n\r\n");
  if (all.compare(0, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) return r;
  r.status = std::stoi(all.substr(9, 3));
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  if (r.head.find("Transfer-Encoding: chunked") != std::string::npos) r.body = dechunk(r.body);
  return r;
}

inline HttpReply post(int port, const std::string& path, const nlohmann::json& body, const std::string& headers = {}) {
  return http(port, "POST", path, body.dump(), headers);
}

// The data: payloads of an SSE body ("[DONE]" kept as a string).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t p = 0;
  while ((p = body.find("data: ", p)) != std::string::npos) {
    const size_t e = body.find("\n\n", p);
    out.push_back(body.substr(p + 6, e - p - 6));
    p = e;
  }
  return out;
}

// The text a stream carried (chat deltas or completion texts).
inline std::string sse_text(const std::string& body) {
  std::string t;
  for (const auto& d : sse_data(body)) {
    if (d == "[DONE]") continue;
    auto j = nlohmann::json::parse(d);
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const auto& c = j["choices"][0];
    if (c.contains("delta") && c["delta"].contains("content")) t += c["delta"]["content"].get<std::string>();
    if (c.contains("text")) t += c["text"].get<std::string>();
  }
  return t;
}

// A metric's value from the /metrics text (the first sample of that name).
inline double metric(const std::string& text, const std::string& name) {
  const size_t p = text.find("\n" + name + " ");
  return p == std::string::npos ? -1 : std::stod(text.substr(p + name.size() + 2));
}

// A server on a free port, serving from a thread; stopped (gracefully) at destruction.
class TestServer {
 public:
  TestServer(const Model& m, Backend& be, server::ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    srv_ = std::make_unique<server::HttpServer>(m, be, std::move(o));
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~TestServer() { stop(); }
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000)) {
    if (!thread_.joinable()) return;
    srv_->stop(grace);
    thread_.join();
  }
  int port() const { return port_; }
  server::HttpServer& server() { return *srv_; }
  // Waits until no slot is busy and nothing is queued (false after `timeout`).
  bool wait_idle(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    const auto t_end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < t_end) {
      const auto s = srv_->engine().stats();
      if (s.busy_slots == 0 && s.queue_length == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  std::unique_ptr<server::HttpServer> srv_;
  int port_ = 0;
  std::thread thread_;
};

inline server::ServerOptions server_options(int parallel, int64_t n_ctx, int queue = 16) {
  server::ServerOptions o;
  o.model_id = "test-model";
  o.engine.parallel = parallel;
  o.engine.max_queue = queue;
  o.engine.memory.kv.n_ctx = n_ctx;
  return o;
}

}  // namespace sluice::test
