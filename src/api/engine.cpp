// api/engine: the public Engine facade over Model, backend, Session and Sampler.
#include <chrono>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "sluice/sluice.h"

namespace sluice {

struct Engine::Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Session> session;
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::open(const std::string& model_path, const EngineOptions& opt) {
  std::unique_ptr<Engine> e(new Engine());
  e->impl_->model = Model::load(model_path);
  e->impl_->backend = make_backend(opt.backend, opt.n_threads);
  KvCacheOptions kv;
  kv.n_ctx = opt.n_ctx > 0 ? opt.n_ctx : std::min<int64_t>(e->impl_->model->hparams().n_ctx_train, 4096);
  e->impl_->session = std::make_unique<Session>(*e->impl_->model, *e->impl_->backend, kv);
  return e;
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_bos) const {
  return impl_->model->tokenizer().encode(text, add_bos);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids) const { return impl_->model->tokenizer().decode(ids); }
std::string Engine::architecture() const { return impl_->model->hparams().arch; }
int64_t Engine::n_vocab() const { return impl_->model->hparams().n_vocab; }

std::string Engine::generate(std::string_view prompt, const GenerateOptions& opt,
                             const std::function<bool(std::string_view)>& on_piece, GenerateStats* stats) {
  using Clock = std::chrono::steady_clock;
  Session& s = *impl_->session;
  const Tokenizer& tok = impl_->model->tokenizer();
  s.reset();
  SamplerParams sp;
  sp.temp = opt.temp;
  sp.top_k = opt.top_k;
  sp.top_p = opt.top_p;
  sp.min_p = opt.min_p;
  sp.repeat_penalty = opt.repeat_penalty;
  sp.seed = opt.seed;
  Sampler sampler(sp);
  std::vector<int32_t> ids = tok.encode(prompt, true);
  if (static_cast<int64_t>(ids.size()) >= s.n_ctx()) fail("prompt of ", ids.size(), " tokens does not fit the context of ", s.n_ctx());
  for (int32_t id : ids) sampler.accept(id);
  auto t0 = Clock::now();
  auto logits = s.eval(ids);
  auto t1 = Clock::now();
  std::string text;
  int n = 0;
  for (; n < opt.n_predict && s.n_past() < s.n_ctx(); ++n) {
    const int32_t id = sampler.sample(logits.data(), static_cast<int32_t>(impl_->model->hparams().n_vocab));
    sampler.accept(id);
    if (!opt.ignore_eos && tok.is_eog(id)) break;
    const std::string& piece = tok.token_to_piece(id);
    text += piece;
    if (on_piece && !on_piece(piece)) {
      ++n;
      break;
    }
    std::vector<int32_t> one{id};
    logits = s.eval(one);
  }
  if (stats) {
    stats->n_prompt = static_cast<int>(ids.size());
    stats->n_generated = n;
    stats->prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->generate_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  }
  return text;
}

}  // namespace sluice
