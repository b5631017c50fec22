// tests/fuzz/template_seeds: writes the seed corpus of template_libfuzzer (scripts/fuzz runs it
// with ../shared): a copy of every chat-templates/*.jinja under the given folder, plus a few
// small templates touching the language corners the real ones do not.
//
//   template_seeds OUT_DIR [SHARED_DIR]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: template_seeds OUT_DIR [SHARED_DIR]\n");
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out);
  int n = 0;
  if (argc > 2 && fs::exists(fs::path(argv[2]) / "chat-templates")) {
    for (const auto& e : fs::directory_iterator(fs::path(argv[2]) / "chat-templates")) {
      if (e.path().extension() != ".jinja") continue;
      fs::copy_file(e.path(), out / e.path().filename(), fs::copy_options::overwrite_existing);
      ++n;
    }
  }
  const char* extra[] = {
      ("{% set ns = namespace(a=[]) %}{% for m in messages if m.role != 'tool' %}{{ loop.index ~ m.role | upper }}"
       "{% if loop.last %}{{ ns.a | length }}{% endif %}{% endfor %}"),
      "{% macro f(x, y=2) %}{{ x ~ y ~ caller() if caller is defined }}{% endmacro %}{% call f(1) %}c{% endcall %}",
      "{{ {'a': [1, 2.5, none]} | tojson(indent=2) }}{{ 'a,b'.split(',')[::-1] | join('-') }}{{ '%s %d' % ('x', 3) }}",
      "{%- raw -%} {{ x }} {%- endraw %}{# c #}{{ 7 // 2 ** 2 % 3 }}{{ d[0] if d is mapping }}",
  };
  for (const char* t : extra) std::ofstream(out / ("extra_" + std::to_string(n++) + ".jinja")) << t;
  std::printf("%d seeds in %s\n", n, out.c_str());
  return 0;
}
