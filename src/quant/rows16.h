// quant/rows16: weights 16 rows at a time interleaved for the cpu backend's int8 kernels
// (TensorView::rows16). A row-major Q4_K matrix makes each dot product unpack its row's
// nibbles and scales for one row (q8_dot_q4_K_512: ~34 GMAC/s per Zen 4 core, below what one
// core reads from memory); interleaved, one vpdpbusd multiplies 4 inputs of 16 rows and the
// scales of 16 rows decode in one vector op (~90 GMAC/s from cache). The bytes are the same
// count as the rows', reordered (block_q4_K_x16): `--repack` makes a copy at load, as
// llama.cpp's CPU_REPACK does for its q4_K_8x8 layout.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace sluice {

// Types that have an interleaved layout (Q4_0, Q4_1, Q4_K, Q5_K, Q6_K).
bool rows16_supported(DType t);
// src: n_rows rows of n elements of type t, row_bytes apart; dst: n_rows · row_bytes bytes,
// group g (rows 16g..16g+15) at g·16·row_bytes, its blocks (super-blocks) in order. n_rows must
// be a multiple of 16.
void rows16_pack(DType t, const void* src, size_t row_bytes, int64_t n_rows, int64_t n, void* dst);
// The inverse: the rows back from the interleaved bytes (tests, and readers of the layout's twin).
void rows16_unpack(DType t, const void* src, size_t row_bytes, int64_t n_rows, int64_t n, void* dst);

}  // namespace sluice
