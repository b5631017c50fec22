// server/http_server: `sluice serve`'s HTTP side — OpenAI's routes on cpp-httplib over one
// Engine (server/engine.h). Handlers parse and check the request (server/request.h), render
// the chat template, queue a job and answer from its channel: the whole body, or an SSE
// stream through a chunked content provider. Every failure is an OpenAI error object with
// its status; nothing a client sends can end the process.
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "models/model.h"
#include "server/engine.h"

namespace sluice::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (bind() says which)
  std::string api_key;                      // non-empty: /v1/* wants "Authorization: Bearer KEY"
  std::string model_id;                     // the name /v1/models lists and requests may name
  std::string chat_template;                // a template's text that replaces the model's ("": its own)
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies: 413
  int http_threads = 0;                     // 0: parallel + queue + 8 (every waiting client holds one)
  // --reasoning-format: true (deepseek, auto) sends a reply's reasoning block as the message's
  // reasoning_content (deltas too when streamed); false (none) leaves it inline in the content.
  // A request's own reasoning_format overrides it.
  bool split_reasoning = true;
  EngineOptions engine;
};

class HttpServer {
 public:
  // Builds the chat format (throws sluice::Error for a template that does not parse) and
  // starts the engine thread. Ignores SIGPIPE for the process: a client that closes its
  // socket must fail a write, not kill the server.
  HttpServer(const Model& model, Backend& backend, ServerOptions opt);
  ~HttpServer();

  // Binds the listening socket; returns the port. Throws sluice::Error when it cannot.
  int bind();
  // Serves until stop(); call bind() first.
  void run();
  // Graceful stop, from any thread: new requests get 503, running ones finish for up to
  // `grace` and are then cancelled, then the listener closes and run() returns.
  void stop(std::chrono::milliseconds grace);

  Engine& engine();
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::server
