#!/usr/bin/env python3
"""bench/llamacpp_compare.py: Sluice against llama.cpp on the same GGUF file, same threads,
prompt processing (ppN) and decode (tgN), runs interleaved so both see the same machine noise.

llama.cpp comes from the llama-cpp-python package (PyPI; it compiles llama.cpp locally, ~25 min
on 2 cores). Never run in CI. Set it up once:
    python3 -m venv /tmp/llvenv && CMAKE_ARGS="-DGGML_NATIVE=ON" /tmp/llvenv/bin/pip install llama-cpp-python
then:
    /tmp/llvenv/bin/python bench/llamacpp_compare.py -m MODEL.gguf [--sluice build/release/sluice] [-t 2] [-p 512] [-n 128] [-r 3]

Token ids are random (fixed seed) in both engines: prompt speed does not depend on the text.
llama.cpp decodes with llama_decode one token at a time through the Python binding (about
50 us of Python per token, under 1% at these speeds); Sluice's numbers come from `sluice bench
--json` with the same -p/-n/-t.
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import time


def llama_rep(llm, n_prompt, n_gen, vocab, rng):
    prompt = [rng.randrange(vocab) for _ in range(n_prompt)]
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    pp = n_prompt / (time.perf_counter() - t0)
    llm.reset()
    llm.eval(prompt[:1])
    tok = prompt[1]
    t0 = time.perf_counter()
    for _ in range(n_gen):
        llm.eval([tok])
        tok = rng.randrange(vocab)
    tg = n_gen / (time.perf_counter() - t0)
    return pp, tg


def sluice_rep(sluice, model, threads, n_prompt, n_gen):
    out = subprocess.run([sluice, "bench", "-m", model, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
                          "-r", "1", "--json"], check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    pp = next(r["tps_mean"] for r in rows if r["test"].startswith("pp"))
    tg = next(r for r in rows if r["test"].startswith("tg"))
    return pp, tg["tps_mean"], tg.get("sol_fraction", 0.0)


def fmt(v):
    return "%.2f ± %.2f" % (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--sluice", default="build/release/sluice")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-repack", action="store_true",
                    help="llama.cpp without its extra buffer types (CPU_REPACK, AMX): its -nr; for memory-limited runs "
                         "and where its AMX kernels crash (llama-cpp-python 0.3.36 built GGML_NATIVE on a Xeon)")
    a = ap.parse_args()

    import llama_cpp.llama_cpp as llama_cpp  # imported late: --help works without the package
    from llama_cpp import Llama

    if a.no_repack:  # Llama() has no argument for it: its model parameters start from these defaults
        defaults = llama_cpp.llama_model_default_params

        def no_extra_bufts():
            p = defaults()
            p.use_extra_bufts = False
            return p

        llama_cpp.llama_model_default_params = no_extra_bufts

    print("llama.cpp: loading %s" % a.model, file=sys.stderr)
    llm = Llama(model_path=a.model, n_threads=a.threads, n_threads_batch=a.threads, n_ctx=a.n_prompt + a.n_gen + 8,
                n_batch=512, n_ubatch=512, verbose=False)
    vocab = llm.n_vocab()
    rng = random.Random(42)
    res = {"llama.cpp": {"pp": [], "tg": []}, "sluice": {"pp": [], "tg": [], "sol": []}}
    for r in range(a.reps):
        print("rep %d/%d: llama.cpp" % (r + 1, a.reps), file=sys.stderr)
        pp, tg = llama_rep(llm, a.n_prompt, a.n_gen, vocab, rng)
        res["llama.cpp"]["pp"].append(pp)
        res["llama.cpp"]["tg"].append(tg)
        print("rep %d/%d: sluice" % (r + 1, a.reps), file=sys.stderr)
        pp, tg, sol = sluice_rep(a.sluice, a.model, a.threads, a.n_prompt, a.n_gen)
        res["sluice"]["pp"].append(pp)
        res["sluice"]["tg"].append(tg)
        res["sluice"]["sol"].append(sol)
    if a.json:
        print(json.dumps({"model": a.model, "threads": a.threads, "n_prompt": a.n_prompt, "n_gen": a.n_gen, "results": res}))
        return
    pp_ratio = statistics.mean(res["sluice"]["pp"]) / statistics.mean(res["llama.cpp"]["pp"])
    tg_ratio = statistics.mean(res["sluice"]["tg"]) / statistics.mean(res["llama.cpp"]["tg"])
    print("| engine | threads | pp%d t/s | tg%d t/s |" % (a.n_prompt, a.n_gen))
    print("| --- | ---: | ---: | ---: |")
    for eng in ("llama.cpp", "sluice"):
        print("| %s | %d | %s | %s |" % (eng, a.threads, fmt(res[eng]["pp"]), fmt(res[eng]["tg"])))
    print("\nsluice / llama.cpp: pp %.2fx, tg %.2fx; sluice decode at %.0f%% of the bandwidth measured beside it" %
          (pp_ratio, tg_ratio, 100 * statistics.median(res["sluice"]["sol"])))


if __name__ == "__main__":
    main()
