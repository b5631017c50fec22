// api/engine: the public Engine facade over Model, backend, Session and Generator.
#include "api/engine_impl.h"
#include "core/error.h"
#include "runtime/generator.h"

namespace sluice {

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
  GenerateParams p;
  p.sampler.temp = opt.temp;
  p.sampler.top_k = opt.top_k;
  p.sampler.top_p = opt.top_p;
  p.sampler.min_p = opt.min_p;
  p.sampler.repeat_penalty = opt.repeat_penalty;
  p.sampler.presence_penalty = opt.presence_penalty;
  p.sampler.frequency_penalty = opt.frequency_penalty;
  p.sampler.penalty_last_n = opt.penalty_last_n;
  p.sampler.seed = opt.seed;
  p.n_predict = opt.n_predict;
  p.ignore_eos = opt.ignore_eos;
  p.parse_special = opt.parse_special;
  p.stop = opt.stop;
  std::string text;
  const GenerationStats st = Generator(*impl_->session).run(prompt, p, [&](std::string_view t) {
    text += t;
    return !on_piece || on_piece(t);
  });
  if (stats) {
    stats->n_prompt = st.n_prompt;
    stats->n_generated = st.n_generated;
    stats->prompt_seconds = st.prompt_seconds;
    stats->generate_seconds = st.generate_seconds;
    stats->stop_reason = st.stop;
  }
  return text;
}

}  // namespace sluice
