// api/engine: the public Engine facade over Model, backend, Session, Generator and the
// speculative decoders.
#include <algorithm>

#include "api/engine_impl.h"
#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "runtime/generator.h"

namespace sluice {

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

int64_t Engine::Impl::default_n_ctx() const {
  return n_ctx_option > 0 ? n_ctx_option : std::min<int64_t>(model->hparams().n_ctx_train, 4096);
}

Session& Engine::Impl::sess() {
  if (!session) session = std::make_unique<Session>(*model, *backend, kv_cache_options(kv, default_n_ctx()));
  return *session;
}

namespace {

ModelOptions model_options(const EngineOptions& opt) {
  ModelOptions o;
  ExpertStoreOptions& x = o.experts;
  x.policy = expert_policy_from_name(opt.experts.policy);
  x.cache_auto = opt.experts.cache == "auto";
  if (!x.cache_auto) x.cache_bytes = parse_byte_size("--expert-cache", opt.experts.cache);
  x.pin_per_layer = opt.experts.pin_per_layer;
  x.routing_counts_path = opt.experts.routing_counts;
  x.prefetch = opt.experts.prefetch;
  x.prefetch_extra = opt.experts.prefetch_extra;
  x.prefetch_gate = opt.experts.prefetch_gate;
  x.io = opt.experts.io;
  x.direct_io = opt.experts.direct_io;
  x.progress = opt.experts.progress;
  o.read_weights = opt.read_weights;
  o.lora = opt.lora;
  o.lora_merge = opt.lora_merge;
  o.mlx_in_place = opt.mlx_in_place;
  o.progress = opt.load_progress;
  o.repack_progress = opt.repack_progress;
  o.pack_dir = opt.experts.pack_dir;
  o.pack_progress = opt.pack_progress;
  o.on_note = opt.on_load_note;
  return o;
}

const char* policy_name(ExpertPolicy p) {
  switch (p) {
    case ExpertPolicy::resident: return "resident";
    case ExpertPolicy::mmap: return "mmap";
    case ExpertPolicy::stream: return "stream";
  }
  return "?";
}

}  // namespace

GenerateParams generate_params(const GenerateOptions& opt) {
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
  return p;
}

GenerateStats generate_stats(const GenerationStats& st) {
  GenerateStats s;
  s.n_prompt = st.n_prompt;
  s.n_generated = st.n_generated;
  s.prompt_seconds = st.prompt_seconds;
  s.generate_seconds = st.generate_seconds;
  s.stop_reason = st.stop;
  return s;
}

std::unique_ptr<Engine> Engine::open(const std::string& model_path, const EngineOptions& opt) {
  std::unique_ptr<Engine> e(new Engine());
  Impl& im = *e->impl_;
  // The backend first: whether to interleave the weights at load depends on what it reads.
  BackendOptions bo{.n_threads = opt.n_threads};
  if (!opt.gpu_expert_cache.empty()) {
    if (opt.backend != "cuda") fail("--gpu-expert-cache needs --backend cuda");
    bo.gpu_expert_cache = parse_byte_size("--gpu-expert-cache", opt.gpu_expert_cache);
  }
  im.backend = make_backend(opt.backend, bo);
  ModelOptions mo = model_options(opt);
  mo.repack = opt.repack.value_or(repack_by_default(*im.backend));
  mo.repack_in_place = cpu_backend_reads_every_rows16(*im.backend);
  im.model = Model::load(model_path, mo);
  if (opt.on_load_note) {
    // A quantized folder's weights were repacked or dequantized at load (format/hf_folder.h).
    if (const std::string q = im.model->file().get_string_or("sluice.folder.quantization", ""); !q.empty())
      opt.on_load_note(q);
    if (!im.model->lora_summary().empty()) opt.on_load_note(im.model->lora_summary());
    if (!im.model->repack_summary().empty()) opt.on_load_note(im.model->repack_summary());
  }
  if (opt.experts.record_routing_trace) im.model->experts().record_routing_trace();
  // The interleaved copies are read by the cpu backend's int8 kernels (every SIMD level).
  const char* q8 = cpu_backend_q8_level(*im.backend);
  if (mo.repack && opt.on_load_note && !cpu_backend_reads_rows16(*im.backend, DType::Q4_K))
    opt.on_load_note("repack: unused here (backend " + opt.backend + ", int8 kernels " + (q8 ? q8 : "off") +
                     "): only the cpu backend's int8 kernels (AVX2, AVX-512) read the interleaved copies");
  im.kv = opt.kv;
  im.n_ctx_option = opt.n_ctx;
  return e;
}

int32_t greedy_token(const float* logits, size_t n) { return argmax(std::span<const float>(logits, n)); }

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  return impl_->model->tokenizer().encode(text, add_bos, parse_special);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids) const { return impl_->model->tokenizer().decode(ids); }
std::string Engine::token_to_piece(int32_t id) const { return impl_->model->tokenizer().token_to_piece(id); }
std::string Engine::architecture() const { return impl_->model->hparams().arch; }
int64_t Engine::n_vocab() const { return impl_->model->hparams().n_vocab; }
ModelInfo Engine::info() const { return model_info_of(*impl_->model); }
std::string Engine::backend_name() const { return std::string(impl_->backend->name()); }
int Engine::n_threads() const { return impl_->backend->n_threads(); }
std::string Engine::backend_stats_line() const { return impl_->backend->stats_line(); }

std::string Engine::expert_policy() const { return policy_name(impl_->model->experts().policy()); }
std::string Engine::expert_stats_line() const { return format_expert_stats(impl_->model->experts().stats()); }
void Engine::mark_expert_stats() {
  impl_->expert_mark = impl_->model->experts().stats();
  impl_->expert_mark_time = std::chrono::steady_clock::now();
}
std::string Engine::expert_stats_since_mark(int64_t n_tokens) const {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - impl_->expert_mark_time).count();
  return format_expert_steady_state(impl_->expert_mark, impl_->model->experts().stats(), secs, n_tokens);
}
void Engine::save_routing_counts(const std::string& path) const { impl_->model->experts().save_routing_counts(path); }
void Engine::save_routing_trace(const std::string& path) const { impl_->model->experts().save_routing_trace(path); }

void Engine::set_context(int64_t n_ctx) {
  impl_->session.reset();
  impl_->session = std::make_unique<Session>(*impl_->model, *impl_->backend, kv_cache_options(impl_->kv, n_ctx));
}
int64_t Engine::context_size() const { return impl_->session ? impl_->session->n_ctx() : impl_->default_n_ctx(); }
std::vector<float> Engine::eval(const std::vector<int32_t>& tokens, bool all_logits) {
  const std::span<const float> l = impl_->sess().eval(tokens, all_logits);
  return {l.begin(), l.end()};
}

ModelInfo Engine::load_draft(const std::string& path) {
  impl_->drafter.reset();
  impl_->draft_model = Model::load(path);
  return model_info_of(*impl_->draft_model);
}
void Engine::set_draft_context(int64_t n_ctx) {
  if (!impl_->draft_model) fail("set_draft_context: no draft model (load_draft first)");
  impl_->drafter.reset();
  impl_->drafter = std::make_unique<ModelDrafter>(*impl_->model, *impl_->draft_model, *impl_->backend,
                                                  kv_cache_options(impl_->kv, n_ctx));
}

std::string Engine::generate(std::string_view prompt, const GenerateOptions& opt,
                             const std::function<bool(std::string_view)>& on_piece, GenerateStats* stats) {
  const GenerateParams p = generate_params(opt);
  std::string text;
  const Generator::TextFn emit = [&](std::string_view t) {
    text += t;
    return !on_piece || on_piece(t);
  };
  Session& s = impl_->sess();
  const SpeculativeOptions& so = opt.speculative;
  SpeculativeStats spec;
  GenerationStats st;
  if (so.mode == SpeculativeMode::off) {
    st = Generator(s).run(prompt, p, emit, [&](int n_gen) {
      if (opt.on_token) opt.on_token(n_gen);
    });
  } else {
    std::unique_ptr<Drafter> lookup;
    Drafter* drafter = impl_->drafter.get();
    if (so.mode == SpeculativeMode::lookup) {
      lookup = std::make_unique<NgramDrafter>(
          SpeculativeParams{.draft_max = so.draft_max, .ngram_max = so.ngram_max, .ngram_min = so.ngram_min});
      drafter = lookup.get();
    } else if (!drafter) {
      fail("generate: speculative decoding with a draft model needs load_draft and set_draft_context");
    }
    st = run_speculative(s, prompt, p, *drafter, so.draft_max, emit, &spec);
  }
  if (stats) {
    *stats = generate_stats(st);
    stats->spec_steps = spec.steps;
    stats->spec_drafted = spec.drafted;
    stats->spec_accepted = spec.accepted;
    stats->spec_replayed = spec.replayed;
  }
  return text;
}

}  // namespace sluice
