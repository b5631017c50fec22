// backends/cuda/moe_plan: the host-side layout of one moe_ffn_token call on the device — shape
// checks, where each expert's gate/up/hidden rows sit in scratch, and which launches run in
// which order — and which weights are routed experts by name. Pure C++, header-only and free of CUDA headers, so tests/kernels/
// test_cuda_moe.cpp checks it on machines without a GPU (and without nvcc).
//
// Legend: E = n_embd, F_j = hidden size of expert j, k = experts of the token. Matrix 3j+0,
// 3j+1, 3j+2 are gate, up, down of expert j. A "job" is one matrix-vector product
// (cuda::MatvecJob); jobs are numbered in the order of the job array the backend uploads:
//   [0, 2k)    gate and up of every expert, stably sorted by weight type (one launch per type)
//   [2k, 3k)   down of every expert, in expert order (moe_down, or moe_combine's order)
//   [3k, 4k)   only when the downs' types differ: the downs again, sorted by type, each
//              writing its own output row for moe_combine (one matvec_batch per type).
// Launch order: gate/up groups, then swiglu over the hidden scratch, then the down launches.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace sluice::cuda {

struct MoeMatrix {
  DType type = DType::F32;  // as stored on the device
  int64_t n_in = 0, n_out = 0;
};

enum class MoeLaunchKind {
  gate_up,     // matvec_batch over jobs [first, first + count), all of `type`
  down_fused,  // moe_down over jobs [first, first + count) into out
  down_part,   // matvec_batch over jobs [first, first + count) into per-expert rows
  combine,     // moe_combine over jobs [first, first + count) into out
};

struct MoeLaunch {
  MoeLaunchKind kind = MoeLaunchKind::gate_up;
  DType type = DType::F32;  // unused by combine
  int first = 0, count = 0;
  int64_t max_out = 0;  // largest n_out of the jobs
};

struct MoePlan {
  // Hidden rows: expert j's gate output, up output and swiglu result live at float offset
  // h_off[j] of the gate and up scratch buffers (the hidden result overwrites gate). Offsets
  // are multiples of 64 floats (256 bytes): the matvec kernels read x with 32-byte loads.
  std::vector<int64_t> h_off;
  int64_t h_floats = 0;         // floats of each of the gate and up scratch buffers
  int64_t y_floats = 0;         // floats of the per-expert down outputs (0 when fused)
  int64_t y_stride = 0;         // floats between expert rows of those outputs
  std::vector<int> job_matrix;  // job i multiplies matrix job_matrix[i]
  std::vector<MoeLaunch> launches;
};

inline int64_t moe_round64(int64_t n) { return (n + 63) / 64 * 64; }

// The plan for k = m.size() / 3 experts of one token with embedding size E. Throws Error
// naming the expert on a shape mismatch (gate/up [E, F], down [F, E]) or a row length that is
// not whole blocks of its type.
inline MoePlan moe_plan(std::span<const MoeMatrix> m, int64_t E) {
  if (m.size() % 3 != 0) fail("moe plan: ", m.size(), " matrices is not 3 per expert");
  const int k = static_cast<int>(m.size() / 3);
  MoePlan p;
  p.h_off.resize(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    const MoeMatrix &g = m[3 * j], &u = m[3 * j + 1], &d = m[3 * j + 2];
    if (g.n_in != E || u.n_in != E || g.n_out != u.n_out || g.n_out <= 0 || d.n_in != g.n_out || d.n_out != E)
      fail("moe_ffn_token: expert ", j, " has gate [", g.n_in, ", ", g.n_out, "], up [", u.n_in, ", ", u.n_out,
           "], down [", d.n_in, ", ", d.n_out, "]; want [", E, ", F], [", E, ", F], [F, ", E, "]");
    for (int i = 0; i < 3; ++i) {
      const MoeMatrix& x = m[3 * j + i];
      const int64_t bs = dtype_traits(x.type).block_size;
      if (x.n_in % bs != 0)
        fail("moe_ffn_token: expert ", j, ": rows of ", x.n_in, " elements are not whole ", dtype_name(x.type),
             " blocks");
    }
    p.h_off[static_cast<size_t>(j)] = p.h_floats;
    p.h_floats += moe_round64(g.n_out);
  }
  if (k == 0) return p;

  // Gate and up: jobs sorted by type (stable, so expert order within a type), one launch each.
  std::vector<int> gu;
  for (int j = 0; j < k; ++j) gu.push_back(3 * j), gu.push_back(3 * j + 1);
  std::stable_sort(gu.begin(), gu.end(), [&](int a, int b) { return m[a].type < m[b].type; });
  auto add_groups = [&](const std::vector<int>& mats, MoeLaunchKind kind) {
    for (size_t i = 0; i < mats.size();) {
      MoeLaunch l{kind, m[mats[i]].type, static_cast<int>(p.job_matrix.size()), 0, 0};
      for (; i < mats.size() && m[mats[i]].type == l.type; ++i) {
        p.job_matrix.push_back(mats[i]);
        ++l.count;
        l.max_out = std::max(l.max_out, m[mats[i]].n_out);
      }
      p.launches.push_back(l);
    }
  };
  add_groups(gu, MoeLaunchKind::gate_up);

  // Down: in expert order; fused when every down has one type.
  std::vector<int> down;
  bool one_type = true;
  for (int j = 0; j < k; ++j) {
    down.push_back(3 * j + 2);
    one_type = one_type && m[3 * j + 2].type == m[2].type;
  }
  const int first_down = static_cast<int>(p.job_matrix.size());
  p.job_matrix.insert(p.job_matrix.end(), down.begin(), down.end());
  if (one_type) {
    p.launches.push_back({MoeLaunchKind::down_fused, m[2].type, first_down, k, E});
  } else {
    p.y_stride = moe_round64(E);
    p.y_floats = p.y_stride * k;
    std::stable_sort(down.begin(), down.end(), [&](int a, int b) { return m[a].type < m[b].type; });
    add_groups(down, MoeLaunchKind::down_part);
    p.launches.push_back({MoeLaunchKind::combine, DType::F32, first_down, k, E});
  }
  return p;
}

// A routed expert's matrix, by its GGUF name: a slice of a stacked blk.N.ffn_{gate,up,down}_exps
// tensor or a packed blk.N.ffn_{gate,up,down}.E.weight (not a shared expert, *_shexp, nor a
// dense blk.N.ffn_gate.weight). With an expert budget, the backend's matmul (prefill's
// per-expert path, which has no (layer, expert) ids) streams these through scratch instead of
// caching them, so VRAM stays bounded by the budget plus the dense weights.
inline bool routed_expert_name(const std::string& name) {
  if (name.find("_exps.") != std::string::npos) return true;
  for (const char* k : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
    const size_t at = name.find(k);
    if (at == std::string::npos) continue;
    size_t i = at + std::strlen(k), digits = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i, ++digits;
    if (digits > 0 && name.compare(i, std::string::npos, ".weight") == 0) return true;
  }
  return false;
}

}  // namespace sluice::cuda
