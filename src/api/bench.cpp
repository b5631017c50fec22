// api/bench: sluice/bench.h — bench/run_bench takes the public options as they are.
#include "sluice/bench.h"

#include "bench/run_bench.h"

namespace sluice {

int bench(const BenchConfig& cfg) { return run_bench(cfg); }

}  // namespace sluice
