// memory/batch: what one forward step evaluates — a list of tokens, each with the sequence it
// belongs to, its position in that sequence and whether its logits are wanted (llama.cpp's
// ubatch idea). Several sequences at different positions share one step: the matmuls and the
// experts read each weight once for all of them, attention sees only the token's own sequence.
//
// Rules the forward checks before any work (Memory::check): every sequence exists; within the
// batch the positions of one sequence continue its memory without a gap (the first token of
// sequence s is at seq_len(s), the next at +1, ...), in batch order; tokens of one sequence
// need not be adjacent in the batch.
#pragma once
#include <cstdint>
#include <vector>

namespace sluice {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> seq;     // sequence id of each token (Memory::seq_new)
  std::vector<int32_t> pos;     // position of each token within its sequence
  std::vector<uint8_t> logits;  // 1: the forward writes this token's logits row

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  bool empty() const { return tokens.empty(); }
  void clear() {
    tokens.clear();
    seq.clear();
    pos.clear();
    logits.clear();
  }
  void add(int32_t token, int32_t seq_id, int32_t position, bool want_logits) {
    tokens.push_back(token);
    seq.push_back(seq_id);
    pos.push_back(position);
    logits.push_back(want_logits ? 1 : 0);
  }
  // Number of tokens whose logits are wanted: the rows the forward writes, in batch order.
  int64_t n_outputs() const {
    int64_t n = 0;
    for (uint8_t f : logits) n += f;
    return n;
  }
};

// A maximal stretch of consecutive batch tokens of one sequence at consecutive positions:
// the unit attention runs on (one KV store, one causal attention call).
struct BatchRun {
  int32_t seq = 0;
  int64_t first = 0;  // batch index of the run's first token
  int64_t n = 0;      // tokens in the run
  int32_t pos0 = 0;   // position of the first token
};

inline std::vector<BatchRun> batch_runs(const Batch& b) {
  std::vector<BatchRun> runs;
  for (int64_t i = 0; i < b.size(); ++i) {
    if (!runs.empty()) {
      BatchRun& r = runs.back();
      if (r.seq == b.seq[i] && r.pos0 + r.n == b.pos[i]) {
        ++r.n;
        continue;
      }
    }
    runs.push_back({b.seq[i], i, 1, b.pos[i]});
  }
  return runs;
}

}  // namespace sluice
