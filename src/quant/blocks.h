// quant/blocks: the byte layout of every quantized block type, matching ggml's block
// structs (ggml-common.h) field for field, so a pointer into a GGUF tensor can be read as
// an array of these. Every kernel (ref, cpu, cuda) decodes through these definitions.
//
// Legend: "d" is an fp16 scale (uint16_t bits; decode with fp16_to_fp32), "qs" packed
// quants, "qh" high bits of 5-/6-bit quants, "m"/"dmin" fp16 offsets subtracted (or added)
// after scaling. QK_K = 256 elements per super-block for the K-quants.
#pragma once
#include <cstdint>

namespace sluice {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

// x[j] = d * (nibble_j - 8). qs[i] holds element i in its low nibble and element i+16 in
// its high nibble.
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];
};

// x[j] = d * nibble_j + m. Same nibble order as q4_0.
struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[QK4_1 / 2];
};

// 16 rows of Q4_0 / Q4_1 interleaved (quant/rows16.h): qs[w][r] the 4-byte word w of row r's
// nibbles (elements 4w..4w+3 low, 16+4w..16+4w+3 high), d[r] / m[r] its fp16 factors.
struct block_q4_0_x16 {
  uint32_t qs[QK4_0 / 8][16];
  uint16_t d[16];
};
static_assert(sizeof(block_q4_0_x16) == 16 * sizeof(block_q4_0), "an interleaved group holds 16 rows' bytes");
struct block_q4_1_x16 {
  uint32_t qs[QK4_1 / 8][16];
  uint16_t d[16];
  uint16_t m[16];
};
static_assert(sizeof(block_q4_1_x16) == 16 * sizeof(block_q4_1), "an interleaved group holds 16 rows' bytes");

// x[j] = d * (q_j - 16), q_j 5 bits: low 4 bits as in q4_0; bit 4 of element j is bit j
// of the little-endian uint32 qh (elements 0..15 low half, 16..31 high half).
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};

// x[j] = d * q_j + m with q_j as in q5_0 (unsigned).
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};

// x[j] = d * qs[j] + m, qs unsigned. Sluice's own (DType::Q8_A, not a ggml type): MLX's 6- and
// 8-bit affine groups (w = code * scale + bias) with d = scale, m = bias; d and m lead as in
// block_q4_1, so the kernels read both the same way.
struct block_q8_a {
  uint16_t d;
  uint16_t m;
  uint8_t qs[32];
};

// x[j] = d * qs[j].
struct block_q8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};

// 2-bit super-block: 16 sub-blocks of 16. scales[s] low nibble = scale, high nibble =
// min of sub-block s; x = d*scale*q - dmin*min, q in 0..3. Within each 128-element half,
// qs byte l holds elements l, l+32, l+64, l+96 at bit offsets 0, 2, 4, 6 (32 bytes per half).
struct block_q2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

// 3-bit super-block: 16 sub-blocks of 16 with signed 6-bit scales (stored +32) packed in
// 12 bytes; x = d*(scale-32)*(q - 4*!hbit), low 2 bits of q in qs laid out as q2_K, the
// third bit in hmask: element j's bit is bit (j / 32) of hmask[j % 32].
struct block_q3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};

// 4-bit super-block: 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min packed in
// 12 bytes (see get_scale_min_k4); x = d*scale*q - dmin*min. Each 64-element chunk uses 32
// qs bytes: low nibbles are elements 0..31, high nibbles 32..63.
struct block_q4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};

// 16 rows of Q4_K interleaved, super-block by super-block (TensorView::rows16, quant/rows16.h):
// qs[w][r] is the 4-byte word w of row r's qs, scales[k][r] byte k of row r's packed scales,
// d/dmin[r] row r's fp16 factors. The same bytes as 16 block_q4_K, reordered so that one
// 64-byte vector holds 4 inputs of 16 rows (a vpdpbusd operand) and the scales and factors of
// 16 rows load as one vector each.
struct block_q4_K_x16 {
  uint32_t qs[QK_K / 8][16];
  uint8_t scales[K_SCALE_SIZE][16];
  uint16_t d[16];
  uint16_t dmin[16];
};
static_assert(sizeof(block_q4_K_x16) == 16 * sizeof(block_q4_K), "an interleaved group holds 16 rows' bytes");

// 5-bit super-block: q4_K plus a fifth bit per element. Element 64*c + j (j < 32) takes
// its high bit from bit 2c of qh[j], element 64*c + 32 + j from bit 2c+1 of qh[j].
struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};

// 16 rows of Q5_K interleaved, as block_q4_K_x16 plus qh[w][r], the 4-byte word w of row r's qh.
struct block_q5_K_x16 {
  uint32_t qs[QK_K / 8][16];
  uint32_t qh[QK_K / 32][16];
  uint8_t scales[K_SCALE_SIZE][16];
  uint16_t d[16];
  uint16_t dmin[16];
};
static_assert(sizeof(block_q5_K_x16) == 16 * sizeof(block_q5_K), "an interleaved group holds 16 rows' bytes");

// 6-bit super-block: 16 sub-blocks of 16 with signed 8-bit scales; x = d*scale*(q-32).
// Per 128-element half: ql[0..63] low nibbles hold elements 0..63 and high nibbles 64..127
// (ql[l] -> l and l+64, ql[l+32] -> l+32 and l+96); qh[l] holds the two top bits of
// elements l, l+32, l+64, l+96 at bit offsets 0, 2, 4, 6.
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};

// 16 rows of Q6_K interleaved, with the codes regrouped so the int8 kernels unpack them in fewer
// operations. Element 128h + 32p + 4g + k of a super-block (half h, group p = 0..3, step g = 0..7,
// byte k = 0..3) has the 6-bit code v_p; q[24h + 3g + j][r] is row r's 4-byte word whose byte k
// holds v_j in bits 0-5 (j = 0, 1, 2) and bits 2j, 2j + 1 of v_3 in bits 6-7. Groups 0-2 are
// then one vpand each and group 3 three shifts, where ggml's ql/qh need five shifts for four
// code vectors: a vector shift issues at half the rate of the other operations on Zen 1, and the
// Q6_K decode loop was bound by them. scales[k][r]: row r's sub-block scales, d[r] its fp16 factor.
struct block_q6_K_x16 {
  uint32_t q[QK_K / 16 * 3][16];  // 2 halves x 8 steps x 3 words
  int8_t scales[QK_K / 16][16];
  uint16_t d[16];
};
static_assert(sizeof(block_q6_K_x16) == 16 * sizeof(block_q6_K), "an interleaved group holds 16 rows' bytes");

// 8-bit super-block used for activations in dot products: fp32 scale, x = d*qs,
// bsums[g] = sum of qs over group g of 16 (lets q2_K..q5_K dots fold their mins in).
struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};

// The 16 levels of the non-linear 4-bit types (ggml's kvalues_iq4nl): denser near zero,
// where trained weights are.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// x[j] = d * kIq4nlValues[nibble_j], nibbles ordered as in q4_0.
struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];
};

// 8 sub-blocks of 32 with 6-bit scales ls (stored +32): x = d * (ls - 32) * kIq4nlValues[nibble];
// ls of sub-block s: low 4 bits from nibble s%2 of scales_l[s/2], high 2 bits from bits
// 2s..2s+1 of scales_h (iq4_xs_scale). Sub-block s's nibbles are qs[16s..16s+16), ordered as q4_0.
struct block_iq4_xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
};
inline int iq4_xs_scale(const block_iq4_xs& b, int s) {
  return ((b.scales_l[s / 2] >> 4 * (s % 2)) & 0xF) | (((b.scales_h >> 2 * s) & 3) << 4);
}

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q2_K) == 84);
static_assert(sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144);
static_assert(sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_q8_K) == 292);
static_assert(sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_iq4_xs) == 136);

// Unpack the 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block.
// Bytes 0..3: scales 0..3 in bits 0..5, top 2 bits of scales 4..7 in bits 6..7.
// Bytes 4..7: mins 0..3 in bits 0..5, top 2 bits of mins 4..7 in bits 6..7.
// Bytes 8..11: low 4 bits of scales 4..7 (low nibble) and mins 4..7 (high nibble).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace sluice
