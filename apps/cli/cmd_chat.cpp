// apps/cli/cmd_chat: `sluice chat -m M` — an interactive terminal chat: the model's chat template
// over the conversation (sluice/chat.h: the prompt cache keeps each turn from
// re-processing the ones before), streamed replies with reasoning shown apart, line editing and
// history with libedit on a terminal, plain line reads otherwise (a conversation can be piped
// in), /commands, multi-line input, and Ctrl-C that stops a reply without quitting.
#include <histedit.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common_opts.h"
#include "sluice/chat.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ChatArgs {
  CommonOpts co;
  GenerateOptions gp;
  std::string chat_template, system;
  bool verbose = false, no_prompt_cache = false;
};

// Ctrl-C: counted here, read by the reply's cancel check and by the prompt. Installed without
// SA_RESTART so a read waiting at the prompt returns EINTR instead of resuming.
volatile std::sig_atomic_t g_interrupts = 0;
void on_sigint(int) { g_interrupts = g_interrupts + 1; }

enum class ReadResult { line, eof, interrupted };

// One line of input: libedit (editing, history) on a terminal, getline(3) otherwise.
class LineReader {
 public:
  explicit LineReader(bool tty) : tty_(tty) {
    if (!tty_) return;
    el_ = el_init("sluice", stdin, stdout, stderr);
    hist_ = history_init();
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, 1000);
    history(hist_, &ev, H_SETUNIQUE, 1);
    if (const char* home = std::getenv("HOME")) {
      hist_file_ = std::string(home) + "/.sluice_history";
      history(hist_, &ev, H_LOAD, hist_file_.c_str());
    }
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, history, hist_);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_PROMPT, &LineReader::prompt_fn);
  }
  ~LineReader() {
    if (hist_) {
      HistEvent ev;
      if (!hist_file_.empty()) history(hist_, &ev, H_SAVE, hist_file_.c_str());
      history_end(hist_);
    }
    if (el_) el_end(el_);
    std::free(buf_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  ReadResult read(const char* prompt, std::string& line) {
    prompt_ = prompt;
    errno = 0;
    if (tty_) {
      int n = 0;
      const char* s = el_gets(el_, &n);
      if (!s || n < 0) return g_interrupts || errno == EINTR ? ReadResult::interrupted : ReadResult::eof;
      line.assign(s, static_cast<size_t>(n));
    } else {
      const ssize_t n = getline(&buf_, &cap_, stdin);
      if (n < 0) {
        const bool intr = g_interrupts || errno == EINTR;
        clearerr(stdin);
        return intr ? ReadResult::interrupted : ReadResult::eof;
      }
      line.assign(buf_, static_cast<size_t>(n));
    }
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return ReadResult::line;
  }

  void remember(const std::string& entry) {
    if (!hist_ || entry.empty()) return;
    HistEvent ev;
    history(hist_, &ev, H_ENTER, entry.c_str());
  }

 private:
  static char* prompt_fn(EditLine* el) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return const_cast<char*>(static_cast<LineReader*>(self)->prompt_);
  }

  bool tty_;
  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
  std::string hist_file_;
  const char* prompt_ = "";
  char* buf_ = nullptr;
  size_t cap_ = 0;
};

// One message: a line; a line ending in '\' continues on the next; a line starting with """
// opens a block that ends at a line ending with """.
ReadResult read_message(LineReader& in, bool tty, std::string& msg) {
  constexpr std::string_view kQuotes = "\"\"\"";
  const char* more = tty ? "... " : "";
  std::string line;
  ReadResult r = in.read(tty ? "> " : "", line);
  if (r != ReadResult::line) return r;
  msg.clear();
  if (line.starts_with(kQuotes)) {
    std::string body = line.substr(3);  // text after the opening quotes
    if (body.size() >= 3 && body.ends_with(kQuotes)) {
      msg = body.substr(0, body.size() - 3);  // """one line"""
      return ReadResult::line;
    }
    std::vector<std::string> lines;
    if (!body.empty()) lines.push_back(body);
    for (;;) {
      if ((r = in.read(more, line)) == ReadResult::interrupted) return r;
      if (r == ReadResult::eof) break;  // input ended inside the block: send what there is
      if (line.ends_with(kQuotes)) {
        line.resize(line.size() - 3);
        if (!line.empty()) lines.push_back(line);
        break;
      }
      lines.push_back(line);
    }
    for (size_t i = 0; i < lines.size(); ++i) msg += (i ? "\n" : "") + lines[i];
    return ReadResult::line;
  }
  while (line.ends_with("\\")) {
    line.pop_back();
    msg += line + "\n";
    if ((r = in.read(more, line)) != ReadResult::line) return r == ReadResult::eof ? ReadResult::line : r;
  }
  msg += line;
  return ReadResult::line;
}

const char* kHelp =
    "commands:\n"
    "  /reset          forget the conversation (the system prompt stays)\n"
    "  /system TEXT    set the system prompt (/system alone shows it)\n"
    "  /save FILE      write the conversation as JSON messages\n"
    "  /load FILE      read a conversation written by /save (OpenAI's message array)\n"
    "  /quit           leave (also Ctrl-D, or Ctrl-C twice at the prompt)\n"
    "input: end a line with \\ to continue it; \"\"\" opens and closes a block of lines.\n"
    "Ctrl-C during a reply stops it.\n";

// The replies go to stdout, everything else to stderr.
void note(const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); }

// Runs one /command; returns false for /quit.
bool run_command(Chat& chat, const std::string& msg) {
  const size_t sp = msg.find(' ');
  const std::string cmd = msg.substr(0, sp);
  std::string arg = sp == std::string::npos ? "" : msg.substr(sp + 1);
  while (!arg.empty() && arg.front() == ' ') arg.erase(0, 1);
  if (cmd == "/quit" || cmd == "/exit") return false;
  if (cmd == "/help") {
    std::fputs(kHelp, stderr);
  } else if (cmd == "/reset") {
    chat.reset();
    note("[conversation cleared]");
  } else if (cmd == "/system") {
    if (arg.empty()) {
      note(chat.system().empty() ? "[no system prompt]" : "[system prompt] " + chat.system());
    } else {
      chat.set_system(arg);
      note("[system prompt set]");
    }
  } else if (cmd == "/save") {
    if (arg.empty()) fail("/save needs a file name");
    std::ofstream out(arg, std::ios::binary);
    out << chat.messages_json(2) << "\n";
    if (!out) fail("cannot write ", arg);
    note("[saved " + std::to_string(chat.n_messages()) + " messages to " + arg + "]");
  } else if (cmd == "/load") {
    if (arg.empty()) fail("/load needs a file name");
    std::ifstream in(arg, std::ios::binary);
    if (!in) fail("cannot read ", arg);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail(arg, " is not JSON");
    chat.set_messages_json((j.is_object() && j.contains("messages") ? j["messages"] : j).dump());
    note("[loaded " + std::to_string(chat.n_messages()) + " messages from " + arg + "]");
  } else {
    fail("unknown command ", cmd, " (/help lists them)");
  }
  return true;
}

// Streams one reply: reasoning dim on a colour terminal, framed by [thinking] lines otherwise.
class ReplyPrinter {
 public:
  explicit ReplyPrinter(bool color) : color_(color) {}
  bool print(std::string_view text, bool reasoning) {
    if (reasoning != in_reasoning_) {
      if (reasoning)
        std::fputs(color_ ? "\033[2m" : "[thinking]\n", stdout);
      else
        std::fputs(color_ ? "\033[0m\n\n" : "\n[/thinking]\n", stdout);
      in_reasoning_ = reasoning;
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  void finish() {
    if (in_reasoning_) std::fputs(color_ ? "\033[0m" : "\n[/thinking]", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  bool color_;
  bool in_reasoning_ = false;
};

void report_turn(const ChatReply& t, const ChatArgs& a, int64_t n_ctx) {
  const GenerateStats& st = t.stats;
  if (st.stop_reason == StopReason::callback) note("[stopped]");
  if (st.stop_reason == StopReason::context_full)
    note("[context full at " + std::to_string(n_ctx) +
         " tokens: the reply was cut. /reset starts over; /save FILE keeps the conversation for a run with a "
         "larger --ctx]");
  if (st.stop_reason == StopReason::max_tokens) note("[reply cut at -n " + std::to_string(a.gp.n_predict) + " tokens]");
  if (a.verbose)
    std::fprintf(stderr,
                 "[prompt: %lld tokens, %lld reused from the cache, %lld evaluated in %.3f s (%.1f tok/s); reply: %d "
                 "tokens in %.3f s (%.1f tok/s); stop: %s]\n",
                 static_cast<long long>(t.n_prompt), static_cast<long long>(t.n_reused),
                 static_cast<long long>(t.n_evaluated), st.prompt_seconds,
                 t.n_evaluated / std::max(st.prompt_seconds, 1e-9), st.n_generated, st.generate_seconds,
                 st.n_generated / std::max(st.generate_seconds, 1e-9), stop_reason_name(st.stop_reason));
}

int run(ChatArgs& a) {
  std::string override_source;
  if (!a.chat_template.empty()) {
    std::ifstream in(a.chat_template, std::ios::binary);
    if (!in) fail("--chat-template: cannot read ", a.chat_template);
    override_source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (override_source.empty()) fail("--chat-template: ", a.chat_template, " is empty");
  }
  const auto t_load = std::chrono::steady_clock::now();
  auto engine = a.co.open();
  auto chat = Chat::create(*engine, override_source);
  engine->set_context(a.co.context_size(engine->info(), 1, 0));
  chat->start(a.gp, !a.no_prompt_cache);
  if (!a.system.empty()) chat->set_system(a.system);
  std::fprintf(stderr, "loaded %s (%s) in %.2f s; backend %s, %d threads; context %lld tokens; template: %s\n",
               a.co.model.c_str(), engine->architecture().c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
               engine->backend_name().c_str(), engine->n_threads(), static_cast<long long>(engine->context_size()),
               !override_source.empty()       ? a.chat_template.c_str()
               : chat->template_is_fallback() ? "ChatML (the model has none)"
                                              : "the model's own");

  const bool tty = isatty(STDIN_FILENO);
  const char* no_color = std::getenv("NO_COLOR");
  const bool color = isatty(STDOUT_FILENO) && !(no_color && *no_color);
  if (tty) note("/help lists the commands; Ctrl-C stops a reply; Ctrl-D or /quit leaves");
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: see g_interrupts
  sigaction(SIGINT, &sa, nullptr);

  LineReader in(tty);
  bool interrupted_at_prompt = false;
  for (;;) {
    g_interrupts = 0;
    std::string msg;
    const ReadResult r = read_message(in, tty, msg);
    if (r == ReadResult::eof) break;
    if (r == ReadResult::interrupted) {
      if (interrupted_at_prompt) break;
      interrupted_at_prompt = true;
      note("\n[Ctrl-C again (or Ctrl-D) to quit]");
      continue;
    }
    interrupted_at_prompt = false;
    if (msg.find_first_not_of(" \t\n") == std::string::npos) continue;
    in.remember(msg);
    try {
      if (msg.front() == '/') {
        if (!run_command(*chat, msg)) break;
        continue;
      }
      ReplyPrinter out(color);
      const ChatReply t = chat->send(
          msg, [&](std::string_view text, bool reasoning) { return out.print(text, reasoning); },
          [] { return g_interrupts > 0; });
      out.finish();
      report_turn(t, a, engine->context_size());
    } catch (const Error& e) {
      std::string m = e.what();
      if (m.starts_with("context full"))
        m += ". /reset starts over; /save FILE keeps the conversation for a run with a larger --ctx";
      note("error: " + m);
    } catch (const std::exception& e) {
      note(std::string("internal error: ") + e.what());  // reported, and the chat goes on
    }
  }
  a.co.report_experts(*engine);
  return 0;
}

}  // namespace

CommandRunner add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  a->gp.n_predict = 1024;  // a reply's limit; the context is the other one
  auto* cmd = app.add_subcommand("chat", "interactive chat with the model's chat template and a prompt cache");
  cmd->footer(
      "Reads lines from the terminal (libedit: editing, history in ~/.sluice_history) or, when stdin is not a\n"
      "terminal, plainly, so a conversation can be piped in. Replies go to stdout, everything else to stderr.\n" +
      std::string(kHelp));
  a->co.add(cmd);
  add_generate_options(cmd, a->gp);
  cmd->add_option("--chat-template", a->chat_template, "Jinja2 chat template file replacing the model's own")
      ->check(CLI::ExistingFile);
  cmd->add_option("--system", a->system, "system prompt");
  cmd->add_flag("-v,--verbose", a->verbose,
                "after each reply: prompt tokens reused from the cache and evaluated, speeds");
  cmd->add_flag("--no-prompt-cache", a->no_prompt_cache, "evaluate the whole conversation every turn");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
