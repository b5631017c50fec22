// backends/backend: the factory that maps a backend name to an implementation.
#include "backends/backend.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/ref/ref_backend.h"
#include "core/error.h"

namespace sluice {

std::unique_ptr<Backend> make_backend(std::string_view name, int n_threads) {
  if (name == "ref") return make_ref_backend();
  if (name == "cpu") return make_cpu_backend(n_threads);
  fail("unknown backend '", name, "' (valid: ref, cpu)");
}

}  // namespace sluice
