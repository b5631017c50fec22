// server/http_server: the routes, authentication, error bodies and the SSE stream.
#include "server/http_server.h"

#include <httplib.h>

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include "core/error.h"
#include "runtime/chat_format.h"
#include "runtime/tool_calls.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/responses.h"
#include "web/chat_page.h"

namespace sluice::server {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string ApiError::type() const {
  if (status_ == 401) return "authentication_error";
  if (status_ >= 500) return "server_error";
  return "invalid_request_error";
}

nlohmann::json ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = what();
  e["type"] = type();
  e["param"] = param_.empty() ? nlohmann::json() : nlohmann::json(param_);
  e["code"] = code_.empty() ? nlohmann::json() : nlohmann::json(code_);
  return {{"error", e}};
}

namespace {

// How often a stream that has nothing new writes an SSE comment: the write is what finds a
// client that has gone while its prompt is still being evaluated.
constexpr auto kHeartbeat = 200ms;

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%016llx%04llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The connection's socket, found by its two ends: httplib does not hand handlers the socket,
// and the engine should not wait for a failed write to learn that a client left (a write
// only fails after the peer's reset came back, several steps later on a fast model).
int find_socket(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  auto ends = [](const sockaddr_storage& a, socklen_t n, std::string& host, int& port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), n, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      return false;
    host = h;
    port = std::atoi(p);
    return true;
  };
  while (const dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0)
      continue;
    std::string ph, lh;
    int pp = -1, lp = -1;
    if (!ends(peer, pl, ph, pp) || !ends(local, ll, lh, lp)) continue;
    if (ph == req.remote_addr && pp == req.remote_port && (req.local_port < 0 || lp == req.local_port)) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

// The peer closed the connection: a peek reads end-of-file (or the socket is in error). A
// client that half-closes its side while still reading would look gone too; HTTP clients do
// not do that.
bool peer_closed(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// Whether the chat template shows the model the tools it is given: a probe function's name
// appears in a rendering with it. A template that cannot render the probe counts as showing
// them (nothing is added to what it renders).
bool template_shows_tools(const ChatFormat& fmt) {
  const ojson messages = ojson::array({{{"role", "user"}, {"content", "Hello"}}});
  const ojson tools = ojson::array(
      {{{"type", "function"},
        {"function", {{"name", "sluice_probe_function"}, {"parameters", {{"type", "object"}}}}}}});
  try {
    return fmt.render(messages, tools, /*add_generation_prompt=*/true).find("sluice_probe_function") !=
           std::string::npos;
  } catch (const Error&) {
    return true;
  }
}

void set_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

}  // namespace

struct HttpServer::Impl {
  Impl(const Model& m, Backend& be, ServerOptions o)
      : model(m),
        opt(std::move(o)),
        fmt(m, opt.chat_template),
        tool_format(detect_tool_call_format(fmt.source())),
        shows_tools(template_shows_tools(fmt)),
        markers(detect_reasoning_markers(fmt.source())),
        engine(m, be, opt.engine) {}

  const Model& model;
  ServerOptions opt;
  ChatFormat fmt;
  ToolCallFormat tool_format;  // how the template writes tool calls (none: never parsed)
  // Whether the template renders the request's tools; if not (and it has no tool syntax),
  // they go into a system message (with_tools_system_prompt) and replies are parsed as hermes.
  bool shows_tools;
  ReasoningMarkers markers;  // what the template's model thinks between
  Engine engine;
  httplib::Server svr;
  HttpCounters http;
  std::atomic<bool> stopping{false};
  std::atomic<int> streams{0};  // SSE responses not yet written to the end
  int listen_fd = -1;
  int64_t created = unix_now();

  void routes();
  bool authorized(const httplib::Request& req) const;
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  // A completion's prompt tokens.
  std::vector<int32_t> prompt_tokens(const CompletionRequest& r) const;
  // A chat's prompt: the chat template's text.
  std::string render(const CompletionRequest& r) const;
  // The request's tools go into a system message: the template would not show them and has
  // no tool syntax of its own (templates with one render their tools).
  bool injects_tools(const CompletionRequest& r) const {
    return r.chat && !shows_tools && tool_format == ToolCallFormat::none && r.tools.is_array() && !r.tools.empty();
  }
  ojson model_json() const;
};

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (opt.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string want = "Bearer " + opt.api_key;
  // Compared in time independent of where they first differ.
  if (h.size() != want.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < h.size(); ++i) diff |= static_cast<unsigned char>(h[i] ^ want[i]);
  return diff == 0;
}

ojson HttpServer::Impl::model_json() const {
  ojson m;
  m["id"] = opt.model_id;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "sluice";
  m["meta"] = {{"arch", model.hparams().arch},
               {"n_vocab", model.hparams().n_vocab},
               {"n_ctx_train", model.hparams().n_ctx_train},
               {"n_ctx", engine.n_ctx()}};
  return m;
}

std::vector<int32_t> HttpServer::Impl::prompt_tokens(const CompletionRequest& r) const {
  if (r.prompt_is_ids) return r.prompt_ids;
  // As llama-server: the vocab's BOS rule, and special tokens spelled in the text parsed.
  return model.tokenizer().encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
}

std::string HttpServer::Impl::render(const CompletionRequest& r) const {
  try {
    return injects_tools(r) ? fmt.render(with_tools_system_prompt(r.messages, r.tools), ojson(), true)
                            : fmt.render(r.messages, r.tools, /*add_generation_prompt=*/true);
  } catch (const Error& e) {
    // A template's raise_exception ("roles must alternate") is about the messages sent.
    throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
}

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const CompletionRequest r = parse_completion_request(req.body, chat, model.tokenizer().n_vocab());
  if (!r.model.empty() && r.model != opt.model_id)
    throw ApiError(404, "the model '" + r.model + "' does not exist (this server has '" + opt.model_id + "')", "model",
                   "model_not_found");
  Job job;
  const std::string rendered = chat ? render(r) : std::string();
  // The generation starts inside a reasoning block the template's prompt opened (Qwen3, R1).
  const bool opens = chat && prompt_opens_reasoning(rendered, markers);
  // A forced tool call: the reply is one call of the allowed functions in the model's syntax
  // (hermes' where the template has none), its arguments fitting their schema. The text every
  // allowed call starts with (all of its markup up to the arguments when one function is
  // forced) goes into the prompt instead of being sampled token by token under the
  // constraint, and the reply is parsed with it in front.
  const ToolCallFormat request_format = injects_tools(r) ? ToolCallFormat::hermes : tool_format;
  ToolCallFormat call_format = request_format;
  std::vector<JsonFrame> frames;
  JsonFrameRepeat repeat;  // further calls (parallel ones under "required") and the close
  std::string forced;
  if (chat && !r.forced_tools.empty()) {
    for (const auto& t : r.forced_tools) {
      ToolCallFrame f = tool_call_frame(request_format, t.name);
      call_format = f.format;
      // A prompt that opened the reasoning: close it first, as the template writes it.
      frames.push_back({(opens ? markers.close + "\n\n" : "") + f.before, t.arguments, f.after});
      if (r.forced_parallel && !f.next.empty()) repeat.next.push_back(f.next);
      repeat.close = f.close;
    }
    forced = frames[0].prefix;
    for (const JsonFrame& f : frames)
      forced.resize(static_cast<size_t>(
          std::mismatch(forced.begin(), forced.end(), f.prefix.begin(), f.prefix.end()).first - forced.begin()));
    for (JsonFrame& f : frames) f.prefix.erase(0, forced.size());
  }
  job.prompt = chat ? fmt.tokenize(rendered + forced) : prompt_tokens(r);
  if (job.prompt.empty()) throw ApiError(400, "the prompt has no tokens", chat ? "messages" : "prompt");
  const int64_t n_ctx = engine.n_ctx();
  if (static_cast<int64_t>(job.prompt.size()) > n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(job.prompt.size()) + " tokens, more than the context of " +
                       std::to_string(n_ctx) + " (--ctx)",
                   chat ? "messages" : "prompt", "context_length_exceeded");
  job.params = r.gen;
  const Tokenizer* tok_ptr = &model.tokenizer();
  auto piece = [tok_ptr](int32_t id) { return std::string_view(tok_ptr->token_to_piece(id)); };
  auto is_end = [tok_ptr](int32_t id) { return tok_ptr->is_eog(id); };
  if (r.schema) {
    job.params.make_filter = [schema = r.schema, piece, is_end] {
      return std::make_unique<JsonTokenFilter>(*schema, piece, is_end);
    };
  }
  if (!frames.empty()) {
    job.params.make_filter = [frames = std::move(frames), repeat = std::move(repeat), piece, is_end] {
      return std::make_unique<FramedJsonTokenFilter>(frames, piece, is_end, repeat);
    };
  }
  // No max_tokens: until the context is full (finish_reason "length"), as OpenAI's API does.
  job.params.n_predict = r.max_tokens < 0 ? std::numeric_limits<int>::max() : static_cast<int>(r.max_tokens);
  auto ch = std::make_shared<Channel>();
  // The fd stays this connection's while the job runs: httplib closes it only after the
  // response is written, and the job has ended by then.
  if (const int fd = find_socket(req); fd >= 0) ch->set_client_gone_check([fd] { return peer_closed(fd); });
  job.channel = ch;
  if (stopping.load()) throw ApiError(503, "the server is shutting down", {}, "unavailable");
  if (!engine.submit(std::move(job)))
    throw ApiError(503, "the server is busy: the request queue is full, retry later", {}, "queue_full");

  ResponseHead head{chat, random_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(), opt.model_id};
  const Tokenizer& tok = model.tokenizer();
  // With tools, the reply is parsed back into tool_calls in the template's syntax (the forced
  // call's syntax when one was forced). Reasoning goes to reasoning_content unless the request
  // or --reasoning-format says "none"; stream and non-stream split it with the same splitter
  // (runtime/reasoning), so both give the same text.
  const bool tools = chat && !r.tools.is_null() && call_format != ToolCallFormat::none;
  const bool split = chat && r.split_reasoning.value_or(opt.split_reasoning);
  ToolCallParseOptions parse;
  parse.parse_tool_calls = tools;
  parse.parse_reasoning = split;
  parse.reasoning_open = opens;
  parse.reasoning_markers = markers;
  parse.tools = r.tools;
  if (!r.stream) {
    std::string text = forced;  // what the reply's call starts with, already in the prompt
    std::vector<TokenLogprob> lps;
    JobUpdate u;
    for (;;) {
      if (!ch->pop(u, 1s)) continue;
      text += u.text;
      lps.insert(lps.end(), u.logprobs.begin(), u.logprobs.end());
      if (u.end) break;
    }
    if (!u.end->error.empty()) throw ApiError(u.end->error_status, u.end->error);
    const ojson lp = r.logprobs ? logprobs_json(tok, lps, chat) : ojson();
    const ojson msg = tools || split ? parse_model_output(text, call_format, parse).to_message() : ojson();
    res.set_content(dump(full_response(head, text, lp, *u.end, msg)), "application/json");
    return;
  }

  struct StreamState {
    std::shared_ptr<Channel> ch;
    ResponseHead head;
    bool logprobs = false, include_usage = false, first = true;
    size_t offset = 0;  // completions' text_offset
    // With tools: the text so far, and how much of it went out as content (the rest may be
    // the start of a tool call, held until the end).
    bool tools = false;
    ToolCallFormat format = ToolCallFormat::none;
    ToolCallParseOptions parse;
    std::string acc;
    size_t sent = 0;
    // With the reasoning split: the splitter, and what it gave for the update being written.
    std::unique_ptr<ReasoningSplitter> split;
    std::string reasoning_buf, answer_buf;
    std::string forced;  // the forced call's start, already in the prompt: goes in front of the first update
  };
  auto st = std::make_shared<StreamState>();
  st->ch = ch;
  st->head = head;
  st->logprobs = r.logprobs;
  st->include_usage = r.include_usage;
  st->tools = tools;
  st->format = call_format;
  st->parse = parse;
  st->parse.parse_reasoning = false;  // acc holds the answer only: the splitter took the reasoning
  st->forced = forced;
  if (split) {
    StreamState* raw = st.get();
    st->split = std::make_unique<ReasoningSplitter>(
        opens, [raw](bool reasoning, std::string_view t) { (reasoning ? raw->reasoning_buf : raw->answer_buf) += t; },
        markers);
  }
  streams.fetch_add(1);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, &tok](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) {
          if (sink.is_writable() && sink.write(s.data(), s.size())) return true;
          st->ch->cancel();  // the client went away: free its slot at the next step
          return false;
        };
        JobUpdate u;
        if (!st->ch->pop_all(u, kHeartbeat)) return send(": keep-alive\n\n");
        // Everything this call has to say goes out in one write (see Channel::pop_all).
        std::string out;
        auto event = [&](const ojson& j) { out += "data: " + dump(j) + "\n\n"; };
        if (st->first && st->head.chat) {
          st->first = false;
          event(stream_chunk(st->head, "", ojson(), nullptr, /*role=*/true));
        }
        std::string text = std::exchange(st->forced, {}) + u.text, reasoning;
        if (st->split) {
          st->split->push(text);
          if (u.end) st->split->flush();
          reasoning = std::exchange(st->reasoning_buf, {});
          text = std::exchange(st->answer_buf, {});
        }
        if (st->tools) {
          st->acc += text;
          const size_t hold = std::max(st->sent, tool_call_start(st->acc, st->format));
          text = st->acc.substr(st->sent, hold - st->sent);
          st->sent = hold;
        }
        if (!text.empty() || !reasoning.empty() || !u.logprobs.empty()) {
          const ojson lp = st->logprobs ? logprobs_json(tok, u.logprobs, st->head.chat, st->offset) : ojson();
          st->offset += text.size();
          event(stream_chunk(st->head, text, lp, nullptr, false, reasoning));
        }
        if (!u.end) return out.empty() || send(out);
        if (!u.end->error.empty()) {
          event(ApiError(u.end->error_status, u.end->error).to_json());
        } else {
          const char* finish = finish_reason(u.end->stop);
          if (st->tools) {
            // The held text: tool calls when it parses as them, else content after all.
            const ParsedOutput po = parse_model_output(st->acc, st->format, st->parse);
            std::string rest = st->acc.substr(st->sent);
            if (!po.tool_calls.empty()) rest = po.content.size() > st->sent ? po.content.substr(st->sent) : "";
            if (!rest.empty()) event(stream_chunk(st->head, rest, ojson(), nullptr));
            if (!po.tool_calls.empty()) {
              event(tool_calls_chunk(st->head, po.to_message()["tool_calls"]));
              finish = "tool_calls";
            }
          }
          event(stream_chunk(st->head, "", ojson(), finish));
          if (st->include_usage) event(usage_chunk(st->head, *u.end));
        }
        out += "data: [DONE]\n\n";
        if (!send(out)) return false;
        sink.done();
        return true;
      },
      [this, st](bool success) {
        if (!success) st->ch->cancel();
        streams.fetch_sub(1);
      });
}

void HttpServer::Impl::routes() {
  svr.new_task_queue = [n = opt.http_threads > 0 ? opt.http_threads : opt.engine.parallel + opt.engine.max_queue + 8] {
    return new httplib::ThreadPool(static_cast<size_t>(n));
  };
  svr.set_payload_max_length(opt.max_body_bytes);
  // httplib calls this for the listening socket too; bind() needs that socket (below).
  svr.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    if (listen_fd < 0) listen_fd = sock;
  });
  svr.set_keep_alive_timeout(2);
  svr.set_read_timeout(10, 0);
  svr.set_write_timeout(10, 0);

  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // /health and /metrics stay open for probes and scrapers; the API wants the key.
    // The page itself is open too: it asks for the key and sends it with its API calls.
    const bool open = req.path == "/health" || req.path == "/metrics" || req.path == "/";
    if (!open && !authorized(req)) {
      set_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", {}, "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib calls this for every status >= 400: it fills the bodies it made itself (404 for
  // an unknown route, 413 past the payload limit, 400 for a malformed request line).
  svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    http.count(res.status);
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 404   ? "no route " + req.method + " " + req.path
                      : res.status == 413 ? "the body is larger than " + std::to_string(opt.max_body_bytes) + " bytes"
                                          : "bad request";
    set_error(res, ApiError(res.status, msg));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    set_error(res, ApiError(500, msg));
  });

  auto guarded = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        set_error(res, e);
      } catch (const std::exception& e) {
        set_error(res, ApiError(500, e.what()));
      }
      if (res.status < 400) http.count(res.status < 0 ? 200 : res.status);
    };
  };
  auto chat = guarded([this](const httplib::Request& q, httplib::Response& s) { completion(q, s, true); });
  auto text = guarded([this](const httplib::Request& q, httplib::Response& s) { completion(q, s, false); });
  svr.Post("/v1/chat/completions", chat);
  svr.Post("/chat/completions", chat);
  svr.Post("/v1/completions", text);
  svr.Post("/completions", text);
  auto models = guarded([this](const httplib::Request&, httplib::Response& s) {
    s.set_content(dump({{"object", "list"}, {"data", ojson::array({model_json()})}}), "application/json");
  });
  svr.Get("/v1/models", models);
  svr.Get("/models", models);
  svr.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& q, httplib::Response& s) {
            if (q.matches[1] != opt.model_id)
              throw ApiError(404, "the model '" + q.matches[1].str() + "' does not exist", "model", "model_not_found");
            s.set_content(dump(model_json()), "application/json");
          }));
  // The chat page (web/chat.html, embedded at build time): it talks to the routes above.
  svr.Get("/", guarded([](const httplib::Request&, httplib::Response& s) {
            s.set_content(kChatPageHtml, "text/html; charset=utf-8");
          }));
  svr.Get("/health", guarded([this](const httplib::Request&, httplib::Response& s) {
            if (stopping.load()) throw ApiError(503, "the server is shutting down", {}, "unavailable");
            s.set_content(R"({"status":"ok"})", "application/json");
          }));
  svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& s) {
            s.set_content(render_metrics(engine.stats(), http.snapshot(), opt.engine.parallel),
                          "text/plain; version=0.0.4");
          }));
}

HttpServer::HttpServer(const Model& model, Backend& backend, ServerOptions opt) {
  std::signal(SIGPIPE, SIG_IGN);
  if (opt.model_id.empty()) opt.model_id = "sluice";
  impl_ = std::make_unique<Impl>(model, backend, std::move(opt));
  impl_->routes();
}

HttpServer::~HttpServer() {
  if (impl_) stop(0ms);
}

int HttpServer::bind() {
  Impl& s = *impl_;
  int port = s.opt.port;
  if (port == 0) {
    port = s.svr.bind_to_any_port(s.opt.host);
    if (port < 0) fail("serve: cannot bind ", s.opt.host, " to a free port");
  } else if (!s.svr.bind_to_port(s.opt.host, port)) {
    fail("serve: cannot listen on ", s.opt.host, ":", port, " (in use, or not an address of this machine)");
  }
  // The library listens with a backlog of 5: a burst of clients past that has its SYNs
  // dropped and retried a second later (seen as 1 s time-to-first-token at p99 with 16
  // clients). Listening again on the socket raises the backlog (Linux updates it in place).
  if (s.listen_fd >= 0) ::listen(s.listen_fd, 1024);
  return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  s.stopping.store(true);
  s.engine.drain(grace);  // running requests end (finished or cancelled), their handlers answer
  // httplib stops writing a chunked body once the listener is closed: let the streams write
  // their ends first (each has its last update already; a stuck client gets a few seconds).
  for (int i = 0; i < 500 && s.streams.load() > 0; ++i) std::this_thread::sleep_for(10ms);
  s.svr.stop();
}

Engine& HttpServer::engine() { return impl_->engine; }

std::string HttpServer::metrics_text() const {
  return render_metrics(impl_->engine.stats(), impl_->http.snapshot(), impl_->opt.engine.parallel);
}

}  // namespace sluice::server
