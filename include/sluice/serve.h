// sluice/serve.h: the OpenAI-compatible HTTP server over an Engine's model and backend
// (`sluice serve`; libsluice_server): chat and text completions, streaming, /metrics, the
// chat page, continuous batching of parallel requests and a prompt cache.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "sluice/sluice.h"

namespace sluice {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (bind() says which)
  std::string api_key{};                    // non-empty: /v1/* wants "Authorization: Bearer KEY"
  std::string model_id{};                   // the name /v1/models lists
  std::string chat_template{};              // a template's text replacing the model's ("": its own)
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies: 413
  bool split_reasoning = true;              // a reply's reasoning block goes to reasoning_content
  int parallel = 4;                         // requests decoding together (slots)
  int max_queue = 64;                       // requests waiting for a slot; more get 503
  int64_t max_batch_tokens = 512;           // tokens per forward step
  bool prompt_cache = true;                 // each slot keeps its last sequence for prefix reuse
  size_t cache_ram_bytes = 0;               // host RAM for recent conversations beyond the slots
  int64_t n_ctx = 0;                        // each request's context (the Engine's KvOptions codecs)
};

class Server {
 public:
  // Builds the chat format (throws Error for a template that does not parse, or a bad cache
  // type) and starts the engine thread. The Engine must outlive it.
  static std::unique_ptr<Server> create(Engine& engine, const ServeOptions& opt);
  ~Server();
  int bind();  // the listening socket; returns the port. Throws Error when it cannot.
  void run();  // serves until stop()
  // From any thread: new requests get 503, running ones finish for up to `grace` and are then
  // cancelled, then run() returns.
  void stop(std::chrono::milliseconds grace);

 private:
  Server();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
