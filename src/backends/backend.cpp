// backends/backend: the factory that maps a backend name to an implementation.
#include "backends/backend.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/ref/ref_backend.h"
#include "core/error.h"
#ifdef SLUICE_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace sluice {

std::shared_ptr<void> Backend::alloc_bytes(size_t n_bytes) {
  if (n_bytes == 0) return {};
  void* p = std::calloc(1, n_bytes);
  if (!p) fail("out of memory: ", n_bytes, " bytes of activations");
  return {p, std::free};
}

void Backend::matmul(const TensorView& w, const float* x, float* y, int64_t n_tok) {
  matmul_weights(w, x, y, n_tok);
  if (!w.lora) return;
  // Unmerged adapters: y += scale·B·(A·x), A·x of rank r first (r << in, out), on the same
  // backend's products and activation memory; the base weight stays as the file has it.
  for (const LoraTerm& t : *w.lora) {
    if (t.scale == 0.0f) continue;
    ActBuf<float> ax = alloc<float>(n_tok * t.a.ne[1]), bax = alloc<float>(n_tok * t.b.ne[1]);
    matmul_weights(t.a, x, ax.data(), n_tok);
    matmul_weights(t.b, ax.data(), bax.data(), n_tok);
    // y[t] += scale · bax[t], row by row (add_rows_weighted's o += w·y). Its index and weight
    // arrays are host memory kept per thread: decode calls this per token per adapted weight.
    thread_local std::vector<int64_t> rows;
    thread_local std::vector<float> scale;
    rows.resize(static_cast<size_t>(n_tok));
    for (int64_t i = 0; i < n_tok; ++i) rows[static_cast<size_t>(i)] = i;
    scale.assign(static_cast<size_t>(n_tok), t.scale);
    add_rows_weighted(bax.data(), t.b.ne[1], rows.data(), scale.data(), n_tok, y);
  }
}

void Backend::moe_ffn_token(std::span<const FfnExpert> experts, const float* x, float* out, int64_t n_embd) {
  std::fill(out, out + n_embd, 0.0f);
  std::vector<float> gate, up, y(static_cast<size_t>(n_embd));
  for (const FfnExpert& e : experts) {
    const int64_t F = e.gate->ne[1];
    gate.resize(static_cast<size_t>(F));
    up.resize(static_cast<size_t>(F));
    matmul(*e.gate, x, gate.data(), 1);
    matmul(*e.up, x, up.data(), 1);
    swiglu(gate.data(), up.data(), gate.data(), F, e.limit);
    matmul(*e.down, gate.data(), y.data(), 1);
    for (int64_t c = 0; c < n_embd; ++c) out[c] += e.weight * y[static_cast<size_t>(c)];
  }
}

void Backend::moe_ffn_batch(std::span<const FfnExpertRows> experts, const float* x, float* out, int64_t n_tok,
                            int64_t n_embd) {
  std::vector<std::vector<float>> ys(experts.size());
  std::vector<float> xg, gate, up;
  for (size_t j = 0; j < experts.size(); ++j) {
    const FfnExpertRows& e = experts[j];
    const int64_t F = e.gate->ne[1], m = e.n;
    xg.resize(static_cast<size_t>(m * n_embd));
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + e.tokens[i] * n_embd, n_embd, xg.data() + i * n_embd);
    gate.resize(static_cast<size_t>(m * F));
    up.resize(static_cast<size_t>(m * F));
    ys[j].resize(static_cast<size_t>(m * n_embd));
    matmul(*e.gate, xg.data(), gate.data(), m);
    matmul(*e.up, xg.data(), up.data(), m);
    swiglu(gate.data(), up.data(), gate.data(), m * F, e.limit);
    matmul(*e.down, gate.data(), ys[j].data(), m);
  }
  std::fill(out, out + n_tok * n_embd, 0.0f);
  for (size_t j = 0; j < experts.size(); ++j)
    for (int64_t i = 0; i < experts[j].n; ++i) {
      float* o = out + experts[j].tokens[i] * n_embd;
      const float w = experts[j].weights[i];
      const float* y = ys[j].data() + i * n_embd;
      for (int64_t c = 0; c < n_embd; ++c) o[c] += w * y[c];
    }
}

std::unique_ptr<Backend> make_backend(std::string_view name, const BackendOptions& o) {
  const int n_threads = o.n_threads;
  if (o.gpu_expert_cache && name != "cuda") fail("a GPU expert cache needs the cuda backend (backend '", name, "')");
  if (name == "ref") return make_ref_backend();
  // "cpu" multiplies quantized weights by int8-quantized activations, as llama.cpp does (5x
  // faster decode; matches every golden within the README's tolerances, greedy runs included);
  // "cpu-exact" decodes weights to float, the path the layer-by-layer parity against `ref`
  // holds to float32 rounding. SLUICE_CPU_Q8=0 turns the int8 path off for "cpu" too.
  if (name == "cpu" || name == "cpu-exact") {
    CpuBackendOptions opt = cpu_backend_default_options();  // SLUICE_CPU_Q8_TILES
    opt.q8_activations = name == "cpu";
    if (const char* e = std::getenv("SLUICE_CPU_Q8"); e && name == "cpu") opt.q8_activations = std::string(e) != "0";
    return make_cpu_backend(n_threads, cpu_isa_select(), opt);
  }
  if (name == "cuda") {
#ifdef SLUICE_HAVE_CUDA
    CudaBackendOptions opt;
    opt.expert_cache_bytes = o.gpu_expert_cache;
    opt.host_threads = n_threads;
    if (const char* e = std::getenv("SLUICE_CUDA_RESIDENT")) opt.resident_activations = std::string(e) == "1";
    return make_cuda_backend(opt);  // throws "cuda backend: no CUDA device found (...)" without one
#else
    fail("backend 'cuda' is not built into this binary (configure where CMake finds nvcc, or with -DSLUICE_CUDA=ON)");
#endif
  }
  fail("unknown backend '", name, "' (valid: ref, cpu, cpu-exact, cuda)");
}

std::unique_ptr<Backend> make_backend(std::string_view name, int n_threads) {
  return make_backend(name, BackendOptions{.n_threads = n_threads});
}

}  // namespace sluice
