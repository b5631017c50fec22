#include "quant/rows16.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "quant/blocks.h"

namespace sluice {

bool rows16_supported(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

namespace {

// Moves every byte of 16 rows' super-block i between the two layouts (to_rows: interleaved ->
// rows), so pack and unpack are one walk and cannot disagree.
template <class Block, class Group>
void move_group(uint8_t* rows_side, size_t row_bytes, Group& g, int64_t i, bool to_rows) {
  for (int r = 0; r < 16; ++r) {
    Block& b = reinterpret_cast<Block*>(rows_side + static_cast<size_t>(r) * row_bytes)[i];
    // N a constant, so each copy is one load and one store.
    auto move = [&]<size_t N>(void* row_part, void* group_part) {
      to_rows ? std::memcpy(row_part, group_part, N) : std::memcpy(group_part, row_part, N);
    };
    if constexpr (std::is_same_v<Block, block_q4_0> || std::is_same_v<Block, block_q4_1>) {
      for (int w = 0; w < QK4_0 / 8; ++w) move.template operator()<4>(b.qs + 4 * w, &g.qs[w][r]);
      move.template operator()<2>(&b.d, &g.d[r]);
      if constexpr (std::is_same_v<Block, block_q4_1>) move.template operator()<2>(&b.m, &g.m[r]);
    } else if constexpr (std::is_same_v<Block, block_q4_K> || std::is_same_v<Block, block_q5_K>) {
      for (int w = 0; w < QK_K / 8; ++w) move.template operator()<4>(b.qs + 4 * w, &g.qs[w][r]);
      if constexpr (std::is_same_v<Block, block_q5_K>)
        for (int w = 0; w < QK_K / 32; ++w) move.template operator()<4>(b.qh + 4 * w, &g.qh[w][r]);
      for (int k = 0; k < K_SCALE_SIZE; ++k) move.template operator()<1>(&b.scales[k], &g.scales[k][r]);
      move.template operator()<2>(&b.d, &g.d[r]);
      move.template operator()<2>(&b.dmin, &g.dmin[r]);
    } else {
      // Four bytes at a time (one per input of the step); the masks drop what a shift moved
      // across a byte. v_p: the 6-bit codes of group p; ggml keeps groups 0 | 2 and 1 | 3 as the
      // low | high nibbles of ql and ql + 32, their top bits at 2p in qh.
      constexpr uint32_t k03 = 0x03030303, k0c = 0x0C0C0C0C, k0f = 0x0F0F0F0F, k30 = 0x30303030, k3f = 0x3F3F3F3F,
                         kc0 = 0xC0C0C0C0;
      for (int h = 0; h < 2; ++h)
        for (int step = 0; step < 8; ++step) {
          uint8_t* ql = b.ql + 64 * h + 4 * step;
          uint8_t* qh = b.qh + 32 * h + 4 * step;
          uint32_t(*q)[16] = g.q + 24 * h + 3 * step;
          uint32_t v[4];
          if (to_rows) {
            for (int j = 0; j < 3; ++j) v[j] = q[j][r] & k3f;
            v[3] = (q[0][r] >> 6 & k03) | (q[1][r] >> 4 & k0c) | (q[2][r] >> 2 & k30);
            const uint32_t l0 = (v[0] & k0f) | (v[2] & k0f) << 4, l1 = (v[1] & k0f) | (v[3] & k0f) << 4;
            const uint32_t hb = (v[0] >> 4 & k03) | (v[1] >> 2 & k0c) | (v[2] & k30) | (v[3] << 2 & kc0);
            std::memcpy(ql, &l0, 4);
            std::memcpy(ql + 32, &l1, 4);
            std::memcpy(qh, &hb, 4);
          } else {
            uint32_t l0, l1, hb;
            std::memcpy(&l0, ql, 4);
            std::memcpy(&l1, ql + 32, 4);
            std::memcpy(&hb, qh, 4);
            v[0] = (l0 & k0f) | (hb << 4 & k30);
            v[1] = (l1 & k0f) | (hb << 2 & k30);
            v[2] = (l0 >> 4 & k0f) | (hb & k30);
            v[3] = (l1 >> 4 & k0f) | (hb >> 2 & k30);
            q[0][r] = v[0] | (v[3] << 6 & kc0);
            q[1][r] = v[1] | (v[3] << 4 & kc0);
            q[2][r] = v[2] | (v[3] << 2 & kc0);
          }
        }
      for (int k = 0; k < QK_K / 16; ++k) move.template operator()<1>(&b.scales[k], &g.scales[k][r]);
      move.template operator()<2>(&b.d, &g.d[r]);
    }
  }
}

// rows: the row-major bytes, group: the interleaved ones; one of them is written (to_rows says
// which), so both come in writable and the caller's const source is cast once, here.
template <class Block, class Group>
void walk(uint8_t* rows, uint8_t* group, size_t row_bytes, int64_t n_rows, int64_t nb, bool to_rows) {
  for (int64_t g0 = 0; g0 < n_rows; g0 += 16) {
    const size_t base = static_cast<size_t>(g0) * row_bytes;
    auto* G = reinterpret_cast<Group*>(group + base);
    for (int64_t i = 0; i < nb; ++i) move_group<Block>(rows + base, row_bytes, G[i], i, to_rows);
  }
}

void convert(DType t, const void* src, void* dst, size_t row_bytes, int64_t n_rows, int64_t n, bool to_rows) {
  if (!rows16_supported(t)) fail("rows16: type ", dtype_name(t), " has no interleaved layout");
  const int64_t block = dtype_traits(t).block_size;
  if (n_rows % 16 != 0 || n % block != 0 || row_bytes != dtype_row_bytes(t, n))
    fail("rows16: ", n_rows, " rows of ", n, " (", row_bytes, " bytes) are not 16-row groups of whole super-blocks");
  auto* s = static_cast<uint8_t*>(const_cast<void*>(src));  // read only: see walk
  auto* d = static_cast<uint8_t*>(dst);
  uint8_t* rows = to_rows ? d : s;
  uint8_t* group = to_rows ? s : d;
  if (t == DType::Q4_0)
    walk<block_q4_0, block_q4_0_x16>(rows, group, row_bytes, n_rows, n / block, to_rows);
  else if (t == DType::Q4_1)
    walk<block_q4_1, block_q4_1_x16>(rows, group, row_bytes, n_rows, n / block, to_rows);
  else if (t == DType::Q4_K)
    walk<block_q4_K, block_q4_K_x16>(rows, group, row_bytes, n_rows, n / QK_K, to_rows);
  else if (t == DType::Q5_K)
    walk<block_q5_K, block_q5_K_x16>(rows, group, row_bytes, n_rows, n / QK_K, to_rows);
  else
    walk<block_q6_K, block_q6_K_x16>(rows, group, row_bytes, n_rows, n / QK_K, to_rows);
}

}  // namespace

void rows16_pack(DType t, const void* src, size_t row_bytes, int64_t n_rows, int64_t n, void* dst) {
  convert(t, src, dst, row_bytes, n_rows, n, false);
}

void rows16_unpack(DType t, const void* src, size_t row_bytes, int64_t n_rows, int64_t n, void* dst) {
  convert(t, src, dst, row_bytes, n_rows, n, true);
}

}  // namespace sluice
