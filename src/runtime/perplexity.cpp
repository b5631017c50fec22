// runtime/perplexity: the chunked evaluation, the base-logits file (write and read) and the
// KL-divergence statistics, following llama.cpp's tools/perplexity/perplexity.cpp formula for
// formula so the numbers are comparable with llama-perplexity's.
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "runtime/session.h"

namespace sluice {
namespace {

int32_t nv_of(int32_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// llama.cpp's nearest_int (the float magic-number trick: round to nearest, ties to even), so
// the stored values are bit-identical to llama-perplexity's.
int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// NLL of token `tok` and the quantized log-probs record (llama.cpp's log_softmax with log_prob).
double log_softmax_store(int32_t n_vocab, const float* logits, uint16_t* rec, int32_t tok) {
  float max_logit = logits[0], min_logit = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(rec, &scale, 4);
  std::memcpy(rec + 2, &min_log_prob, 4);
  uint16_t* q = rec + 4;
  if (scale != 0.0f) {
    const float inv_scale = 1 / scale;
    for (int32_t i = 0; i < n_vocab; ++i)
      q[i] = logits[i] > min_logit ? static_cast<uint16_t>(nearest_int(inv_scale * (logits[i] - min_logit))) : 0;
  } else {
    std::fill(q, q + n_vocab, uint16_t{0});
  }
  return max_logit + log_sum_exp - logits[tok];
}

double nll_of(int32_t n_vocab, const float* logits, int32_t tok) {
  const float m = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  return m + std::log(sum) - logits[tok];
}

// One token against its base record (llama.cpp's log_softmax with kl_divergence_result).
void kld_token(int32_t n_vocab, const float* logits, const uint16_t* rec, int32_t tok, KldStats& k) {
  float max_logit = logits[0];
  int32_t imax = 0;
  for (int32_t i = 1; i < n_vocab; ++i)
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  double sum_exp = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, rec, 4);
  std::memcpy(&min_log_prob, rec + 2, 4);
  const uint16_t* base = rec + 4;
  const float nll = max_logit + log_sum_exp - logits[tok];
  k.sum_nll += nll;
  k.sum_nll2 += static_cast<double>(nll) * nll;
  const float nll_base = -(scale * base[tok] + min_log_prob);
  k.sum_nll_base += nll_base;
  k.sum_nll_base2 += static_cast<double>(nll_base) * nll_base;
  k.sum_nll_nll_base += static_cast<double>(nll) * nll_base;
  max_logit += log_sum_exp;
  double sum = 0;
  int32_t imax_base = -1;
  float p_log_base_max = 0;
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float p_log_base = scale * base[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) sum += std::exp(p_log_base) * (p_log_base - logits[i] + max_logit);
  }
  k.sum_kld += sum;
  k.sum_kld2 += sum * sum;
  ++k.count;
  if (imax == imax_base) ++k.n_same_top;
  const float p_diff = std::exp(-nll) - std::exp(-nll_base);
  k.sum_p_diff += p_diff;
  const double p_diff2 = static_cast<double>(p_diff) * p_diff;
  k.sum_p_diff2 += p_diff2;
  k.sum_p_diff4 += p_diff2 * p_diff2;
  k.max_p_diff = std::max(k.max_p_diff, std::fabs(p_diff));
  k.kld_values.push_back(static_cast<float>(sum));
  k.p_diff_values.push_back(p_diff);
}

std::pair<double, double> mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0., 0.};
  const double f = sum / count;
  double df = sum2 / count - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (count - 1)) : 0.;
  return {f, df};
}

double covariance(double suma, double sumb, double sumab, int64_t count) {
  if (count < 10) return 0.0;
  return (sumab / count - (suma / count) * (sumb / count)) / (count - 1);
}

template <class T>
void read_exact(std::ifstream& in, T* dst, size_t n, const std::string& path, const char* what) {
  in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n * sizeof(T)));
  if (!in) fail(path, ": truncated base-logits file (reading ", what, ")");
}

}  // namespace

PerplexityResult perplexity_run(const Model& model, Backend& be, const std::vector<int32_t>& tokens_in,
                                const PerplexityOptions& opt, std::FILE* progress) {
  const Vocab& vocab = model.tokenizer().vocab();
  const int32_t n_vocab = static_cast<int32_t>(model.hparams().n_vocab);
  const int32_t nv = nv_of(n_vocab);
  PerplexityResult r;
  std::vector<int32_t> tokens = tokens_in;
  int64_t n_ctx = opt.n_ctx, n_chunk = 0;
  std::ifstream base_in;
  if (!opt.kld_in.empty()) {
    base_in.open(opt.kld_in, std::ios::binary);
    if (!base_in) fail("cannot open base-logits file ", opt.kld_in);
    char magic[8];
    read_exact(base_in, magic, 8, opt.kld_in, "magic");
    if (std::memcmp(magic, "_logits_", 8) != 0) fail(opt.kld_in, " does not look like a file of log-probabilities");
    int32_t hdr[3];
    read_exact(base_in, hdr, 3, opt.kld_in, "header");
    if (hdr[1] != n_vocab) fail(opt.kld_in, ": vocabulary of ", hdr[1], " tokens, the model has ", n_vocab);
    if (hdr[0] < 4 || hdr[2] < 1 || int64_t{hdr[0]} * hdr[2] > (int64_t{1} << 32))
      fail(opt.kld_in, ": implausible n_ctx ", hdr[0], " / n_chunk ", hdr[2]);
    n_ctx = hdr[0];
    n_chunk = hdr[2];
    if (opt.n_chunks > 0) n_chunk = std::min<int64_t>(n_chunk, opt.n_chunks);
    tokens.resize(static_cast<size_t>(n_ctx) * hdr[2]);
    read_exact(base_in, tokens.data(), tokens.size(), opt.kld_in, "tokens");
    for (int32_t t : tokens)
      if (t < 0 || t >= n_vocab) fail(opt.kld_in, ": token id ", t, " outside the vocabulary");
    r.has_kld = true;
  } else {
    if (n_ctx < 4) fail("perplexity: context ", n_ctx, " is too short");
    const int64_t n_max = static_cast<int64_t>(tokens.size()) / n_ctx;
    if (n_max < 1) fail("perplexity: the text has ", tokens.size(), " tokens, fewer than one chunk of ", n_ctx);
    n_chunk = opt.n_chunks > 0 ? std::min(opt.n_chunks, n_max) : n_max;
  }
  std::ofstream base_out;
  if (!opt.kld_base_out.empty()) {
    base_out.open(opt.kld_base_out, std::ios::binary);
    if (!base_out) fail("cannot write base-logits file ", opt.kld_base_out);
    const int32_t hdr[3] = {static_cast<int32_t>(n_ctx), n_vocab, static_cast<int32_t>(n_chunk)};
    base_out.write("_logits_", 8);
    base_out.write(reinterpret_cast<const char*>(hdr), sizeof hdr);
    base_out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n_chunk * n_ctx * 4));
  }

  KvCacheOptions kvo = opt.kv;
  kvo.n_ctx = n_ctx;
  Session s(model, be, kvo);
  r.kv_bytes_per_token = s.kv_cache().bytes_per_token();
  r.type_k = s.kv_cache().type_k();
  r.rotated_k = s.kv_cache().k_rotation().on();
  r.rotated_v = s.kv_cache().v_rotation().on();
  r.type_v = s.kv_cache().type_v();
  r.n_ctx = n_ctx;
  r.n_chunks = n_chunk;
  const int64_t first = n_ctx / 2, n_scored = n_ctx - 1 - first;
  std::vector<uint16_t> recs(static_cast<size_t>(n_scored * nv));
  double nll = 0, nll2 = 0;
  for (int64_t c = 0; c < n_chunk; ++c) {
    const int32_t* ct = tokens.data() + c * n_ctx;
    std::vector<int32_t> batch(ct, ct + n_ctx);
    if (vocab.add_bos) batch[0] = vocab.bos_id;
    s.reset();
    const auto logits = s.eval(batch, /*all_logits=*/true);
    if (r.has_kld) read_exact(base_in, recs.data(), recs.size(), opt.kld_in, "log-probs");
    for (int64_t i = 0; i < n_scored; ++i) {
      const float* lg = logits.data() + (first + i) * n_vocab;
      const int32_t target = ct[first + i + 1];
      double v;
      if (base_out.is_open())
        v = log_softmax_store(n_vocab, lg, recs.data() + i * nv, target);
      else
        v = nll_of(n_vocab, lg, target);
      if (r.has_kld) kld_token(n_vocab, lg, recs.data() + i * nv, target, r.kld);
      nll += v;
      nll2 += v * v;
    }
    if (base_out.is_open())
      base_out.write(reinterpret_cast<const char*>(recs.data()), static_cast<std::streamsize>(recs.size() * 2));
    r.count += n_scored;
    r.chunk_ppl.push_back(std::exp(nll / r.count));
    if (progress)
      std::fprintf(progress, "[%lld]%.4f,", static_cast<long long>(c + 1), r.chunk_ppl.back()), std::fflush(progress);
  }
  if (progress) std::fprintf(progress, "\n");
  if (base_out.is_open() && !base_out) fail("error writing ", opt.kld_base_out);
  const double mean = nll / r.count;
  double var = nll2 / r.count - mean * mean;
  r.ppl = std::exp(mean);
  r.ppl_err = var > 0 && r.count > 1 ? std::sqrt(var / (r.count - 1)) * r.ppl : 0.0;
  return r;
}

std::string format_kld_report(const KldStats& kin) {
  KldStats k = kin;
  std::string o;
  char line[256];
  auto add = [&](const char* fmt, auto... v) {
    std::snprintf(line, sizeof line, fmt, v...);
    o += line;
  };
  if (k.count < 1) return "no tokens scored\n";
  std::sort(k.kld_values.begin(), k.kld_values.end());
  std::sort(k.p_diff_values.begin(), k.p_diff_values.end());
  auto percentile = [](const std::vector<float>& values, float fraction) {
    if (fraction <= 0) return values.front();
    if (fraction >= 1) return values.back();
    float p = fraction * (values.size() - 1);
    const size_t ip = static_cast<size_t>(p);
    p -= ip;
    return (1 - p) * values[ip] + p * values[std::min(ip + 1, values.size() - 1)];
  };
  auto median = [](const std::vector<float>& v) {
    return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
  };
  add("====== Perplexity statistics ======\n");
  const auto log_ppl = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
  const double ppl_val = std::exp(log_ppl.first), ppl_unc = ppl_val * log_ppl.second;
  add("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl_val, ppl_unc);
  const auto log_ppl_base = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
  const double ppl_base_val = std::exp(log_ppl_base.first), ppl_base_unc = ppl_base_val * log_ppl_base.second;
  add("Mean PPL(base)                : %10.6lf ± %10.6lf\n", ppl_base_val, ppl_base_unc);
  const double log_ppl_cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
  const double den = log_ppl.second * log_ppl_base.second;
  add("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", den > 0 ? 100.0 * log_ppl_cov / den : 100.0);
  const double ratio_val = log_ppl.first - log_ppl_base.first;
  const double ratio_unc = std::sqrt(
      std::max(0.0, log_ppl.second * log_ppl.second + log_ppl_base.second * log_ppl_base.second - 2.0 * log_ppl_cov));
  add("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio_val, ratio_unc);
  add("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", std::exp(ratio_val), std::exp(ratio_val) * ratio_unc);
  const double ppl_cov = ppl_val * ppl_base_val * log_ppl_cov;
  add("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", ppl_val - ppl_base_val,
      std::sqrt(std::max(0.0, ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov)));
  add("\n====== KL divergence statistics ======\n");
  const auto kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
  add("Mean    KLD: %10.6lf ± %10.6lf\n", kl.first, kl.second);
  const auto& kv = k.kld_values;
  add("Maximum KLD: %10.6f\n", kv.back());
  add("99.9%%   KLD: %10.6f\n", percentile(kv, 0.999f));
  add("99.0%%   KLD: %10.6f\n", percentile(kv, 0.990f));
  add("95.0%%   KLD: %10.6f\n", percentile(kv, 0.950f));
  add("90.0%%   KLD: %10.6f\n", percentile(kv, 0.900f));
  add("Median  KLD: %10.6f\n", median(kv));
  add("10.0%%   KLD: %10.6f\n", percentile(kv, 0.100f));
  add(" 5.0%%   KLD: %10.6f\n", percentile(kv, 0.050f));
  add(" 1.0%%   KLD: %10.6f\n", percentile(kv, 0.010f));
  add(" 0.1%%   KLD: %10.6f\n", percentile(kv, 0.001f));
  add("Minimum KLD: %10.6f\n", kv.front());
  add("\n====== Token probability statistics ======\n");
  const auto pd = mean_and_uncertainty(k.sum_p_diff, k.sum_p_diff2, k.count);
  add("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * pd.first, 100.0 * pd.second);
  const auto& pv = k.p_diff_values;
  add("Maximum Δp: %6.3lf%%\n", 100.0 * pv.back());
  add("99.9%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.999f));
  add("99.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.990f));
  add("95.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.950f));
  add("90.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.900f));
  add("75.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.750f));
  add("Median  Δp: %6.3lf%%\n", 100.0 * median(pv));
  add("25.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.250f));
  add("10.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.100f));
  add(" 5.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.050f));
  add(" 1.0%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.010f));
  add(" 0.1%%   Δp: %6.3lf%%\n", 100.0 * percentile(pv, 0.001f));
  add("Minimum Δp: %6.3lf%%\n", 100.0 * pv.front());
  const auto mse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count);
  const double rms = std::sqrt(mse.first);
  add("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * rms, rms > 0 ? 100.0 * 0.5 / rms * mse.second : 0.0);
  const double same = 1.0 * k.n_same_top / k.count;
  add("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * same,
      k.count > 1 ? 100.0 * std::sqrt(same * (1.0 - same) / (k.count - 1)) : 0.0);
  return o;
}

}  // namespace sluice
