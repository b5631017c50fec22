// tests/server/test_server_load: the short load and fault run (the full one is
// bench/serve/load_test.py): 200 requests from 16 clients at once on stories260K, 10% of
// them malformed (broken JSON, wrong types, a huge max_tokens, a body past the limit, bytes
// that are not UTF-8) and 10% leaving mid-stream. Every valid request is answered, every bad
// one gets its 4xx, no slot is left busy, and /metrics agrees. Prints TTFT p50/p99.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace sluice::test_server_load {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

enum class Kind { valid, malformed, leaves };

struct Outcome {
  Kind kind = Kind::valid;
  int status = -1;
  bool ok = false;  // the answer was what this kind of request should get
  double ttft = -1;
  std::string what;
};

// A malformed body of variant v, and the status it must get.
std::pair<std::string, int> malformed(int v) {
  switch (v % 6) {
    case 0: return {R"({"prompt": "Once upon", "max_tokens": 4)", 400};  // truncated JSON
    case 1: return {R"({"prompt": "Once", "max_tokens": "many"})", 400};
    case 2: return {R"({"prompt": "Once", "max_tokens": 1e18})", 400};
    case 3: return {std::string(80 * 1024, ' ') + "{}", 413};
    case 4: return {"{\"prompt\": \"Once \xfe\xff upon\"}", 400};
    default: return {R"({"messages": [{"role": "user", "content": {"x": 1}}]})", 400};
  }
}

// Streams a request, reading until [DONE]; ttft: send to the first chunk with text.
Outcome stream(int port, const std::string& path, const json& body, bool leave_after_first) {
  Outcome o;
  const auto t0 = Clock::now();
  const int fd = test::connect_local(port);
  if (fd < 0 || !test::send_all(fd, test::request_text("POST", path, body.dump()))) {
    if (fd >= 0) ::close(fd);
    o.what = "no connection";
    return o;
  }
  std::string got;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
    if (o.ttft < 0 && (got.find("\"content\":\"") != std::string::npos || got.find("\"text\":\"") != std::string::npos))
      o.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
    if (o.ttft >= 0 && leave_after_first) break;
    if (got.find("data: [DONE]") != std::string::npos) break;
  }
  ::close(fd);
  o.status = got.compare(0, 12, "HTTP/1.1 200") == 0 ? 200 : -1;
  o.ok = o.status == 200 && (leave_after_first ? o.ttft >= 0 : got.find("data: [DONE]") != std::string::npos);
  if (!o.ok) o.what = got.substr(0, 300);
  return o;
}

TEST(ServerLoad, TwoHundredRequestsSixteenAtOnceWithFaults) {
  SLUICE_REQUIRE_SHARED();
  auto m = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 1);
  auto opt = test::server_options(4, 1024, 64);
  opt.max_body_bytes = 64 * 1024;
  test::TestServer s(*m, *be, opt);
  const int port = s.port();

  constexpr int kRequests = 200, kClients = 16;
  std::vector<Outcome> out(kRequests);
  std::atomic<int> next{0};
  auto client = [&] {
    for (int i; (i = next.fetch_add(1)) < kRequests;) {
      Outcome& o = out[static_cast<size_t>(i)];
      if (i % 10 == 3) {
        const auto [body, want] = malformed(i / 10);
        const auto r = test::http(port, "POST", i % 20 == 3 ? "/v1/completions" : "/v1/chat/completions", body);
        o = Outcome{Kind::malformed, r.status, r.status == want && r.json().contains("error"), -1, r.body};
        continue;
      }
      const bool chat = i % 2 == 0;
      json body = {{"max_tokens", 8 + i % 17}, {"temperature", i % 3 == 0 ? 0.0 : 0.8}, {"seed", i}};
      if (chat)
        body["messages"] = json::array({{{"role", "user"}, {"content", "Tell me about toy " + std::to_string(i)}}});
      else
        body["prompt"] = "Once upon a time, number " + std::to_string(i);
      const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
      if (i % 10 == 7) {  // leaves after the first token of a generation that would fill the context
        body["max_tokens"] = 100000;
        body["ignore_eos"] = true;
        body["stream"] = true;
        o = stream(port, path, body, /*leave_after_first=*/true);
        o.kind = Kind::leaves;
      } else if (i % 2 == 1 || i % 4 == 0) {
        body["stream"] = true;
        o = stream(port, path, body, false);
      } else {
        const auto r = test::post(port, path, body);
        const json j = r.json();
        o.status = r.status;
        o.ok = r.status == 200 && j["usage"]["completion_tokens"].get<int>() >= 1;
        if (!o.ok) o.what = r.body;
      }
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> t;
  for (int c = 0; c < kClients; ++c) t.emplace_back(client);
  for (auto& th : t) th.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();

  int n_valid = 0, n_leaves = 0;
  std::vector<double> ttft;
  for (int i = 0; i < kRequests; ++i) {
    const Outcome& o = out[static_cast<size_t>(i)];
    EXPECT_TRUE(o.ok) << "request " << i << " (status " << o.status << "): " << o.what;
    n_valid += o.kind == Kind::valid;
    n_leaves += o.kind == Kind::leaves;
    if (o.ttft >= 0) ttft.push_back(o.ttft);
  }
  ASSERT_TRUE(s.wait_idle()) << "a slot is still busy";
  const auto st = s.server().engine().stats();
  const std::string metrics = test::http(port, "GET", "/metrics").body;
  EXPECT_EQ(test::metric(metrics, "sluice_slots_busy"), 0);
  EXPECT_EQ(test::metric(metrics, "sluice_queue_length"), 0);
  // Every valid request and every one that left went through the engine; the malformed never did.
  EXPECT_EQ(test::metric(metrics, "sluice_requests_total"), n_valid + n_leaves);
  EXPECT_EQ(st.requests, n_valid + n_leaves);
  EXPECT_EQ(st.cancelled, n_leaves) << "each client that left was cancelled, not run to the end";
  EXPECT_EQ(test::metric(metrics, "sluice_engine_errors_total"), 0);
  EXPECT_EQ(test::http(port, "GET", "/health").status, 200);
  std::sort(ttft.begin(), ttft.end());
  ASSERT_FALSE(ttft.empty());
  std::printf(
      "load: %d requests (%d valid, %d left mid-stream) from %d clients in %.2f s; TTFT p50 %.1f ms, "
      "p99 %.1f ms; %lld tokens generated, %.0f tok/s aggregate\n",
      kRequests, n_valid, n_leaves, kClients, wall, 1e3 * ttft[ttft.size() / 2],
      1e3 * ttft[std::min(ttft.size() - 1, ttft.size() * 99 / 100)], static_cast<long long>(st.generated_tokens),
      static_cast<double>(st.generated_tokens) / wall);
}

}  // namespace
}  // namespace sluice::test_server_load
