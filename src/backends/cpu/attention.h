// backends/cpu/attention: the cpu backend's attention over the KV cache in any KV codec
// (kvcodec/kvcodec.h), kept apart from the other ops in cpu_backend.cpp.
#pragma once
#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "core/thread_pool.h"

namespace sluice::cpu {

// Causal GQA attention, Backend::attention's contract. Work below min_parallel_work
// multiply-adds runs on the calling thread.
void attention(const Kernels& k, ThreadPool& pool, int64_t min_parallel_work, const AttentionArgs& a);

}  // namespace sluice::cpu
