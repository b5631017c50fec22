// core/tensor: a non-owning view of a weight tensor (usually inside the mmap of a GGUF).
// Legend: ne[0] is the contiguous dimension (ggml order). A matrix with ne = [in, out] is
// stored row-major as [out][in] and computes y = W·x; stacked experts ne = [in, out, n_expert]
// keep each expert's matrix contiguous.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace sluice {

struct LoraTerm;

// The per-group arrays of an MLX affine tensor (DType::MLX_A*): row r's n / group_size scales
// and biases at scales / biases + r · group_row_bytes, of scale_type (F16, BF16 or F32), where
// the file keeps them; w = code · scale + bias (quant/mlx_affine.h).
struct AffinePlanes {
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  size_t group_row_bytes = 0;
  int group_size = 0;
  DType scale_type = DType::F16;
};

struct TensorView {
  std::string name;
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  const void* data = nullptr;  // first byte of the tensor, rows contiguous
  size_t nbytes = 0;
  // LoRA adapters on this weight, applied at run time by Backend::matmul (format/lora.h); null:
  // none. Owned by the file that holds the tensor.
  const std::vector<LoraTerm>* lora = nullptr;
  // Stacked experts ([in, out, n_expert]) with LoRA adapters: one term list per expert, handed
  // to expert e's view by slice2d as its `lora`. Null: none.
  const std::vector<std::vector<LoraTerm>>* expert_lora = nullptr;
  // The same rows 16 at a time interleaved for the int8 kernels (quant/rows16.h), or null. Row
  // r0 (a multiple of 16) starts r0·row_bytes() in, as in `data`; only a backend that reads
  // the layout uses it (the cpu backend's Q8Ops::rows16), every other reader keeps `data`.
  const void* rows16 = nullptr;
  // The rows were interleaved in place (--repack on a folder's converted weights, whose rows no
  // file keeps): data == rows16 holds only the 16-row layout, and row() refuses to read it, so
  // a reader that wants rows fails by name instead of reading another layout's bytes.
  bool rows_interleaved = false;
  // An MLX affine tensor's scales and biases (dtype_is_affine(type)); unused otherwise.
  AffinePlanes affine{};

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes of one row's codes or blocks (the stride of `data`).
  size_t row_bytes() const { return dtype_row_bytes(type, ne[0]); }
  // Bytes a reader of one row touches: row_bytes(), and an affine row's scales and biases.
  size_t read_bytes_per_row() const { return row_bytes() + (dtype_is_affine(type) ? 2 * affine.group_row_bytes : 0); }
  const uint8_t* row(int64_t i) const {
    if (rows_interleaved) [[unlikely]]
      fail("tensor '", name, "' holds only its interleaved copy (--repack in place): its rows cannot be read here");
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(i) * row_bytes();
  }
  // The 2-D matrix of expert e of a stacked [in, out, n_expert] tensor.
  TensorView slice2d(int64_t e) const {
    TensorView v = *this;
    v.n_dims = 2;
    v.ne[2] = v.ne[3] = 1;
    v.nbytes = static_cast<size_t>(ne[1]) * row_bytes();
    v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(e * ne[1]) * row_bytes();
    if (rows16) v.rows16 = static_cast<const uint8_t*>(rows16) + static_cast<size_t>(e * ne[1]) * row_bytes();
    if (dtype_is_affine(type)) {
      const size_t off = static_cast<size_t>(e * ne[1]) * affine.group_row_bytes;
      v.affine.scales += off;
      v.affine.biases += off;
    }
    v.lora = expert_lora ? &(*expert_lora)[static_cast<size_t>(e)] : nullptr;
    v.expert_lora = nullptr;
    return v;
  }
};

// One adapter's low-rank update of a weight W (ne [in, out]): W·x + scale·B·(A·x), with A f32
// ne [in, r] (r rows of `in`) and B f32 ne [r, out].
struct LoraTerm {
  TensorView a, b;
  float scale = 0;
};

}  // namespace sluice
