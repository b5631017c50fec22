// tests/fuzz/request_libfuzzer: libFuzzer entry point for the server's request checks
// (src/server/request.cpp, compiled into this target alone: the rest of src/server needs
// httplib). Input: a request body, tried as a chat and as a completions request. Contract:
// parse_completion_request returns a request whose fields are in range, or throws ApiError
// with a 4xx; any other exception, a crash or UB is a bug (a client could send it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/api_error.h"
#include "server/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  constexpr int32_t kVocab = 32000;
  for (bool chat : {false, true}) {
    try {
      const sluice::server::CompletionRequest r = sluice::server::parse_completion_request(body, chat, kVocab);
      const auto& sp = r.gen.sampler;
      if (r.max_tokens != -1 && (r.max_tokens < 1 || r.max_tokens > INT32_MAX)) std::abort();
      if (!(sp.temp >= 0 && sp.temp <= 2) || !(sp.top_p >= 0 && sp.top_p <= 1) || sp.top_k < 0) std::abort();
      if (!(sp.min_p >= 0 && sp.min_p <= 1)) std::abort();
      if (r.gen.n_logprobs < -1 || r.gen.n_logprobs > 20) std::abort();
      if (chat && (!r.messages.is_array() || r.messages.empty())) std::abort();
      if (chat)
        for (const auto& m : r.messages)
          if (!m["role"].is_string() || !(m["content"].is_string() || m["content"].is_null())) std::abort();
      if (!chat && r.prompt_is_ids)
        for (int32_t t : r.prompt_ids)
          if (t < 0 || t >= kVocab) std::abort();
    } catch (const sluice::server::ApiError& e) {
      if (e.status() < 400 || e.status() >= 500) std::abort();
    }
  }
  return 0;
}
