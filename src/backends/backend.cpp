// backends/backend: the factory that maps a backend name to an implementation.
#include "backends/backend.h"

#include <cstdlib>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/ref/ref_backend.h"
#include "core/error.h"

namespace sluice {

std::unique_ptr<Backend> make_backend(std::string_view name, int n_threads) {
  if (name == "ref") return make_ref_backend();
  // "cpu" multiplies quantized weights by int8-quantized activations, as llama.cpp does (5x
  // faster decode; matches every golden within the README's tolerances, greedy runs included);
  // "cpu-exact" decodes weights to float, the path the layer-by-layer parity against `ref`
  // holds to float32 rounding. SLUICE_CPU_Q8=0 turns the int8 path off for "cpu" too.
  if (name == "cpu" || name == "cpu-exact") {
    CpuBackendOptions opt;
    opt.q8_activations = name == "cpu";
    if (const char* e = std::getenv("SLUICE_CPU_Q8"); e && name == "cpu") opt.q8_activations = std::string(e) != "0";
    return make_cpu_backend(n_threads, cpu_isa_select(), opt);
  }
  fail("unknown backend '", name, "' (valid: ref, cpu, cpu-exact)");
}

}  // namespace sluice
