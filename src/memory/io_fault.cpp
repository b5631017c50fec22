// memory/io_fault: the fault-injecting IoEngine wrapper (see io_fault.h).
#include "memory/io_fault.h"

#include <cerrno>
#include <unordered_map>

namespace sluice {
namespace {

class FaultyIo final : public IoEngine {
 public:
  FaultyIo(std::unique_ptr<IoEngine> inner, IoFaultPlan plan) : inner_(std::move(inner)), plan_(plan) {}
  std::string_view name() const override { return "fault"; }
  size_t in_flight() const override { return inner_->in_flight(); }
  size_t max_in_flight() const override { return inner_->max_in_flight(); }

  void submit(std::span<const IoRead> reads) override {
    for (const IoRead& r : reads) {
      // Sequence numbers are counted at submission, so "the 3rd read fails" is reproducible
      // however the completions interleave.
      const uint64_t seq = n_submitted_++;
      const bool faulty = seq >= plan_.skip && seq - plan_.skip < plan_.count;
      pending_[r.tag] = {r.offset, r.len, faulty};
    }
    inner_->submit(reads);
  }

  size_t reap(std::span<IoCompletion> out, size_t min_complete) override {
    const size_t n = inner_->reap(out, min_complete);
    for (size_t i = 0; i < n; ++i) {
      auto it = pending_.find(out[i].tag);
      if (it == pending_.end()) continue;
      const Pending p = it->second;
      pending_.erase(it);
      int64_t& res = out[i].result;
      switch (plan_.kind) {
        case IoFaultKind::eio:
          if (p.faulty) res = -EIO;
          break;
        case IoFaultKind::short_read:
          if (p.faulty && res > 0) res /= 2;
          break;
        case IoFaultKind::truncated:
          if (res > 0) {
            const int64_t room = p.offset >= plan_.truncate_at ? 0 : static_cast<int64_t>(plan_.truncate_at - p.offset);
            if (res > room) res = room;
          }
          break;
      }
    }
    return n;
  }

 private:
  struct Pending {
    uint64_t offset;
    size_t len;
    bool faulty;
  };
  std::unique_ptr<IoEngine> inner_;
  IoFaultPlan plan_;
  uint64_t n_submitted_ = 0;
  std::unordered_map<uint64_t, Pending> pending_;  // by tag
};

}  // namespace

std::unique_ptr<IoEngine> make_io_fault(std::unique_ptr<IoEngine> inner, IoFaultPlan plan) {
  return std::make_unique<FaultyIo>(std::move(inner), plan);
}

}  // namespace sluice
