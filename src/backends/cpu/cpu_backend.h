// backends/cpu: the vectorized, multithreaded CPU backend. The ISA level (generic, AVX2,
// AVX-512) is chosen once at construction by CPUID or SLUICE_CPU_ISA; ops split work by
// output rows / (token, head) pairs only, never across a reduction, so results are bitwise
// identical for any thread count.
//
// One op at a time per instance: the per-thread scratch buffers belong to the instance, so
// two threads that run ops concurrently need a backend each.
#pragma once
#include <memory>
#include <optional>

#include "backends/backend.h"
#include "core/cpu_features.h"

namespace sluice {

// n_threads <= 0: hardware concurrency. isa: the kernel level (must be available; see
// cpu_isa_available); the overload without it uses cpu_isa_select().
std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa);
std::unique_ptr<Backend> make_cpu_backend(int n_threads);
// The kernel level of a cpu backend (nullopt if b is another backend): for logs and tests.
std::optional<CpuIsa> cpu_backend_isa(const Backend& b);

}  // namespace sluice
