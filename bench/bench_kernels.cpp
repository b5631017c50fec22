// bench/bench_kernels: matmul and attention throughput of the cpu backend (per ISA level and
// thread count) against ref, in GB/s of weight/cache bytes read and GFLOP/s. Not part of the
// CMake build or the tests (tests never assert on time). Build by hand against a build dir:
//   g++ -std=c++20 -O2 -Isrc bench/bench_kernels.cpp build/libsluice.a -pthread -o bench_kernels
// Usage: bench_kernels [n_in n_out [types]]   types: comma list of ggml names, e.g. f16,q4_K
// (SLUICE_CPU_Q8=1 for the int8 path, SLUICE_CPU_Q8_TILE_MIN=N for where its tiles start)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/ref/ref_backend.h"
#include "core/cpu_features.h"
#include "quant/quant.h"

using namespace sluice;

namespace {

double seconds_per_call(const std::function<void()>& f, double min_time) {
  f();  // warm-up
  int n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double el = 0;
  do {
    f();
    ++n;
    el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (el < min_time);
  return el / n;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n_in = argc > 2 ? std::atoll(argv[1]) : 4096, n_out = argc > 2 ? std::atoll(argv[2]) : 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> wf(static_cast<size_t>(n_in * n_out));
  for (auto& v : wf) v = nd(rng);
  std::vector<float> x(static_cast<size_t>(64 * n_in)), y(static_cast<size_t>(64 * n_out));
  for (auto& v : x) v = nd(rng);

  std::printf("matmul %lld x %lld (GB/s of weights; GFLOP/s for T>1)\n", static_cast<long long>(n_out),
              static_cast<long long>(n_in));
  const std::string only = argc > 3 ? std::string(",") + argv[3] + "," : "";
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_A,
                  DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    if (!quant_supported(t)) continue;
    if (!only.empty() && only.find("," + std::string(dtype_name(t)) + ",") == std::string::npos) continue;
    const size_t rb = dtype_row_bytes(t, n_in);
    std::vector<uint8_t> wb(rb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
      if (t == DType::F32)
        std::memcpy(wb.data() + r * rb, wf.data() + r * n_in, rb);
      else
        quantize_row(t, wf.data() + r * n_in, wb.data() + r * rb, n_in);
    }
    TensorView w{"w", t, 2, {n_in, n_out, 1, 1}, wb.data(), wb.size()};
    std::vector<std::pair<std::string, std::unique_ptr<Backend>>> bes;
    bes.emplace_back("ref", make_ref_backend());
    for (CpuIsa isa : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512}) {
      if (!cpu_isa_available(isa)) continue;
      for (int nt : {1, 2})
        bes.emplace_back(std::string(cpu_isa_name(isa)) + "/" + std::to_string(nt), make_cpu_backend(nt, isa));
    }
    for (auto& [name, be] : bes) {
      const double s1 = seconds_per_call([&] { be->matmul(w, x.data(), y.data(), 1); }, 0.3);
      // T=8: eight sequences decoding together; T=32: a prefill chunk.
      const double s8 = name == "ref" ? 0 : seconds_per_call([&] { be->matmul(w, x.data(), y.data(), 8); }, 0.3);
      const double s32 = name == "ref" ? 0 : seconds_per_call([&] { be->matmul(w, x.data(), y.data(), 32); }, 0.3);
      auto gflops = [&](double s, int T) {
        return s > 0 ? 2.0 * static_cast<double>(n_in * n_out) * T / s * 1e-9 : 0.0;
      };
      std::printf("  %-5s %-10s T=1: %7.2f GB/s %8.3f ms   T=8: %7.1f GFLOP/s   T=32: %7.1f GFLOP/s\n",
                  std::string(dtype_name(t)).c_str(), name.c_str(), static_cast<double>(wb.size()) / s1 * 1e-9,
                  s1 * 1e3, gflops(s8, 8), gflops(s32, 32));
    }
  }

  // Attention over an F16 cache: decode (T = 1) and a prefill chunk (T = 64), GQA 32/8, D = 128.
  const int64_t H = 32, Hkv = 8, D = 128, N = 4096;
  std::vector<uint16_t> kv(static_cast<size_t>(N * Hkv * D));
  for (auto& v : kv) v = fp32_to_fp16(nd(rng));
  std::vector<float> q(static_cast<size_t>(64 * H * D)), out(q.size());
  for (auto& v : q) v = nd(rng);
  std::printf("attention H=%lld Hkv=%lld D=%lld N=%lld, f16 cache (GB/s of K+V bytes read once)\n",
              static_cast<long long>(H), static_cast<long long>(Hkv), static_cast<long long>(D),
              static_cast<long long>(N));
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> bes;
  bes.emplace_back("ref", make_ref_backend());
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    if (!cpu_isa_available(isa)) continue;
    for (int nt : {1, 2})
      bes.emplace_back(std::string(cpu_isa_name(isa)) + "/" + std::to_string(nt), make_cpu_backend(nt, isa));
  }
  for (auto& [name, be] : bes) {
    for (int64_t T : {1, 64}) {
      AttentionArgs a;
      a.q = q.data();
      a.k = a.v = kv.data();
      a.k_type = a.v_type = DType::F16;
      a.k_row_bytes = a.v_row_bytes = static_cast<size_t>(Hkv * D * 2);
      a.out = out.data();
      a.n_tok = T;
      a.n_head = H;
      a.n_head_kv = Hkv;
      a.head_dim_k = a.head_dim_v = D;
      a.n_kv = N;
      a.pos0 = N - T;
      a.scale = 0.088f;
      const double sec = seconds_per_call([&] { be->attention(a); }, 0.3);
      std::printf("  %-10s T=%-3lld %8.3f ms  %7.2f GB/s\n", name.c_str(), static_cast<long long>(T), sec * 1e3,
                  2.0 * static_cast<double>(kv.size() * 2) / sec * 1e-9);
    }
  }
  return 0;
}
