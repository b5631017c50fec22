// apps/cli/cmd_serve: `sluice serve` — the OpenAI-compatible HTTP server (sluice/serve.h) over one
// model: options, the signal thread (SIGTERM/SIGINT: stop accepting, let running requests
// finish for --shutdown-grace seconds, cancel the rest, exit 0), and nothing else.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "commands.h"
#include "common_opts.h"
#include "sluice/serve.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

struct ServeOpts {
  CommonOpts co;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int queue = 64;
  int64_t batch = 512;
  std::string api_key, chat_template, alias;
  bool no_prompt_cache = false;
  std::string reasoning_format = "deepseek";
  double cache_ram_mb = 512;
  double max_body_mb = 4;
  double shutdown_grace = 10;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--chat-template: cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_serve(const ServeOpts& o) {
  // Every thread started from here on (backend workers, the engine, httplib's pool) inherits
  // this mask, so the two signals reach only the thread that waits for them below.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  ServeOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.model_id = o.alias.empty() ? std::filesystem::path(o.co.model).stem().string() : o.alias;
  if (!o.chat_template.empty()) so.chat_template = read_file(o.chat_template);
  so.max_body_bytes = static_cast<size_t>(o.max_body_mb * 1024 * 1024);
  so.parallel = o.parallel;
  so.max_queue = o.queue;
  so.max_batch_tokens = o.batch;
  so.prompt_cache = !o.no_prompt_cache;
  so.cache_ram_bytes = o.no_prompt_cache ? 0 : static_cast<size_t>(o.cache_ram_mb * 1024 * 1024);
  so.split_reasoning = o.reasoning_format != "none";

  auto engine = o.co.open();
  so.n_ctx = o.co.context_size(engine->info(), 0, 0);
  auto server = Server::create(*engine, so);
  Server& srv = *server;
  const int port = srv.bind();
  std::thread sig([&] {
    int got = 0;
    sigwait(&sigs, &got);
    std::fprintf(stderr, "serve: %s, stopping (running requests get %.0f s)\n", got == SIGINT ? "SIGINT" : "SIGTERM",
                 o.shutdown_grace);
    srv.stop(std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_grace * 1000)));
  });
  std::fprintf(stderr,
               "serve: %s (%s), backend %s, %d threads; %d slots of %lld tokens, queue %d; listening on http://%s:%d\n",
               so.model_id.c_str(), engine->architecture().c_str(), engine->backend_name().c_str(), engine->n_threads(),
               o.parallel, static_cast<long long>(so.n_ctx), o.queue, o.host.c_str(), port);
  srv.run();
  // run() returns after stop(); if it returned on its own, wake the signal thread to stop.
  pthread_kill(sig.native_handle(), SIGTERM);
  sig.join();
  std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace

CommandRunner add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, streaming, /metrics)");
  o->co.add(cmd);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: any free port)")->capture_default_str()->check(in_range(0, 65535));
  cmd->add_option("--parallel", o->parallel, "requests decoding together (slots)")
      ->capture_default_str()
      ->check(in_range(1, 256));
  cmd->add_option("--queue", o->queue, "requests that may wait for a slot; more get 503")
      ->capture_default_str()
      ->check(in_range(0, 4096));
  cmd->add_option("--batch", o->batch, "most tokens in one forward step (decode rows + prompt chunks)")
      ->capture_default_str()
      ->check(in_range(1, 65536));
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--chat-template", o->chat_template, "Jinja chat template file replacing the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--alias", o->alias, "model id in /v1/models (default: the file's name without .gguf)");
  cmd->add_flag("--no-prompt-cache", o->no_prompt_cache, "evaluate every prompt from the start");
  cmd->add_option("--cache-ram", o->cache_ram_mb,
                  "MiB of host RAM for recent conversations' KV rows beyond the slots (LRU; 0: off)")
      ->capture_default_str()
      ->check(in_range(0.0, 1024.0 * 1024));
  cmd->add_option("--reasoning-format", o->reasoning_format,
                  "deepseek/auto: a reply's <think> block goes to reasoning_content; none: left in the content")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "deepseek", "auto"}));
  cmd->add_option("--max-body-mb", o->max_body_mb, "largest request body in MiB; larger: 413")
      ->capture_default_str()
      ->check(in_range(0.001, 1024));
  cmd->add_option("--shutdown-grace", o->shutdown_grace,
                  "seconds running requests may finish after SIGTERM/SIGINT before they are cancelled")
      ->capture_default_str()
      ->check(in_range(0, kInf));
  return [o] { return run_serve(*o); };
}

}  // namespace sluice::cli
