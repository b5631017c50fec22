// server/metrics: Prometheus text — one HELP and TYPE line per metric, then its samples.
#include "server/metrics.h"

#include <iomanip>
#include <sstream>

namespace sluice::server {

void HttpCounters::count(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++by_status_[status];
}

std::map<int, int64_t> HttpCounters::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return by_status_;
}

std::string render_metrics(const EngineStats& s, const std::map<int, int64_t>& http, int n_slots) {
  std::ostringstream o;
  o << std::setprecision(15);  // counters stay exact integers up to 10^15
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << v << '\n';
  };
  metric("sluice_requests_total", "counter", "Generation requests finished (cancelled ones included).",
         static_cast<double>(s.requests));
  metric("sluice_requests_cancelled_total", "counter", "Requests cancelled (client gone, shutdown).",
         static_cast<double>(s.cancelled));
  metric("sluice_engine_errors_total", "counter", "Forward steps that failed.", static_cast<double>(s.errors));
  metric("sluice_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         static_cast<double>(s.prompt_tokens));
  metric("sluice_prompt_tokens_cached_total", "counter", "Prompt tokens reused from the prompt cache.",
         static_cast<double>(s.cached_tokens));
  metric("sluice_prompt_cache_hits_total", "counter", "Requests that reused cached prompt tokens.",
         static_cast<double>(s.cache_hits));
  metric("sluice_prompt_cache_hit_ratio", "gauge", "Cached prompt tokens / prompt tokens.",
         s.prompt_tokens ? static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens) : 0.0);
  metric("sluice_prompt_tokens_host_cached_total", "counter",
         "Prompt tokens restored from the host-RAM cache (--cache-ram; part of the cached ones).",
         static_cast<double>(s.host_cached_tokens));
  metric("sluice_host_cache_hits_total", "counter", "Requests that resumed from the host-RAM cache.",
         static_cast<double>(s.host_cache_hits));
  metric("sluice_host_cache_entries", "gauge", "Conversations held in the host-RAM cache.",
         static_cast<double>(s.host_cache_entries));
  metric("sluice_host_cache_bytes", "gauge", "Bytes held in the host-RAM cache.",
         static_cast<double>(s.host_cache_bytes));
  metric("sluice_host_cache_budget_bytes", "gauge", "The host-RAM cache's budget (--cache-ram).",
         static_cast<double>(s.host_cache_budget));
  metric("sluice_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generated_tokens));
  metric("sluice_generation_tokens_per_second", "gauge",
         "Generated tokens per second of forward-step time, over the server's life.",
         s.busy_seconds > 0 ? static_cast<double>(s.generated_tokens) / s.busy_seconds : 0.0);
  metric("sluice_steps_total", "counter", "Forward steps (one batch each).", static_cast<double>(s.steps));
  metric("sluice_busy_seconds_total", "counter", "Seconds spent in forward steps.", s.busy_seconds);
  metric("sluice_slots_total", "gauge", "Requests that can decode together (--parallel).", n_slots);
  metric("sluice_slots_busy", "gauge", "Requests decoding now.", s.busy_slots);
  metric("sluice_slots_idle_cached", "gauge", "Idle slots holding a cached sequence.", s.idle_cached);
  metric("sluice_queue_length", "gauge", "Requests waiting for a slot.", s.queue_length);
  metric("sluice_kv_cache_bytes", "gauge", "Bytes of KV rows, states and checkpoints held.",
         static_cast<double>(s.kv_bytes));
  o << "# HELP sluice_http_responses_total HTTP responses by status code.\n"
       "# TYPE sluice_http_responses_total counter\n";
  for (const auto& [code, n] : http) o << "sluice_http_responses_total{code=\"" << code << "\"} " << n << '\n';
  return o.str();
}

}  // namespace sluice::server
