// tests/kernels/test_q8_matmul: the cpu backend's int8 path (CpuBackendOptions::
// q8_activations: activations quantized once per token to Q8_K / Q8_0, int8 dot products)
// against the ref oracle, two ways:
//   tight: ref fed the SAME quantized activations (quantize_row then dequantize_row of x),
//          so both compute Σ w·x' for identical w and x' and differ only by float rounding;
//   loose: ref fed the float activations, so the difference is the activation rounding.
// Plus the scalar (generic) twin against the SIMD levels, negative controls, and bitwise
// determinism across thread counts and batch sizes. NMSE as in test_backend_parity.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "backends/ref/ref_backend.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/kernel_test_util.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice::test_q8_matmul {
namespace {

using test::available_isas;
using test::nmse;
using test::randn;

// ---- tolerances ------------------------------------------------------------------------
// Tight (same quantized activations): ref decodes w to float (d·sc rounded to float, then
// ·q, minus dmin·m) and accumulates in float64; the int8 path forms exact integer sums and
// applies the scales once per (super-)block in float32. The difference is a few float32
// roundings per block term, relative ~1e-7 per term, NMSE ~1e-14; observed ≤ 1.1e-13 over
// all five types, every ISA level, n_out = 1 included (a single dot: its cancellation sets
// the NMSE, as for kTolMatmul in test_backend_parity). 1e-9 keeps headroom and is 4 orders below the activation-rounding error the loose check sees, so the
// tight check would notice a path that silently used other activations.
constexpr double kTolQ8Tight = 1e-9;
// Loose (float activations): x rounded to 8 bits per (super-)block scale d = amax/127 adds
// uniform noise of variance d²/12 per element; for Gaussian x the amax of a 256-block is
// ~2.9σ (Q8_K), of a 32-block ~2.1σ (Q8_0), so NMSE ≈ (amax/127σ)²/12 ≈ 4e-5 (Q8_K) and
// 2e-5 (Q8_0), independent of the weight type. Observed ≤ 7.5e-5. 3e-4 leaves room for the
// spread of amax over few blocks; a wrong scale or a dropped sub-block gives ≥ 1e-2.
constexpr double kTolQ8Loose = 3e-4;
// The super-block types (Q4_K, Q5_K, Q6_K) across levels and between their tiles and row
// dots: identical integer sums, float terms added in another order (8 or 16 lanes vs one
// chain): observed ≤ 1e-13. The 32-block types give the same bits on every path.
constexpr double kTolQ8Twin = 1e-11;
bool same_bits_everywhere(DType t) { return dtype_traits(t).block_size == 32; }
// Bitwise for the 32-block types, within kTolQ8Twin for the others.
void expect_same_path_result(DType t, const std::vector<float>& want, const std::vector<float>& got,
                             const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  if (same_bits_everywhere(t))
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << dtype_name(t) << " " << what;
  else
    EXPECT_LE(nmse(want, got), kTolQ8Twin) << dtype_name(t) << " " << what;
}


std::unique_ptr<Backend> q8_backend(int threads, CpuIsa isa) {
  return make_cpu_backend(threads, isa, CpuBackendOptions{.q8_activations = true, .q8_legacy_types = true});
}

using Weights = test::RandomMatrix;

std::vector<float> matmul(Backend& b, const TensorView& w, const std::vector<float>& x, int64_t T) {
  std::vector<float> y(static_cast<size_t>(T * w.ne[1]), NAN);
  b.matmul(w, x.data(), y.data(), T);
  return y;
}

// The activation type the int8 path uses for weight type t.
DType act_type(DType t) { return dtype_traits(t).block_size == 256 ? DType::Q8_K : DType::Q8_0; }

// x with each token row quantized to `act` and decoded back: what the int8 path multiplies.
std::vector<float> requantize(const std::vector<float>& x, int64_t n_in, DType act) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> buf(dtype_row_bytes(act, n_in));
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n_in); ++r) {
    quantize_row(act, x.data() + r * n_in, buf.data(), n_in);
    dequantize_row(act, buf.data(), out.data() + r * n_in, n_in);
  }
  return out;
}

const DType kQ8Types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_A,   DType::Q8_0,  DType::Q4_K,
                          DType::Q5_K, DType::Q6_K, DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS};

TEST(Q8Matmul, AgainstRefTightAndLoose) {
  auto ref = make_ref_backend();
  double worst_tight = 0, worst_loose = 0;
  for (DType t : kQ8Types) {
    const int64_t bs = dtype_traits(t).block_size;
    struct Shape {
      int64_t n_in, n_out;
    };
    std::vector<Shape> shapes = bs == 32 ? std::vector<Shape>{{32, 1}, {96, 33}, {1024, 70}}
                                         : std::vector<Shape>{{256, 1}, {512, 40}, {2048, 67}};
    for (const Shape& s : shapes) {
      Weights w(t, s.n_in, s.n_out, 11 + static_cast<uint32_t>(s.n_in + s.n_out));
      for (int64_t T : {1, 3, 70}) {  // 70 > the 64-token tile
        const auto x = randn(static_cast<size_t>(T * s.n_in), 5 + static_cast<uint32_t>(T));
        const auto y_loose = matmul(*ref, w.view, x, T);
        const auto y_tight = matmul(*ref, w.view, requantize(x, s.n_in, act_type(t)), T);
        for (CpuIsa isa : available_isas()) {
          auto cpu = q8_backend(2, isa);
          const auto y = matmul(*cpu, w.view, x, T);
          const double et = nmse(y_tight, y), el = nmse(y_loose, y);
          worst_tight = std::max(worst_tight, et);
          worst_loose = std::max(worst_loose, el);
          EXPECT_LE(et, kTolQ8Tight) << dtype_name(t) << " " << cpu_isa_name(isa) << " in=" << s.n_in << " T=" << T;
          EXPECT_LE(el, kTolQ8Loose) << dtype_name(t) << " " << cpu_isa_name(isa) << " in=" << s.n_in << " T=" << T;
        }
      }
    }
  }
  std::printf("[  NMSE    ] q8 matmul tight max %.3g, loose max %.3g\n", worst_tight, worst_loose);
}

// MLX affine weights read in place (codes, scales and biases in their own arrays): every code
// width, group size and scale type, row kernel and (130 tokens) the block tiles each unit is
// repacked for, against ref on the Q8_0-rounded activations (tight) and on
// the float ones (loose); every level bitwise the scalar twin (kernels_q8_affine_impl.h walks the
// same 8 lanes). 192 inputs leave half a 128-input group pair at the end of the 4-bit layout.
// Negative control: the scales read as the biases and back.
TEST(Q8Matmul, AffineInPlaceAgainstRefAndLevelsBitwise) {
  auto ref = make_ref_backend();
  auto gen = q8_backend(1, CpuIsa::generic);
  double worst_tight = 0, worst_loose = 0;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      for (DType st : {DType::BF16, DType::F16, DType::F32}) {
        const int64_t n_in = group == 128 ? 384 : 192, n_out = 37;
        const DType t = dtype_affine_of_bits(bits);
        const std::string what = std::string(dtype_name(t)) + " g" + std::to_string(group) + " " +
                                 std::string(dtype_name(st));
        Weights w(t, n_in, n_out, static_cast<uint32_t>(bits * 100 + group), 1.0f, group, st);
        for (int64_t T : {1, 3, 70, 130}) {  // 130: prefill through the block tiles (matmul_affine_tiles)
          const auto x = randn(static_cast<size_t>(T * n_in), 9 + static_cast<uint32_t>(T));
          const auto y_loose = matmul(*ref, w.view, x, T);
          const auto y_tight = matmul(*ref, w.view, requantize(x, n_in, DType::Q8_0), T);
          const auto yg = matmul(*gen, w.view, x, T);
          for (CpuIsa isa : available_isas()) {
            auto cpu = q8_backend(2, isa);
            const auto y = matmul(*cpu, w.view, x, T);
            const double et = nmse(y_tight, y), el = nmse(y_loose, y);
            worst_tight = std::max(worst_tight, et);
            worst_loose = std::max(worst_loose, el);
            EXPECT_LE(et, kTolQ8Tight) << what << " " << cpu_isa_name(isa) << " T=" << T;
            EXPECT_LE(el, kTolQ8Loose) << what << " " << cpu_isa_name(isa) << " T=" << T;
            EXPECT_EQ(0, std::memcmp(y.data(), yg.data(), y.size() * sizeof(float)))
                << what << " " << cpu_isa_name(isa);
          }
          if (T == 3) {
            TensorView swapped = w.view;
            std::swap(swapped.affine.scales, swapped.affine.biases);
            EXPECT_GT(nmse(y_tight, matmul(*gen, swapped, x, T)), 1e-2) << what << ": negative control";
          }
        }
      }
  std::printf("[  NMSE    ] affine in place: tight max %.3g, loose max %.3g\n", worst_tight, worst_loose);
}

// An affine matrix with one bias that is no fp16 value (bf16 65536, past fp16's range): its
// 16-row unit cannot be repacked for the block tiles and is computed in float (float_rows), the
// other units by the tiles; the whole product still matches ref.
TEST(Q8Matmul, AffineTilesFallBackToFloatForANonFp16Group) {
  auto ref = make_ref_backend();
  Weights w(DType::MLX_A4, 256, 40, 5, 1.0f, 64, DType::BF16);
  const size_t gb = w.view.affine.group_row_bytes;
  const uint16_t big = 0x4780;                                    // bf16 65536
  std::memcpy(w.planes.data() + 40 * gb + 17 * gb + 2, &big, 2);  // row 17's second bias
  const int64_t T = 130;
  const auto x = randn(static_cast<size_t>(T * 256), 3);
  const auto want = matmul(*ref, w.view, requantize(x, 256, DType::Q8_0), T);
  for (CpuIsa isa : available_isas()) {
    auto cpu = q8_backend(2, isa);
    EXPECT_LE(nmse(want, matmul(*cpu, w.view, x, T)), kTolQ8Loose) << cpu_isa_name(isa);
  }
}

// The scalar generic level is the twin of the SIMD levels: same integer sums; for the 32-block
// types also the same float operations in the same order (kernels_q8_impl.h), so the same
// bits. 1056 inputs = 33 blocks of 32 leaves a partial group of four.
TEST(Q8Matmul, ScalarTwinMatchesSimd) {
  auto gen = q8_backend(1, CpuIsa::generic);
  for (DType t : kQ8Types) {
    const int64_t n_in = dtype_traits(t).block_size == 32 ? 1056 : 1024;
    Weights w(t, n_in, 45, 3);
    const auto x = randn(static_cast<size_t>(3 * n_in), 4);
    const auto yg = matmul(*gen, w.view, x, 3);
    for (CpuIsa isa : available_isas()) {
      auto cpu = q8_backend(2, isa);
      expect_same_path_result(t, yg, matmul(*cpu, w.view, x, 3), std::string(cpu_isa_name(isa)));
    }
  }
}

// The 32-block types' float order, written out here from the raw blocks for Q8_0: per block
// i the exact Σ q·a into lane i mod 4 by fma(s, d·d_a, L), then (L0 + L2) + (L1 + L3). Every
// level equals it bitwise; the same sums added in one chain (a plausible other order) differ
// from it in some outputs, so the comparison sees the order.
TEST(Q8Matmul, BlockTypesFollowTheDocumentedFloatOrder) {
  const int64_t n_in = 1056, n_out = 64, nb = n_in / 32;
  Weights w(DType::Q8_0, n_in, n_out, 77);
  const auto x = randn(static_cast<size_t>(n_in), 78);
  std::vector<block_q8_0> a(static_cast<size_t>(nb));
  quantize_row(DType::Q8_0, x.data(), a.data(), n_in);
  std::vector<float> lanes(static_cast<size_t>(n_out)), chain(static_cast<size_t>(n_out));
  for (int64_t r = 0; r < n_out; ++r) {
    const auto* wb = reinterpret_cast<const block_q8_0*>(w.bytes.data() + r * dtype_row_bytes(DType::Q8_0, n_in));
    float L[4] = {0, 0, 0, 0}, c = 0;
    for (int64_t i = 0; i < nb; ++i) {
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += wb[i].qs[j] * a[i].qs[j];
      const float dd = fp16_to_fp32(wb[i].d) * fp16_to_fp32(a[i].d);
      L[i % 4] = std::fma(static_cast<float>(s), dd, L[i % 4]);
      c = std::fma(static_cast<float>(s), dd, c);
    }
    lanes[r] = (L[0] + L[2]) + (L[1] + L[3]);
    chain[r] = c;
  }
  EXPECT_NE(0, std::memcmp(lanes.data(), chain.data(), lanes.size() * 4)) << "the order is not observable here";
  for (CpuIsa isa : available_isas()) {
    auto cpu = q8_backend(2, isa);
    EXPECT_EQ(0, std::memcmp(lanes.data(), matmul(*cpu, w.view, x, 1).data(), lanes.size() * 4)) << cpu_isa_name(isa);
  }
}

// Every ISA level, and at avx512 also with the AMX tiles where this CPU has them.
std::vector<std::pair<CpuIsa, bool>> isa_tile_levels() {
  std::vector<std::pair<CpuIsa, bool>> v;
  for (CpuIsa isa : available_isas()) {
    v.emplace_back(isa, false);
    if (isa == CpuIsa::avx512 && cpu::q8_kernels_amx()) v.emplace_back(isa, true);
  }
  return v;
}

// The prefill tiles (kernels.h, Q8TileOps): the scalar twin of the packed tile equals the
// vector code bitwise (same exact integer sums, same fused multiply-adds); the row path equals
// the tiles bitwise for the 32-block types and to float rounding for the others; partial tiles (rows not a multiple of 16) and token counts
// that are not a multiple of the 8-token pass are covered.
TEST(Q8Matmul, TilesMatchRowPathAndScalarTwin) {
  auto gen = make_cpu_backend(
      1, CpuIsa::generic,
      CpuBackendOptions{.q8_activations = true, .q8_tiles = true, .q8_tile_min_tokens = 1, .q8_legacy_types = true});
  int tiled_types = 0;
  std::vector<std::string> own_layouts;
  for (DType t : kQ8Types) {
    const cpu::Q8Ops* op = cpu::q8_kernels_generic().get(t);
    if (!op || !op->tile.gemm) continue;
    ++tiled_types;
    for (auto [n_in, n_out, T] : {std::tuple<int64_t, int64_t, int64_t>{256, 16, 2}, {512, 37, 13}, {1024, 70, 21}}) {
      Weights w(t, n_in, n_out, 31 + static_cast<uint32_t>(n_out));
      const auto x = randn(static_cast<size_t>(T * n_in), 32 + static_cast<uint32_t>(T));
      const auto yg = matmul(*gen, w.view, x, T);
      for (auto [isa, amx] : isa_tile_levels()) {
        const std::string level = std::string(cpu_isa_name(isa)) + (amx ? "+amx" : "");
        auto tiles = make_cpu_backend(2, isa,
                                      CpuBackendOptions{.q8_activations = true,
                                                        .q8_tiles = true,
                                                        .q8_tile_min_tokens = 1,
                                                        .q8_legacy_types = true,
                                                        .q8_amx = amx});
        auto rows =
            make_cpu_backend(2, isa,
                             CpuBackendOptions{.q8_activations = true, .q8_tiles = false, .q8_legacy_types = true});
        const auto yt = matmul(*tiles, w.view, x, T);
        expect_same_path_result(t, matmul(*rows, w.view, x, T), yt,
                                level + " tiles vs rows, rows=" + std::to_string(n_out) + " T=" + std::to_string(T));
        const cpu::Q8Ops* lop = (amx ? cpu::q8_kernels_amx() : &cpu::q8_kernels_for(isa))->get(t);
        if (lop && lop->tile.any()) {  // this level has tiles: bitwise the scalar twin
          EXPECT_EQ(0, std::memcmp(yg.data(), yt.data(), yt.size() * 4))
              << dtype_name(t) << " " << level << " rows=" << n_out << " T=" << T;
          if (!lop->tile.pack) continue;  // AMX: packs as it goes; only the results compare
          const size_t tb = op->tile.bytes(n_in), rb = dtype_row_bytes(t, n_in);
          if (lop->tile.bytes(n_in) != tb) {  // a layout of its own (Q8_0 without VNNI: the legacy tile)
            own_layouts.push_back(std::string(dtype_name(t)) + " " + level);
            continue;
          }
          for (int64_t r0 = 0; r0 < n_out; r0 += cpu::kQ8TileRows) {
            const int64_t nr = std::min(cpu::kQ8TileRows, n_out - r0);
            std::vector<uint8_t> want(tb, 0xAA), got(tb, 0x55);
            op->tile.pack(w.bytes.data() + r0 * rb, rb, nr, n_in, want.data());
            lop->tile.pack(w.bytes.data() + r0 * rb, rb, nr, n_in, got.data());
            EXPECT_EQ(want, got) << dtype_name(t) << " " << cpu_isa_name(isa) << " pack of rows " << r0 << "+" << nr;
          }
        }
      }
    }
  }
  EXPECT_EQ(tiled_types, 13)
      << "Q4_0, Q4_1, Q5_0, Q5_1, Q8_A, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS have tiles";
  // Only Q8_0 without VNNI packs a layout other than the twin's (its results still compared).
  for (const std::string& s : own_layouts) EXPECT_EQ(s.rfind("q8_0 ", 0), 0u) << s;
  // Without VNNI (kernels_q8_tiles_avx2.h) every type has tiles (the 8-bit codes of Q8_A,
  // IQ4_NL and Q8_0 by the sign trick), so the loop above compared them with the twin.
  if (cpu_isa_available(CpuIsa::avx2)) {
    int avx2_tiled = 0;
    for (DType t : kQ8Types)
      if (const cpu::Q8Ops* op = cpu::q8_kernels_avx2().get(t); op && op->tile.gemm) ++avx2_tiled;
    EXPECT_EQ(avx2_tiled, 13)
        << "avx2: Q4_0, Q4_1, Q5_0, Q5_1, Q8_A, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS have tiles";
  }
  // With VNNI every type has tiles (Q3_K's through the Q6_K tile).
  if (cpu_isa_available(CpuIsa::avx512) && std::string_view(cpu::q8_kernels_avx512().name) == "avx512-vnni") {
    int vnni_tiled = 0;
    for (DType t : kQ8Types)
      if (const cpu::Q8Ops* op = cpu::q8_kernels_avx512().get(t); op && op->tile.gemm) ++vnni_tiled;
    EXPECT_EQ(vnni_tiled, 13)
        << "avx512-vnni: Q4_0, Q4_1, Q5_0, Q5_1, Q8_A, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K "
           "and IQ4_XS have tiles";
  }
}

// The AMX-INT8 tiles (kernels_amx.cpp) against the scalar twin, bitwise, at token counts that
// take every tile configuration (one half, two halves, partial halves, several 32-token groups)
// and a partial row tile; negative control: one flipped weight byte in the packed planes
// changes the results. Skips where this CPU or kernel gives no AMX.
TEST(Q8Matmul, AmxTilesAreBitwiseTheScalarTwin) {
  const cpu::Q8Kernels* amx = cpu::q8_kernels_amx();
  if (!amx) GTEST_SKIP() << "no AMX-INT8 here (CPU, VBMI or kernel permission): the AMX tiles are not tested";
  const CpuBackendOptions tiles{.q8_activations = true, .q8_tiles = true, .q8_tile_min_tokens = 1};
  auto gen = make_cpu_backend(1, CpuIsa::generic, tiles);
  auto be = make_cpu_backend(2, CpuIsa::avx512, tiles);
  ASSERT_STREQ(cpu_backend_q8_level(*be), "avx512-amx");
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const cpu::Q8Ops* op = amx->get(t);
    ASSERT_TRUE(op && op->tile.gemm_rows && op->tile.act_pack) << dtype_name(t);
    // One super-block (nothing to pipeline), two, and five; up to 64 tokens the fused pass,
    // above it the planes packed first.
    for (int64_t n : {256, 1280}) {
      Weights wn(t, n, 21, 73);
      for (int64_t T : {9, 40, 65, 97}) {
        const auto x = randn(static_cast<size_t>(T * n), 74 + static_cast<uint32_t>(T));
        const auto want = matmul(*gen, wn.view, x, T), got = matmul(*be, wn.view, x, T);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * 4)) << dtype_name(t) << " n=" << n << " T=" << T;
      }
    }
    const int64_t n_in = 512, n_out = 37;
    Weights w(t, n_in, n_out, 71);
    for (int64_t T : {1, 15, 16, 17, 31, 32, 33, 64, 70}) {
      const auto x = randn(static_cast<size_t>(T * n_in), 72 + static_cast<uint32_t>(T));
      const auto want = matmul(*gen, w.view, x, T), got = matmul(*be, w.view, x, T);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * 4)) << dtype_name(t) << " T=" << T;
    }
    // Negative control on the kernel itself: 16 rows, 5 tokens, one weight byte changed.
    const size_t rb = dtype_row_bytes(t, n_in), ab = dtype_row_bytes(DType::Q8_K, n_in);
    std::vector<uint8_t> act(5 * ab), abuf(op->tile.act_bytes(n_in, 5) + 64);
    const auto x = randn(static_cast<size_t>(5 * n_in), 99);
    for (int k = 0; k < 5; ++k) quantize_row(DType::Q8_K, x.data() + k * n_in, act.data() + k * ab, n_in);
    uint8_t* a = abuf.data() + (64 - reinterpret_cast<uintptr_t>(abuf.data()) % 64) % 64;
    op->tile.act_pack(act.data(), ab, n_in, 5, a);
    std::vector<float> y0(5 * 16), y1(5 * 16);
    std::vector<uint8_t> wb = w.bytes;
    op->tile.gemm_rows(wb.data(), rb, 16, n_in, a, 5, y0.data(), 16);
    wb[3 * rb + 100] ^= 0x11;  // row 3, inside its first block's quants
    op->tile.gemm_rows(wb.data(), rb, 16, n_in, a, 5, y1.data(), 16);
    EXPECT_NE(0, std::memcmp(y0.data(), y1.data(), y0.size() * 4)) << dtype_name(t) << ": a changed weight went unseen";
  }
}

// The vector Q8_K quantizers write quantize_row's bytes: Gaussian rows, rows whose largest
// |x| appears with both signs (the first one sets the sign of d), exact ties at .5 steps,
// all-zero blocks and single-spike blocks.
TEST(Q8Matmul, VectorQuantizerMatchesQuantizeRow) {
  constexpr int64_t n = 4 * 256;
  std::vector<std::vector<float>> rows;
  rows.push_back(randn(n, 41));
  auto both = randn(n, 42);
  both[5] = 9.0f, both[3] = -9.0f, both[256 + 7] = 4.0f, both[256 + 200] = -4.0f;
  rows.push_back(both);
  std::vector<float> ties(n);
  for (int64_t i = 0; i < n; ++i) ties[static_cast<size_t>(i)] = static_cast<float>(i % 255 - 127) * 0.5f;
  rows.push_back(ties);
  std::vector<float> sparse(n, 0.0f);
  sparse[256 + 17] = -3.0f;  // block 0 all zero, block 1 one spike
  rows.push_back(sparse);
  std::vector<float> halves(n);  // x·id lands on k + 0.5 and just below/above it
  for (int64_t i = 0; i < n; ++i)
    halves[static_cast<size_t>(i)] = (i % 32 == 0 ? 127.0f : static_cast<float>(i % 64) - 31.5f) * (i % 3 == 0 ? 1.0f
                                                                                                    : i % 3 == 1
                                                                                                        ? 1.0000001f
                                                                                                        : 0.9999999f);
  rows.push_back(halves);
  std::vector<float> tiny = randn(n, 43);  // d below fp16's normal range: a subnormal scale
  for (float& v : tiny) v *= 1e-6f;
  rows.push_back(tiny);
  int levels = 0;
  for (CpuIsa isa : available_isas()) {
    const cpu::Q8Kernels& kern = cpu::q8_kernels_for(isa);
    for (auto [act, q] : {std::pair{DType::Q8_K, kern.quantize_q8_K}, std::pair{DType::Q8_0, kern.quantize_q8_0}}) {
      if (!q) continue;
      ++levels;
      for (const auto& x : rows) {
        std::vector<uint8_t> want(dtype_row_bytes(act, n), 0xAA), got(want.size(), 0x55);
        quantize_row(act, x.data(), want.data(), n);
        q(x.data(), got.data(), n);
        EXPECT_EQ(want, got) << cpu_isa_name(isa) << " " << dtype_name(act);
      }
    }
  }
  if (cpu_isa_available(CpuIsa::avx512)) {
    EXPECT_GE(levels, 2) << "the avx512 levels have both vector quantizers";
  }
  // Negative control: rounding ties to even instead of away from zero changes bytes here.
  std::vector<float> ties2(32);
  for (int j = 0; j < 32; ++j) ties2[static_cast<size_t>(j)] = j == 0 ? 127.0f : static_cast<float>(j) - 15.5f;
  block_q8_0 b{};
  quantize_row(DType::Q8_0, ties2.data(), &b, 32);
  int differ = 0;
  for (int j = 1; j < 32; ++j) differ += b.qs[j] != static_cast<int8_t>(std::nearbyint(ties2[static_cast<size_t>(j)]));
  EXPECT_GT(differ, 0) << "the ties rows would not see a ties-to-even quantizer";
}

// Negative controls: the tight check must see the activation rounding (so it would catch a
// path that quantized differently), and the loose check must see one wrong sub-block scale.
TEST(Q8Matmul, NegativeControls) {
  auto ref = make_ref_backend();
  Weights w(DType::Q4_K, 1024, 64, 9);
  const auto x = randn(2 * 1024, 10);
  const auto y_float = matmul(*ref, w.view, x, 2);
  for (CpuIsa isa : available_isas()) {
    auto cpu = q8_backend(2, isa);
    EXPECT_GT(nmse(y_float, matmul(*cpu, w.view, x, 2)), 10 * kTolQ8Tight) << cpu_isa_name(isa);
  }
  // Row 5, super-block 1: bump the 6-bit scale of sub-block 0 (scales[0] low 6 bits). Two
  // tokens take the row path, sixteen the tiles.
  const auto x16 = randn(16 * 1024, 12);
  const auto y16_float = matmul(*ref, w.view, x16, 16);
  for (CpuIsa isa : available_isas()) {
    auto cpu = q8_backend(2, isa);
    EXPECT_LE(nmse(y16_float, matmul(*cpu, w.view, x16, 16)), kTolQ8Loose) << cpu_isa_name(isa);
  }
  auto* b = reinterpret_cast<block_q4_K*>(w.bytes.data() + 5 * dtype_row_bytes(DType::Q4_K, 1024)) + 1;
  b->scales[0] = static_cast<uint8_t>((b->scales[0] & 0xC0) | (((b->scales[0] & 63) + 20) & 63));
  for (CpuIsa isa : available_isas()) {
    auto cpu = q8_backend(2, isa);
    EXPECT_GT(nmse(y_float, matmul(*cpu, w.view, x, 2)), kTolQ8Loose) << cpu_isa_name(isa);
    EXPECT_GT(nmse(y16_float, matmul(*cpu, w.view, x16, 16)), kTolQ8Loose) << cpu_isa_name(isa) << " tiles";
  }
}

// Bitwise: 1, 2 and 3 threads agree, and on the row path (tiles off) a token's output does
// not depend on its batch. With tiles (a batch of ≥ Q8TileOps::min_tokens tokens) against the same
// token alone (the row path): bitwise for the 32-block types, to float rounding for the others.
TEST(Q8Matmul, DeterministicAcrossThreadsAndBatch) {
  // Each type's weights and the input made once, not per level (quantizing them was most of the
  // sanitizer twin's time here).
  const int64_t T = 67;
  const auto x = randn(static_cast<size_t>(T * 512), 22);
  std::vector<std::unique_ptr<Weights>> ws;
  for (DType t : kQ8Types) ws.push_back(std::make_unique<Weights>(t, 512, 301, 21));
  for (CpuIsa isa : available_isas()) {
    auto tiled = q8_backend(2, isa);
    auto q8_rows = [&](int threads) {
      return make_cpu_backend(threads, isa, CpuBackendOptions{.q8_activations = true, .q8_tiles = false});
    };
    auto c1 = q8_rows(1), c2 = q8_rows(2), c3 = q8_rows(3);
    for (const auto& w : ws) {
      const DType t = w->view.type;
      const auto yt = matmul(*tiled, w->view, x, T);
      EXPECT_EQ(0, std::memcmp(yt.data(), matmul(*q8_backend(1, isa), w->view, x, T).data(), yt.size() * 4))
          << dtype_name(t);
      EXPECT_EQ(0, std::memcmp(yt.data(), matmul(*q8_backend(3, isa), w->view, x, T).data(), yt.size() * 4))
          << dtype_name(t);
      std::vector<float> x0(x.begin(), x.begin() + 512);
      expect_same_path_result(t, std::vector<float>(yt.begin(), yt.begin() + 301), matmul(*tiled, w->view, x0, 1),
                              "a batch's first token vs the same token alone");
    }
    for (const auto& w : ws) {
      const DType t = w->view.type;
      const auto y1 = matmul(*c1, w->view, x, T);
      EXPECT_EQ(0, std::memcmp(y1.data(), matmul(*c2, w->view, x, T).data(), y1.size() * 4)) << dtype_name(t);
      EXPECT_EQ(0, std::memcmp(y1.data(), matmul(*c3, w->view, x, T).data(), y1.size() * 4)) << dtype_name(t);
      for (int64_t tok : {0, 66}) {
        std::vector<float> xt(x.begin() + tok * 512, x.begin() + (tok + 1) * 512);
        const auto ys = matmul(*c2, w->view, xt, 1);
        EXPECT_EQ(0, std::memcmp(ys.data(), y1.data() + tok * 301, 301 * 4)) << dtype_name(t) << " tok=" << tok;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::test_q8_matmul
