// core/ascii: character classes of ASCII text that are locale-independent (std::isspace is not).
#pragma once

namespace sluice {

// The whitespace of JSON (RFC 8259) and of the chat formats' markup: space, tab, LF, CR.
inline bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace sluice
