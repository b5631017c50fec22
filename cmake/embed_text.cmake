# cmake/embed_text.cmake: writes a text file into a C++ header as one string constant, so the
# binary carries it (the chat page of `sluice serve`: web/chat.html). Run as a build step:
#   cmake -DIN=FILE -DOUT=HEADER -DNAME=kIdentifier -P cmake/embed_text.cmake
# The text goes in as a raw string literal; a file that contains the delimiter is refused.
file(READ "${IN}" text)
set(delim "sluice_embed")
string(FIND "${text}" ")${delim}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )${delim}\"")
endif()
get_filename_component(name_only "${IN}" NAME)
file(WRITE "${OUT}.tmp" "// Generated from ${name_only} by cmake/embed_text.cmake; do not edit.\n#pragma once\n\nnamespace sluice {\ninline constexpr char ${NAME}[] = R\"${delim}(${text})${delim}\";\n}  // namespace sluice\n")
file(RENAME "${OUT}.tmp" "${OUT}")
