// tests/kernels/test_rows16: the interleaved 16-row layout (quant/rows16.h, TensorView::rows16)
// and the int8 kernels that read it (Q8Ops::rows16: avx512-vnni, and avx2 / avx512 without VNNI
// through the 256-bit tiles' loops):
//   * the layout round-trips every byte and refuses what it cannot interleave, by name;
//   * the kernel gives bitwise the prefill tiles' results (Q8TileOps::gemm on the same rows,
//     packed per call) at every batch size, and the row path's to float rounding (bitwise for
//     Q4_0/Q4_1, whose paths share one float order);
//   * the cpu backend reads rows16 in matmul, moe_ffn_token and moe_ffn_batch;
//   * negative controls: one scale byte changed in the interleaved copy changes the results
//     of its group's rows and of no other group.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "core/error.h"
#include "kernels/kernel_test_util.h"
#include "quant/quant.h"
#include "quant/rows16.h"

namespace sluice::test_rows16 {
namespace {

using test::nmse;
using test::randn;

struct Interleaved : test::RandomMatrix {
  std::vector<uint8_t> rows16;
  Interleaved(DType t, int64_t n_in, int64_t n_out, uint32_t seed) : RandomMatrix(t, n_in, n_out, seed, 0.05f) {
    rows16.resize(bytes.size());
    rows16_pack(t, bytes.data(), view.row_bytes(), n_out, n_in, rows16.data());
  }
  TensorView with_rows16() const {
    TensorView v = view;
    v.rows16 = rows16.data();
    return v;
  }
};

// The levels this CPU runs whose int8 kernels read the interleaved rows (every SIMD level).
std::vector<CpuIsa> rows16_levels() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_isa_available(isa) && cpu::q8_kernels_for(isa).q4_K.rows16) out.push_back(isa);
  return out;
}
#define SKIP_WITHOUT_ROWS16_LEVEL() \
  if (rows16_levels().empty()) GTEST_SKIP() << "no AVX2 here: the interleaved kernels exist only at SIMD levels"

std::vector<uint8_t> quantized(DType act, int64_t n, int64_t n_tok, uint32_t seed, size_t& row_bytes) {
  row_bytes = dtype_row_bytes(act, n);
  std::vector<uint8_t> a(row_bytes * static_cast<size_t>(n_tok));
  const std::vector<float> x = randn(static_cast<size_t>(n * n_tok), seed);
  for (int64_t t = 0; t < n_tok; ++t) quantize_row(act, x.data() + t * n, a.data() + t * row_bytes, n);
  return a;
}

TEST(Rows16, LayoutRoundTripsEveryByte) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    Interleaved m(t, 512, 48, 3);
    EXPECT_NE(std::memcmp(m.rows16.data(), m.bytes.data(), m.bytes.size()), 0);  // reordered, not copied
    std::vector<uint8_t> back(m.bytes.size());
    rows16_unpack(t, m.rows16.data(), m.view.row_bytes(), 48, 512, back.data());
    EXPECT_EQ(back, m.bytes);
  }
}

TEST(Rows16, RefusesWhatItCannotInterleave) {
  test::RandomMatrix q8(DType::Q8_0, 256, 16, 1), q4(DType::Q4_K, 256, 40, 1);
  std::vector<uint8_t> out(q4.bytes.size());
  try {
    rows16_pack(DType::Q8_0, q8.bytes.data(), q8.view.row_bytes(), 16, 256, out.data());
    FAIL() << "Q8_0 interleaved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0 has no interleaved layout"), std::string::npos) << e.what();
  }
  try {
    rows16_pack(DType::Q4_K, q4.bytes.data(), q4.view.row_bytes(), 40, 256, out.data());
    FAIL() << "40 rows interleaved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("40 rows"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(rows16_supported(DType::Q8_0));
}

TEST(Rows16, KernelEqualsTheTilesBitwise) {
  SKIP_WITHOUT_ROWS16_LEVEL();
  const int64_t n = 512, n_out = 48;
  for (CpuIsa isa : rows16_levels())
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      const cpu::Q8Kernels* k = &cpu::q8_kernels_for(isa);
      const cpu::Q8Ops& op = *k->get(t);
      ASSERT_NE(op.rows16, nullptr);
      Interleaved m(t, n, n_out, 7);
      // From cpu::kRows16TileTokens (64) on, each group goes through its tile: 64 and 70 too.
      for (int64_t n_tok : {1, 2, 3, 4, 5, 8, 9, 13, 64, 70}) {
        SCOPED_TRACE(std::string(k->name) + " " + std::string(dtype_name(t)) + " tokens " + std::to_string(n_tok));
        size_t ab = 0;
        const std::vector<uint8_t> a = quantized(op.act, n, n_tok, 11, ab);
        std::vector<float> got(static_cast<size_t>(n_tok * n_out)), tiles(got.size()), rows(got.size());
        op.rows16(m.rows16.data(), n_out, n, a.data(), ab, nullptr, n_tok, got.data(), n_out);
        std::vector<uint8_t> tile(op.tile.bytes(n) + 64);
        const size_t rb = m.view.row_bytes();
        // The 32-block types' tiles read each activation block's Σa (Q8TileOps::act_sums).
        std::vector<int32_t> sums;
        if (op.tile.act_sums)
          for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t i = 0; i < n / 32; ++i)
              sums.push_back(cpu::q8_0_quant_sum(reinterpret_cast<const block_q8_0*>(a.data() + t * ab)[i]));
        for (int64_t r0 = 0; r0 < n_out; r0 += 16) {
          op.tile.pack(m.bytes.data() + r0 * rb, rb, 16, n, tile.data());
          op.tile.gemm(tile.data(), n, a.data(), ab, sums.empty() ? nullptr : sums.data(), n_tok, tiles.data() + r0,
                       n_out, 16);
        }
        op.gemm(m.bytes.data(), rb, n_out, a.data(), ab, n_tok, n, rows.data(), n_out);
        EXPECT_EQ(std::memcmp(got.data(), tiles.data(), got.size() * sizeof(float)), 0);
        EXPECT_LT(nmse(rows, got), 1e-10);
        if (!sums.empty()) {  // the caller's sums (the backend makes them once per activation): the same bits
          std::vector<float> given(got.size());
          op.rows16(m.rows16.data(), n_out, n, a.data(), ab, sums.data(), n_tok, given.data(), n_out);
          EXPECT_EQ(std::memcmp(got.data(), given.data(), got.size() * sizeof(float)), 0);
          // ... and it reads them: one sum off by one moves the outputs of its token
          sums[0] += 1;
          op.rows16(m.rows16.data(), n_out, n, a.data(), ab, sums.data(), n_tok, given.data(), n_out);
          EXPECT_NE(std::memcmp(got.data(), given.data(), static_cast<size_t>(n_out) * sizeof(float)), 0);
          sums[0] -= 1;
        }
        if (t == DType::Q4_0 || t == DType::Q4_1) {  // the 32-block types' one float order: the row dots' bits too
          EXPECT_EQ(std::memcmp(got.data(), rows.data(), got.size() * sizeof(float)), 0);
        }
      }
    }
}

TEST(Rows16, NegativeControlOneScaleByte) {
  SKIP_WITHOUT_ROWS16_LEVEL();
  const int64_t n = 512, n_out = 48;
  for (CpuIsa isa : rows16_levels())
    for (int64_t n_tok : {1, 4})  // one token: the fused decode loops at the 256-bit levels
      for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const cpu::Q8Kernels* k = &cpu::q8_kernels_for(isa);
        SCOPED_TRACE(std::string(k->name) + " " + std::string(dtype_name(t)) + " tokens " + std::to_string(n_tok));
        const cpu::Q8Ops& op = *k->get(t);
        Interleaved m(t, n, n_out, 9);
        size_t ab = 0;
        const std::vector<uint8_t> a = quantized(op.act, n, n_tok, 12, ab);
        std::vector<float> good(static_cast<size_t>(n_tok * n_out)), bad(good.size());
        op.rows16(m.rows16.data(), n_out, n, a.data(), ab, nullptr, n_tok, good.data(), n_out);
        // Group 1 (rows 16..31), super-block 0: row 16 + 5's scale of sub-block 2 (Q4_K, Q5_K: plane 2
        // holds its low 6 bits; Q6_K: scale 2), or block 0's fp16 factor d (Q4_0, Q4_1). Flip a low
        // bit so the value stays in range.
        const size_t group = 16 * m.view.row_bytes();
        if (t == DType::Q4_0 || t == DType::Q4_1) {
          m.rows16[group + (t == DType::Q4_0 ? offsetof(block_q4_0_x16, d) : offsetof(block_q4_1_x16, d)) + 2 * 5] ^= 1;
        } else {
          const size_t scales = t == DType::Q4_K   ? offsetof(block_q4_K_x16, scales)
                                : t == DType::Q5_K ? offsetof(block_q5_K_x16, scales)
                                                   : offsetof(block_q6_K_x16, scales);
          m.rows16[group + scales + 2 * 16 + 5] ^= 1;
        }
        op.rows16(m.rows16.data(), n_out, n, a.data(), ab, nullptr, n_tok, bad.data(), n_out);
        for (int64_t tok = 0; tok < n_tok; ++tok)
          for (int64_t r = 0; r < n_out; ++r) {
            const size_t i = static_cast<size_t>(tok * n_out + r);
            if (r == 21) {
              EXPECT_NE(good[i], bad[i]) << "token " << tok;
            } else {
              EXPECT_EQ(good[i], bad[i]) << "token " << tok << " row " << r;
            }
          }
      }
}

// The backend takes rows16 where it is set, at every batch size: bitwise the tiles from their
// batch size on, the row path's values to float rounding below it; a corrupted copy shows that
// it is the one read.
TEST(Rows16, BackendMatmulReadsTheInterleavedRows) {
  SKIP_WITHOUT_ROWS16_LEVEL();
  const int64_t n = 512, n_out = 64;
  for (CpuIsa isa : rows16_levels())
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      auto b = make_cpu_backend(2, isa, CpuBackendOptions{.q8_activations = true});
      const int64_t tile_from = cpu::q8_kernels_for(isa).get(t)->tile.min_tokens;
      Interleaved m(t, n, n_out, 5);
      for (int64_t n_tok : {1, 4, 8, 16, 64, 80}) {
        SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " " + std::string(dtype_name(t)) + " tokens " +
                     std::to_string(n_tok));
        const std::vector<float> x = randn(static_cast<size_t>(n * n_tok), 17);
        std::vector<float> plain(static_cast<size_t>(n_tok * n_out)), inter(plain.size());
        b->matmul(m.view, x.data(), plain.data(), n_tok);
        b->matmul(m.with_rows16(), x.data(), inter.data(), n_tok);
        EXPECT_LT(nmse(plain, inter), 1e-10);
        if (n_tok >= tile_from) {  // both from the tiles' float order
          EXPECT_EQ(std::memcmp(plain.data(), inter.data(), plain.size() * sizeof(float)), 0);
        }
        // Where a copy exists the rows are never read, at any batch size (their pages may have
        // gone back to the file): scrambled rows beside a good copy give the same bits.
        Interleaved scrambled(t, n, n_out, 5);
        for (size_t i = 0; i < scrambled.bytes.size(); i += 89) scrambled.bytes[i] ^= 0x5A;
        std::vector<float> same(plain.size());
        b->matmul(scrambled.with_rows16(), x.data(), same.data(), n_tok);
        EXPECT_EQ(std::memcmp(inter.data(), same.data(), inter.size() * sizeof(float)), 0);
        Interleaved broken(t, n, n_out, 5);
        for (size_t i = 0; i < broken.rows16.size(); i += 97) broken.rows16[i] ^= 0x11;
        std::vector<float> wrong(plain.size());
        b->matmul(broken.with_rows16(), x.data(), wrong.data(), n_tok);
        EXPECT_GT(nmse(plain, wrong), 1e-3);
      }
    }
}

TEST(Rows16, BackendMoeReadsTheInterleavedRows) {
  SKIP_WITHOUT_ROWS16_LEVEL();
  const int64_t E = 512, F = 256, n_exp = 4, n_tok = 3;
  for (CpuIsa isa : rows16_levels()) {
    SCOPED_TRACE(cpu_isa_name(isa));
    auto b = make_cpu_backend(2, isa, CpuBackendOptions{.q8_activations = true});
    std::vector<Interleaved> m;
    for (int j = 0; j < n_exp; ++j) {
      m.emplace_back(DType::Q4_K, E, F, 100 + 3 * j);
      m.emplace_back(DType::Q4_K, E, F, 101 + 3 * j);
      m.emplace_back(DType::Q4_K, F, E, 102 + 3 * j);
    }
    std::vector<TensorView> plain, inter;
    for (const Interleaved& x : m) plain.push_back(x.view), inter.push_back(x.with_rows16());
    const std::vector<float> x = randn(static_cast<size_t>(E * n_tok), 3);
    // One token: moe_ffn_token.
    auto one = [&](const std::vector<TensorView>& v) {
      std::vector<FfnExpert> ex;
      for (int j = 0; j < n_exp; ++j) ex.push_back({&v[3 * j], &v[3 * j + 1], &v[3 * j + 2], 0.25f + 0.1f * j});
      std::vector<float> y(static_cast<size_t>(E));
      b->moe_ffn_token(ex, x.data(), y.data(), E);
      return y;
    };
    // Three tokens, each expert taking one or more of them: moe_ffn_batch.
    const int64_t tok0[] = {0}, tok1[] = {0, 1, 2}, tok2[] = {1, 2}, tok3[] = {2};
    const float w0[] = {0.5f}, w1[] = {0.3f, 0.2f, 0.4f}, w2[] = {0.6f, 0.1f}, w3[] = {0.2f};
    auto batch = [&](const std::vector<TensorView>& v) {
      std::vector<FfnExpertRows> ex = {{&v[0], &v[1], &v[2], tok0, w0, 1, 0, 0},
                                       {&v[3], &v[4], &v[5], tok1, w1, 3, 0, 1},
                                       {&v[6], &v[7], &v[8], tok2, w2, 2, 0, 2},
                                       {&v[9], &v[10], &v[11], tok3, w3, 1, 0, 3}};
      std::vector<float> y(static_cast<size_t>(E * n_tok));
      b->moe_ffn_batch(ex, x.data(), y.data(), n_tok, E);
      return y;
    };
    EXPECT_LT(nmse(one(plain), one(inter)), 1e-10);
    EXPECT_LT(nmse(batch(plain), batch(inter)), 1e-10);
    for (Interleaved& e : m) e.rows16[64] ^= 0x5A;  // a qs word of row 0 of every matrix
    std::vector<TensorView> broken;
    for (const Interleaved& e : m) broken.push_back(e.with_rows16());
    EXPECT_GT(nmse(one(plain), one(broken)), 1e-6);
    EXPECT_GT(nmse(batch(plain), batch(broken)), 1e-6);
  }
}

}  // namespace
}  // namespace sluice::test_rows16
