// backends/cpu/linear_attn: the cpu backend's linear-attention ops (Backend's contracts in
// backends/backend.h), kept apart from the other ops in cpu_backend.cpp.
#pragma once
#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "core/thread_pool.h"

namespace sluice::cpu {

// Tokens per chunk of the chunked delta rule, and the shortest run that takes it (below, the
// recurrence: one pass over the state per token costs less than a chunk's setup).
constexpr int64_t kDeltaChunk = 64, kDeltaChunkMinTokens = 16;

// The gated delta rule (DeltaRuleArgs). chunk > 0: runs of at least kDeltaChunkMinTokens
// tokens in the chunked (WY) form, `chunk` tokens at a time (a per-channel decay cuts a chunk
// early where a channel's cumulative log-decay passes -30, and takes a token that alone passes
// it by the recurrence); chunk == 0: the recurrence always. Threads over value heads; work
// below min_parallel_work multiply-adds runs on the calling thread.
void delta_rule(const Kernels& k, ThreadPool& pool, int64_t min_parallel_work, const DeltaRuleArgs& a,
                int64_t chunk = kDeltaChunk);

// Backend::conv1d_causal.
void conv1d_causal(const Kernels& k, const float* x, const float* w, float* state, float* out, int64_t n_tok,
                   int64_t n_ch, int64_t kernel, bool silu);

}  // namespace sluice::cpu
