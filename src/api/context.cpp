// api/context: the public Context — a Memory of several sequences over the Engine's model and
// backend, stepped through Model::forward in batches of at most Session::kMaxBatch tokens.
#include <algorithm>
#include <map>

#include "api/engine_impl.h"
#include "core/error.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "sluice/sluice.h"

namespace sluice {

struct Context::Impl {
  const Model* model = nullptr;
  Backend* backend = nullptr;
  std::unique_ptr<Memory> memory;
};

Context::Context() : impl_(std::make_unique<Impl>()) {}
Context::~Context() = default;

std::unique_ptr<Context> Context::create(Engine& engine, const ContextOptions& opt) {
  std::unique_ptr<Context> c(new Context());
  Engine::Impl& e = *engine.impl_;
  c->impl_->model = e.model.get();
  c->impl_->backend = e.backend.get();
  MemoryOptions mo;
  mo.kv = kv_cache_options(e.kv, opt.n_ctx > 0 ? opt.n_ctx : engine.context_size());
  mo.budget_bytes = opt.memory_budget;
  c->impl_->memory = std::make_unique<Memory>(e.model->memory_layout(), mo);
  return c;
}

int32_t Context::new_sequence() { return impl_->memory->seq_new(); }
int32_t Context::fork(int32_t seq) { return impl_->memory->seq_fork(seq); }
int64_t Context::rewind(int32_t seq, int64_t n_keep) { return impl_->memory->seq_rewind(seq, n_keep); }
void Context::checkpoint(int32_t seq) { impl_->memory->seq_checkpoint(seq); }
void Context::free(int32_t seq) { impl_->memory->seq_free(seq); }
int64_t Context::length(int32_t seq) const { return impl_->memory->seq_len(seq); }
int64_t Context::n_vocab() const { return impl_->model->hparams().n_vocab; }
size_t Context::memory_used() const { return impl_->memory->bytes_used(); }
size_t Context::memory_budget() const { return impl_->memory->budget(); }

std::vector<std::vector<float>> Context::decode(const std::vector<Input>& inputs) {
  Memory& mem = *impl_->memory;
  const Model& m = *impl_->model;
  const int64_t V = m.hparams().n_vocab;
  // The whole step as one token list (entry order), checked before any forward runs.
  Batch all;
  std::map<int32_t, int64_t> next;  // sequence -> its next position
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    if (in.tokens.empty()) fail("decode: entry ", i, " (sequence ", in.seq, ") has no tokens");
    if (!mem.seq_exists(in.seq)) fail("decode: entry ", i, " names sequence ", in.seq, ", which does not exist");
    auto it = next.try_emplace(in.seq, mem.seq_len(in.seq)).first;
    for (size_t t = 0; t < in.tokens.size(); ++t) {
      if (in.tokens[t] < 0 || in.tokens[t] >= V)
        fail("decode: entry ", i, " (sequence ", in.seq, ") token ", t, " = ", in.tokens[t],
             " is outside the vocabulary (", V, ")");
      all.add(in.tokens[t], in.seq, static_cast<int32_t>(it->second++), in.want_logits && t + 1 == in.tokens.size());
    }
  }
  mem.check(all);  // the whole step as one batch (the context too) before any chunk runs
  std::vector<std::vector<float>> out;
  Batch chunk;
  std::vector<float> logits;
  for (int64_t i0 = 0; i0 < all.size(); i0 += Session::kMaxBatch) {
    const int64_t n = std::min(Session::kMaxBatch, all.size() - i0);
    chunk.clear();
    for (int64_t i = i0; i < i0 + n; ++i) chunk.add(all.tokens[i], all.seq[i], all.pos[i], all.logits[i]);
    logits.resize(static_cast<size_t>(chunk.n_outputs() * V));
    m.forward(*impl_->backend, mem, chunk, logits.data(), nullptr);
    for (int64_t r = 0; r < chunk.n_outputs(); ++r)
      out.emplace_back(logits.begin() + r * V, logits.begin() + (r + 1) * V);
  }
  return out;
}

}  // namespace sluice
