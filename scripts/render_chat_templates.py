#!/usr/bin/env python3
"""scripts/render_chat_templates.py: the oracle of src/template (the chat-template interpreter).

Renders every ../shared/chat-templates/*.jinja over every conversation of
tests/data/chat_templates/conversations.json, and every case of
tests/data/chat_templates/language_cases.json, with Python's jinja2 set up exactly as Hugging Face
transformers sets it up (transformers/utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols] plus
the `generation` tag), tojson = json.dumps(ensure_ascii=False, indent, separators, sort_keys),
raise_exception raising TemplateError, strftime_now on a fixed clock (conversations.json "now").
Writes tests/data/chat_templates/expected.json: per case either {"output": TEXT} or
{"error": {"type": EXCEPTION CLASS, "message": TEXT}}.

  .venv/bin/python scripts/render_chat_templates.py [SHARED_DIR=../shared]
"""
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "chat_templates"


class GenerationTag(jinja2.ext.Extension):
    # transformers' AssistantTracker renders {% generation %}...{% endgeneration %} as its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    try:
        return {"output": env.from_string(source).render(**variables)}
    except Exception as e:  # noqa: BLE001 - the type and message are the expected result
        return {"error": {"type": type(e).__name__, "message": str(e)}}


def tokens_for(spec, name):
    for prefix, toks in spec["by_prefix"]:
        if name.startswith(prefix):
            return toks
    return spec["default"]


def main():
    shared = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared")
    convs = json.loads((DATA / "conversations.json").read_text())
    cases = json.loads((DATA / "language_cases.json").read_text())
    env = make_env(datetime.datetime.fromisoformat(convs["now"]))
    out = {"jinja2_version": jinja2.__version__, "templates": {}, "language": {}}
    for path in sorted((shared / "chat-templates").glob("*.jinja")):
        source = path.read_text()
        per = {}
        for c in convs["conversations"]:
            variables = {"messages": c["messages"], "tools": convs["tools"] if c.get("use_tools") else None,
                         "documents": None, "add_generation_prompt": c["add_generation_prompt"]}
            variables.update(tokens_for(convs["tokens"], path.stem))
            per[c["name"]] = render(env, source, variables)
        out["templates"][path.stem] = per
    for c in cases["cases"]:
        out["language"][c["name"]] = render(env, c["template"], c.get("vars", {}))
    (DATA / "expected.json").write_text(json.dumps(out, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    n_err = sum("error" in r for per in out["templates"].values() for r in per.values())
    print(f"{len(out['templates'])} templates x {len(convs['conversations'])} conversations ({n_err} raise), "
          f"{len(out['language'])} language cases -> {DATA / 'expected.json'}")


if __name__ == "__main__":
    main()
