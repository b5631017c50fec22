// bench/run_bench: the `sluice bench` run — its options and the loop over models, thread
// counts, KV cache pairs, depths and tests (pp, tg, tg with several sequences), printing a
// markdown table or JSON (what each figure means: bench/run_bench.cpp's header).
#pragma once
#include "sluice/bench.h"

namespace sluice {

// The options are the public API's (sluice/bench.h: BenchConfig, what `sluice bench` parses).
using BenchArgs = BenchConfig;

// Runs the benchmark; prints to stdout (progress to stderr). Throws Error on bad arguments.
int run_bench(const BenchArgs& a);

}  // namespace sluice
