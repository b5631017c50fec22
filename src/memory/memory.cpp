// memory/memory: sequences, their per-layer rows and states, checkpoints and the budget.
#include "memory/memory.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace sluice {

MemoryLayout MemoryLayout::all_attention(const KvGeometry& g) {
  MemoryLayout m;
  m.kv = g;
  m.layers.assign(static_cast<size_t>(g.n_layer), LayerMemorySpec{});
  return m;
}

Memory::Memory(const MemoryLayout& layout, const MemoryOptions& opt) : layout_(layout), opt_(opt) {
  int64_t n_kv = 0;
  state_off_.resize(layout_.layers.size());
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    const LayerMemorySpec& spec = layout_.layers[l];
    kv_slot_.push_back(spec.kind == LayerMemoryKind::kv ? n_kv++ : -1);
    if (spec.kind == LayerMemoryKind::recurrent) {
      if (spec.state_floats.empty()) fail("memory: recurrent layer ", l, " declares no state buffers");
      for (int64_t n : spec.state_floats) {
        if (n <= 0) fail("memory: recurrent layer ", l, " declares a state buffer of ", n, " floats");
        state_off_[l].push_back(state_floats_);
        state_floats_ += static_cast<size_t>(n);
      }
    }
  }
  if (n_kv != layout_.kv.n_layer)
    fail("memory: the layout has ", n_kv, " attention layers but a KV geometry of ", layout_.kv.n_layer);
  if (opt_.kv.n_ctx <= 0) fail("memory: context size must be positive, got ", opt_.kv.n_ctx);
  if (opt_.max_checkpoints < 1) fail("memory: max_checkpoints must be >= 1, got ", opt_.max_checkpoints);
  if (n_kv > 0) {
    std::vector<std::string> notes;
    opt_.kv = kv_cache_resolve(opt_.kv, layout_.kv, &notes);
    for (const auto& n : notes) std::fprintf(stderr, "%s\n", n.c_str());
  }
}

Memory::~Memory() = default;

std::unique_ptr<KvCache> Memory::new_kv() const {
  if (layout_.kv.n_layer == 0) return nullptr;
  // The options are resolved already: the cache's own resolve changes nothing and says nothing.
  return std::make_unique<KvCache>(layout_.kv, opt_.kv);
}

Memory::Sequence& Memory::seq(int32_t s) {
  auto it = seqs_.find(s);
  if (it == seqs_.end()) fail("memory: sequence ", s, " does not exist");
  return it->second;
}

const Memory::Sequence& Memory::seq(int32_t s) const {
  auto it = seqs_.find(s);
  if (it == seqs_.end()) fail("memory: sequence ", s, " does not exist");
  return it->second;
}

size_t Memory::seq_bytes(const Sequence& q) const {
  size_t n = (q.kv ? q.kv->bytes() : 0) + q.states.size() * sizeof(float);
  for (const auto& c : q.checkpoints) n += c.states.size() * sizeof(float);
  return n;
}

size_t Memory::bytes_used() const {
  size_t n = 0;
  for (const auto& [id, q] : seqs_) n += seq_bytes(q);
  return n;
}

size_t Memory::bytes_per_token() const {
  return layout_.kv.n_layer ? KvCache(layout_.kv, opt_.kv).bytes_per_token() : 0;
}

int32_t Memory::seq_new() {
  const size_t add = state_floats_ * sizeof(float);
  if (opt_.budget_bytes && bytes_used() + add > opt_.budget_bytes)
    fail("memory: a new sequence needs ", add, " bytes of state; the budget of ", opt_.budget_bytes, " bytes has ",
         opt_.budget_bytes - bytes_used(), " left");
  Sequence q;
  q.kv = new_kv();
  q.states.assign(state_floats_, 0.0f);
  const int32_t id = next_id_++;
  seqs_.emplace(id, std::move(q));
  return id;
}

int32_t Memory::seq_fork(int32_t src) {
  const Sequence& from = seq(src);
  Sequence q;
  q.len = from.len;
  q.kv = new_kv();
  q.states = from.states;
  q.checkpoints = from.checkpoints;
  // The copy costs its own rows (the prefix, rounded up to a step) and states, not the
  // source's allocation.
  const size_t add = seq_bytes(q) + (q.kv ? q.kv->bytes_for(q.len) : 0);
  if (opt_.budget_bytes && bytes_used() + add > opt_.budget_bytes)
    fail("memory: forking sequence ", src, " needs ", add, " bytes; the budget of ", opt_.budget_bytes, " bytes has ",
         opt_.budget_bytes - bytes_used(), " left");
  if (q.kv) q.kv->copy_prefix(*from.kv, from.len);
  const int32_t id = next_id_++;
  seqs_.emplace(id, std::move(q));
  return id;
}

int64_t Memory::seq_rewind(int32_t s, int64_t n) {
  Sequence& q = seq(s);
  if (n < 0) fail("memory: cannot rewind sequence ", s, " to position ", n);
  if (n >= q.len) return q.len;
  if (state_floats_ > 0) {
    // The latest checkpoint at or before n; none: the zero state at position 0.
    const Checkpoint* best = nullptr;
    for (const auto& c : q.checkpoints)
      if (c.pos <= n && (!best || c.pos > best->pos)) best = &c;
    if (best) {
      q.states = best->states;
      n = best->pos;
    } else {
      std::fill(q.states.begin(), q.states.end(), 0.0f);
      n = 0;
    }
  }
  std::erase_if(q.checkpoints, [n](const Checkpoint& c) { return c.pos > n; });
  q.len = n;
  return n;
}

void Memory::seq_free(int32_t s) {
  if (seqs_.erase(s) == 0) fail("memory: sequence ", s, " does not exist");
}

bool Memory::seq_exists(int32_t s) const { return seqs_.count(s) != 0; }
int64_t Memory::seq_len(int32_t s) const { return seq(s).len; }

std::vector<int32_t> Memory::sequences() const {
  std::vector<int32_t> ids;
  for (const auto& [id, q] : seqs_) ids.push_back(id);
  return ids;
}

void Memory::seq_checkpoint(int32_t s) {
  Sequence& q = seq(s);
  if (state_floats_ == 0) return;
  std::erase_if(q.checkpoints, [&](const Checkpoint& c) { return c.pos == q.len; });
  if (opt_.budget_bytes && bytes_used() + q.states.size() * sizeof(float) > opt_.budget_bytes)
    fail("memory: a checkpoint of sequence ", s, " needs ", q.states.size() * sizeof(float), " bytes; the budget of ",
         opt_.budget_bytes, " bytes has ", opt_.budget_bytes - bytes_used(), " left");
  if (static_cast<int>(q.checkpoints.size()) >= opt_.max_checkpoints) q.checkpoints.erase(q.checkpoints.begin());
  q.checkpoints.push_back({q.len, q.states});
}

std::vector<int64_t> Memory::seq_checkpoints(int32_t s) const {
  std::vector<int64_t> out;
  for (const auto& c : seq(s).checkpoints) out.push_back(c.pos);
  return out;
}

size_t SeqSnapshot::bytes() const {
  size_t n = rows.size() + states.size() * sizeof(float);
  for (const auto& f : k_fit) n += f.bytes();
  for (const auto& [pos, st] : checkpoints) n += st.size() * sizeof(float);
  return n;
}

std::vector<int64_t> SeqSnapshot::checkpoint_positions() const {
  std::vector<int64_t> out;
  for (const auto& [pos, st] : checkpoints) out.push_back(pos);
  return out;
}

SeqSnapshot Memory::seq_save(int32_t s) const {
  const Sequence& q = seq(s);
  SeqSnapshot snap;
  snap.len = q.len;
  if (q.kv) q.kv->copy_out(q.len, snap.rows, snap.k_fit);
  snap.states = q.states;
  for (const auto& c : q.checkpoints) snap.checkpoints.emplace_back(c.pos, c.states);
  return snap;
}

int32_t Memory::seq_restore(const SeqSnapshot& snap, int64_t n) {
  if (snap.states.size() != state_floats_) fail("memory: a snapshot of another layout");
  const int64_t keep = std::clamp<int64_t>(n, 0, snap.len);
  if (keep > opt_.kv.n_ctx) fail("memory: a snapshot of ", keep, " positions outside the context of ", opt_.kv.n_ctx);
  Sequence q;
  q.len = snap.len;
  q.kv = new_kv();
  q.states = snap.states;
  for (const auto& [pos, st] : snap.checkpoints) q.checkpoints.push_back({pos, st});
  const size_t add = seq_bytes(q) + (q.kv ? q.kv->bytes_for(keep) : 0);
  if (opt_.budget_bytes && bytes_used() + add > opt_.budget_bytes)
    fail("memory: restoring a sequence of ", keep, " positions needs ", add, " bytes; the budget of ",
         opt_.budget_bytes, " bytes has ", opt_.budget_bytes - bytes_used(), " left");
  // Only the first `keep` rows come in; the positions past them are dropped just below.
  if (q.kv) q.kv->copy_in(snap.rows.data(), snap.len, keep, snap.k_fit);
  const int32_t id = next_id_++;
  seqs_.emplace(id, std::move(q));
  seq_rewind(id, keep);
  return id;
}

void Memory::seq_set_len(int32_t s, int64_t n) {
  Sequence& q = seq(s);
  if (n < 0 || n > opt_.kv.n_ctx) fail("memory: position ", n, " outside the context of ", opt_.kv.n_ctx);
  if (q.kv) q.kv->reserve(n);
  q.len = n;
}

void Memory::check(const Batch& b) const {
  if (b.empty()) fail("forward: empty batch");
  if (b.seq.size() != b.tokens.size() || b.pos.size() != b.tokens.size() || b.logits.size() != b.tokens.size())
    fail("forward: batch fields differ in length (tokens ", b.tokens.size(), ", seq ", b.seq.size(), ", pos ",
         b.pos.size(), ", logits ", b.logits.size(), ")");
  std::map<int32_t, int64_t> next;  // sequence -> the position its next batch token must have
  for (int64_t i = 0; i < b.size(); ++i) {
    const int32_t s = b.seq[static_cast<size_t>(i)];
    auto it = next.find(s);
    if (it == next.end()) {
      if (!seq_exists(s)) fail("forward: batch index ", i, " names sequence ", s, ", which does not exist");
      it = next.emplace(s, seq_len(s)).first;
    }
    const int64_t p = b.pos[static_cast<size_t>(i)];
    if (p != it->second)
      fail("forward: batch index ", i, " puts sequence ", s, " at position ", p, "; the sequence continues at ",
           it->second);
    if (p >= opt_.kv.n_ctx)
      fail("context full: sequence ", s, " position ", p, " does not fit in a context of ", opt_.kv.n_ctx,
           " (use --ctx)");
    ++it->second;
  }
}

void Memory::prepare(const Batch& b) {
  std::map<int32_t, int64_t> end;  // sequence -> its length after the batch
  for (int64_t i = 0; i < b.size(); ++i) {
    int64_t& e = end[b.seq[static_cast<size_t>(i)]];
    e = std::max(e, static_cast<int64_t>(b.pos[static_cast<size_t>(i)]) + 1);
  }
  if (opt_.budget_bytes) {
    size_t grow = 0;
    for (const auto& [s, e] : end) {
      const Sequence& q = seq(s);
      if (q.kv) grow += q.kv->bytes_for(e) - q.kv->bytes();
    }
    const size_t used = bytes_used();
    if (used + grow > opt_.budget_bytes)
      fail("memory: this step needs ", grow, " more bytes of KV rows; the budget of ", opt_.budget_bytes, " bytes has ",
           opt_.budget_bytes - used, " left (free a sequence, or raise the budget)");
  }
  for (const auto& [s, e] : end)
    if (Sequence& q = seq(s); q.kv) q.kv->reserve(e);
}

void Memory::commit(const Batch& b) {
  for (int64_t i = 0; i < b.size(); ++i) {
    Sequence& q = seq(b.seq[static_cast<size_t>(i)]);
    q.len = std::max(q.len, static_cast<int64_t>(b.pos[static_cast<size_t>(i)]) + 1);
  }
}

KvCache& Memory::kv(int32_t s) {
  Sequence& q = seq(s);
  if (!q.kv) fail("memory: the model has no attention layers");
  return *q.kv;
}

const KvCache& Memory::kv(int32_t s) const {
  const Sequence& q = seq(s);
  if (!q.kv) fail("memory: the model has no attention layers");
  return *q.kv;
}

float* Memory::state(int32_t s, int64_t layer, int i) {
  const auto& off = state_off_[static_cast<size_t>(layer)];
  if (i < 0 || i >= static_cast<int>(off.size())) fail("memory: layer ", layer, " has no state buffer ", i);
  return seq(s).states.data() + off[static_cast<size_t>(i)];
}

}  // namespace sluice
