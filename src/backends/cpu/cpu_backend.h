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
#include <string>

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "core/cpu_features.h"

namespace sluice {

struct CpuBackendOptions {
  // Quantize activations once per token (Q8_K / Q8_0) and multiply Q4_0/Q8_0/Q4_K/Q5_K/Q6_K
  // weights by int8 dot products, as llama.cpp does: reads each weight byte once with a few
  // integer ops (Q4_K 1 thread, L3-resident: 15 GB/s vs 3 GB/s decoding to float; decode of
  // a 12-layer qwen3-30b-a3b Q4_K_M: 23.6 vs 4.3 tok/s at 2 threads), but the activation
  // rounding changes results by NMSE ~4e-5 per matmul (tests/kernels/test_q8_matmul.cpp),
  // ~1e-4 on model logits: above runtime/parity's limits, and llama_dense-Q4_K_M's golden
  // greedy run flipped a near-tie at step 30 in an earlier version (it no longer does). Off in
  // these defaults (kernel tests compare against float math); make_backend("cpu") turns it on
  // and make_backend("cpu-exact") keeps it off (backends/backend.cpp).
  bool q8_activations = false;
  // With q8_activations: batches of at least q8_tile_min_tokens tokens use the packed
  // row-interleaved tiles where the level has them (kernels.h, Q8TileOps); off = the row path
  // for every batch (for A/B measurements and the batch-invariance tests).
  bool q8_tiles = true;
  // The smallest batch the tiles take (SLUICE_CPU_Q8_TILE_MIN). Below it the row path reads
  // each weight row once for the batch's few tokens: a tile's repack costs more than it saves
  // while the step is bound by reading the weights (several sequences decoding together).
  // 0: each type's own threshold at the level (Q8TileOps::min_tokens, cpu::kQ8TileMinTokens
  // unless measured otherwise).
  int64_t q8_tile_min_tokens = 0;
  // With q8_activations: Q4_1, Q5_0 and Q5_1 weights (ggml's legacy 32-blocks; and Q8_A) take the int8
  // path too (SLUICE_CPU_Q8_LEGACY=0 turns it off), with the VNNI prefill tiles
  // (kernels_q8_tiles32_impl.h, QLegacyTile; Q4_0 and Q8_0 always have both), as llama.cpp multiplies
  // them. SmolLM2-135M Q4_1, 2 threads, AMD EPYC Zen 4 (a VM at 30 GB/s), int8 vs float,
  // interleaved: pp512 484/432 vs 195/177 tok/s, tg32 138/140 vs 101/74. Tiles and row dots of
  // the 32-block types give the same bits (one float order), so batches, parallel requests and
  // speculative decoding see no difference between paths. MLX folders' weights (repacked to
  // Q4_1/Q5_1/Q8_A exactly) take it too: decode on a 12-layer qwen3-30b-a3b-shaped MLX 4-bit folder
  // 41-42 tok/s (65-67% of the bandwidth) against 15-16 (23-27%) in float. MLX-LM multiplies in
  // float, so the "cpu-exact" backend is the one that matches it to float rounding (2e-3 on
  // tests/data/hf's folders); with int8 activations the tiny random folders miss it by
  // 0.03-0.05, and by 0.7-2.9 where an MoE router's near-tie flips an expert.
  bool q8_legacy_types = true;
  // With q8_tiles at the avx512 level: the AMX-INT8 tiles for Q4_K/Q5_K/Q6_K where the CPU has
  // AMX and the kernel grants it (cpu::q8_kernels_amx()); off (SLUICE_CPU_AMX=0) = the VNNI tiles.
  // Same results bitwise either way.
  bool q8_amx = true;
};
// The defaults, with SLUICE_CPU_Q8=1|0, SLUICE_CPU_Q8_TILES=1|0, SLUICE_CPU_Q8_LEGACY=1|0 and
// SLUICE_CPU_AMX=1|0 in the environment overriding q8_activations, q8_tiles, q8_legacy_types
// and q8_amx.
CpuBackendOptions cpu_backend_default_options();

// n_threads <= 0: hardware concurrency. isa: the kernel level (must be available; see
// cpu_isa_available); the overload without it uses cpu_isa_select().
std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa);
std::unique_ptr<Backend> make_cpu_backend(int n_threads);
std::unique_ptr<Backend> make_cpu_backend(int n_threads, CpuIsa isa, const CpuBackendOptions& opt);
// The int8 kernel level ("avx512-vnni", ...) of a cpu backend with q8_activations, else null.
const char* cpu_backend_q8_level(const Backend& b);
// Whether b is a cpu backend whose int8 kernels read TensorView::rows16 of type t (--repack's
// copies; quant/rows16.h): false for other backends, exact float matmuls and levels without them.
bool cpu_backend_reads_rows16(const Backend& b, DType t);
// Whether b reads the interleaved layout of every type that has one at every batch size (and
// get_rows from it), so a matrix interleaved in place (ModelOptions::repack_in_place) is never
// read by rows.
bool cpu_backend_reads_every_rows16(const Backend& b);
// Whether --repack is on when not asked for: where b reads the interleaved copies. They cost no
// memory: a GGUF file's copied rows go back to the file's pages (GgufFile::release_pages), a
// folder's converted weights are interleaved in place (repack_in_place).
bool repack_by_default(const Backend& b);
// The kernel level of a cpu backend (nullopt if b is another backend): for logs and tests.
std::optional<CpuIsa> cpu_backend_isa(const Backend& b);

}  // namespace sluice
