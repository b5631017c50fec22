// core/clock: a monotonic clock in seconds, for the durations the expert store and pack report.
#pragma once
#include <chrono>

namespace sluice {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace sluice
