// server/metrics: the /metrics page (Prometheus text format 0.0.4): the engine's counters and
// gauges (server/engine.h) and the HTTP responses by status code.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "server/engine.h"

namespace sluice::server {

// Responses by HTTP status, counted by the routes. Thread-safe.
class HttpCounters {
 public:
  void count(int status);
  std::map<int, int64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> by_status_;
};

std::string render_metrics(const EngineStats& s, const std::map<int, int64_t>& http, int n_slots);

}  // namespace sluice::server
