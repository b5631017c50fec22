// template/lexer: template source -> tokens, with jinja2's whitespace rules (trim_blocks,
// lstrip_blocks, `-` and `+` markers, one trailing newline dropped) applied to the text tokens.
#pragma once
#include <string>
#include <vector>

namespace sluice::tmpl {

enum class Tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok kind;
  std::string text;  // text, name, op, the string's value, or the number's spelling
  int line;
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // strip spaces and tabs before a block or comment tag that starts a line
};

// Throws TemplateError (ErrorKind::syntax) naming the line.
std::vector<Token> lex(const std::string& source, const LexOptions& opt);

}  // namespace sluice::tmpl
