// server/serve_api: sluice/serve.h — the public Server over HttpServer, with the Engine's model,
// backend and KV codecs.
#include "sluice/serve.h"

#include "api/engine_impl.h"
#include "server/http_server.h"

namespace sluice {

struct Server::Impl {
  std::unique_ptr<server::HttpServer> http;
};

Server::Server() : impl_(std::make_unique<Impl>()) {}
Server::~Server() = default;

std::unique_ptr<Server> Server::create(Engine& engine, const ServeOptions& o) {
  Engine::Impl& e = EngineAccess::impl(engine);
  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.model_id = o.model_id;
  so.chat_template = o.chat_template;
  so.max_body_bytes = o.max_body_bytes;
  so.split_reasoning = o.split_reasoning;
  so.engine.parallel = o.parallel;
  so.engine.max_queue = o.max_queue;
  so.engine.max_batch_tokens = o.max_batch_tokens;
  so.engine.prompt_cache = o.prompt_cache;
  so.engine.cache_ram_bytes = o.cache_ram_bytes;
  so.engine.memory.kv = kv_cache_options(e.kv, o.n_ctx);
  std::unique_ptr<Server> s(new Server());
  s->impl_->http = std::make_unique<server::HttpServer>(*e.model, *e.backend, so);
  return s;
}

int Server::bind() { return impl_->http->bind(); }
void Server::run() { impl_->http->run(); }
void Server::stop(std::chrono::milliseconds grace) { impl_->http->stop(grace); }

}  // namespace sluice
