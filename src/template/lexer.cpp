// template/lexer: jinja2's lexer (jinja2/lexer.py) for the default delimiters, without line
// statements. Text between tags is stripped here, so the parser never sees whitespace rules.
#include "template/lexer.h"

#include <cctype>
#include <cstring>

#include "template/value.h"

namespace sluice::tmpl {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] void syntax(int line, const std::string& msg) { throw TemplateError(ErrorKind::syntax, line, msg); }

// Python's unicode-escape decoding of a string literal's body (jinja2 decodes literals so).
std::string unescape(const std::string& s, int line) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '\\' || k + 1 == s.size()) {
      out += s[k];
      continue;
    }
    const char c = s[++k];
    auto hex = [&](size_t n) {
      uint32_t v = 0;
      for (size_t j = 1; j <= n; ++j) {
        const char h = k + j < s.size() ? s[k + j] : 'g';
        if (!std::isxdigit(static_cast<unsigned char>(h))) syntax(line, "truncated \\x/\\u escape in a string");
        v = v * 16 +
            static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      k += n;
      if (v > 0x10FFFF) syntax(line, "illegal Unicode character in a string");
      utf8_append(out, v);
    };
    switch (c) {
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t n = 0;
          while (n < 3 && k < s.size() && s[k] >= '0' && s[k] <= '7')
            v = v * 8 + static_cast<uint32_t>(s[k++] - '0'), ++n;
          --k;
          utf8_append(out, v);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

struct Lexer {
  const std::string& src;
  const LexOptions& opt;
  std::vector<Token> out;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;

  bool at(const char* s) const { return src.compare(pos, std::strlen(s), s) == 0; }

  void advance(size_t n) {
    for (size_t k = 0; k < n && pos < src.size(); ++k, ++pos)
      if (src[pos] == '\n') ++line;
  }

  // The text before a tag, stripped as the tag's sign and kind say (jinja2's OptionalLStrip).
  void emit_text(std::string text, char sign, bool is_var, int text_line) {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0 && is_space(text[e - 1])) --e;
      text.resize(e);
    } else if (sign != '+' && opt.lstrip_blocks && !is_var) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool ws = l_pos < text.size();
        for (size_t k = l_pos; k < text.size(); ++k) ws = ws && is_space(text[k]);
        if (ws) text.resize(l_pos);
      }
    }
    if (!text.empty()) out.push_back({Tok::text, std::move(text), text_line});
  }

  // After `%}`, `#}` (block_like) or `}}`: `-` eats all whitespace, trim_blocks one newline.
  void tag_end(char sign, bool block_like) {
    if (sign == '-') {
      while (pos < src.size() && is_space(src[pos])) advance(1);
    } else if (sign != '+' && block_like && opt.trim_blocks && pos < src.size() && src[pos] == '\n') {
      advance(1);
    }
    line_starting = pos > 0 && src[pos - 1] == '\n';
  }

  // Inside {{ }} or {% %}: tokens until the end marker (`end` is "}}" or "%}").
  void tag_body(const char* end, bool block) {
    const int begin_line = line;
    std::string open;  // brackets not yet closed: the end marker does not count inside them
    while (true) {
      while (pos < src.size() && is_space(src[pos])) advance(1);
      if (pos >= src.size())
        syntax(begin_line,
               block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      for (char sign : {'-', '+', '\0'}) {
        if (!open.empty()) break;
        if (sign == '+' && !block) continue;
        const std::string m = (sign ? std::string(1, sign) : std::string()) + end;
        if (at(m.c_str())) {
          advance(m.size());
          out.push_back({block ? Tok::block_end : Tok::var_end, "", line});
          tag_end(sign, block);
          return;
        }
      }
      const char c = src[pos];
      const int l = line;
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos;
        while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        bool is_float = false;
        if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1])) &&
            !(pos > 0 && src[pos - 1] == '.')) {
          is_float = true;
          ++e;
          while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        }
        if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
          size_t x = e + 1;
          if (x < src.size() && (src[x] == '+' || src[x] == '-')) ++x;
          if (x < src.size() && std::isdigit(static_cast<unsigned char>(src[x]))) {
            while (x < src.size() && std::isdigit(static_cast<unsigned char>(src[x]))) ++x;
            e = x;
            is_float = true;
          }
        }
        std::string t;
        for (size_t k = pos; k < e; ++k)
          if (src[k] != '_') t += src[k];
        out.push_back({is_float ? Tok::floating : Tok::integer, t, l});
        advance(e - pos);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        out.push_back({Tok::name, src.substr(pos, e - pos), l});
        advance(e - pos);
      } else if (c == '\'' || c == '"') {
        size_t e = pos + 1;
        while (e < src.size() && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        if (e >= src.size()) syntax(l, "unexpected char '" + std::string(1, c) + "'");
        out.push_back({Tok::string, unescape(src.substr(pos + 1, e - pos - 1), l), l});
        advance(e + 1 - pos);
      } else {
        static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~", "<",
                                    ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};
        bool found = false;
        for (const char* o : ops)
          if (at(o)) {
            const char c0 = o[0];
            if (o[1] == 0 && (c0 == '(' || c0 == '[' || c0 == '{')) open += c0 == '(' ? ')' : c0 == '[' ? ']' : '}';
            if (o[1] == 0 && (c0 == ')' || c0 == ']' || c0 == '}')) {
              if (open.empty()) syntax(l, str_cat("unexpected '", c0, "'"));
              if (open.back() != c0) syntax(l, str_cat("unexpected '", c0, "', expected '", open.back(), "'"));
              open.pop_back();
            }
            out.push_back({Tok::op, o, l});
            advance(std::strlen(o));
            found = true;
            break;
          }
        if (!found) syntax(l, "unexpected char '" + std::string(1, c) + "'");
      }
    }
  }

  // {% raw %}...{% endraw %}: the body verbatim (stripped like any text before a tag).
  bool try_raw(char sign, const std::string& pending, int text_line) {
    size_t p = pos + 2 + (sign ? 1 : 0);
    while (p < src.size() && is_space(src[p])) ++p;
    if (src.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src.size() && is_space(src[p])) ++p;
    char end_sign = 0;
    if (src.compare(p, 3, "-%}") == 0)
      end_sign = '-';
    else if (src.compare(p, 2, "%}") != 0)
      return false;
    emit_text(pending, sign, false, text_line);
    advance(p + (end_sign ? 3 : 2) - pos);
    if (end_sign)
      while (pos < src.size() && is_space(src[pos])) advance(1);
    // The body ends at the first {%[-+]? endraw [-+]?%}.
    for (size_t q = src.find("{%", pos); q != std::string::npos; q = src.find("{%", q + 1)) {
      size_t r = q + 2;
      char s2 = 0;
      if (r < src.size() && (src[r] == '-' || src[r] == '+')) s2 = src[r++];
      while (r < src.size() && is_space(src[r])) ++r;
      if (src.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src.size() && is_space(src[r])) ++r;
      char s3 = 0;
      if (r < src.size() && (src[r] == '-' || src[r] == '+')) s3 = src[r++];
      if (src.compare(r, 2, "%}") != 0) continue;
      const int body_line = line;
      const std::string body = src.substr(pos, q - pos);
      line_starting = false;
      emit_text(body, s2, false, body_line);
      advance(r + 2 - pos);
      tag_end(s3, true);
      return true;
    }
    syntax(line, "Missing end of raw directive");
  }

  void run() {
    while (pos < src.size()) {
      size_t best = std::string::npos;
      for (const char* o : {"{{", "{%", "{#"}) best = std::min(best, src.find(o, pos));
      const int text_line = line;
      if (best == std::string::npos) {
        out.push_back({Tok::text, src.substr(pos), line});
        advance(src.size() - pos);
        break;
      }
      std::string text = src.substr(pos, best - pos);
      const char kind = src[best + 1];
      const char sign = best + 2 < src.size() && (src[best + 2] == '-' || src[best + 2] == '+') ? src[best + 2] : 0;
      advance(best - pos);
      if (kind == '%' && try_raw(sign, text, text_line)) continue;
      emit_text(text, sign, kind == '{', text_line);
      line_starting = false;
      advance(2 + (sign ? 1 : 0));
      if (kind == '#') {
        const size_t e = src.find("#}", pos);
        if (e == std::string::npos) syntax(line, "Missing end of comment tag");
        char end_sign = e > pos && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
        advance(e + 2 - pos);
        tag_end(end_sign, true);
      } else if (kind == '%') {
        out.push_back({Tok::block_begin, "", line});
        tag_body("%}", true);
      } else {
        out.push_back({Tok::var_begin, "", line});
        tag_body("}}", false);
      }
    }
    out.push_back({Tok::eof, "", line});
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source, const LexOptions& opt) {
  // jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lx{src, opt, {}};
  lx.run();
  return std::move(lx.out);
}

}  // namespace sluice::tmpl
