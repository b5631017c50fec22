#!/usr/bin/env python3
"""bench/stream/llamacpp_decode.py: llama.cpp's decode speed on a model larger than memory, for
run_bench.sh (which starts it inside the same memory cgroup, after dropping the page cache).

llama.cpp maps the file (use_mmap, its default) and leaves paging to the kernel: this is the
baseline the issue compares `--experts stream` with. It decodes -n tokens one at a time after a
short prompt and prints the whole-decode rate and the second half's (the same steady-state rule
as `sluice run`). Token ids are random (fixed seed): llama-cpp-python's sampler is not Sluice's,
so the routed experts differ from the Sluice runs' anyway; on a random-weight model neither is
real routing. Needs llama-cpp-python (see bench/llamacpp_compare.py); never run in CI.

    /tmp/llvenv/bin/python bench/stream/llamacpp_decode.py -m MODEL.gguf -t 2 -n 64
"""
import argparse
import random
import sys
import time


def read_bytes():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=5)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("--repack", action="store_true", help="let llama.cpp repack weights (needs RAM for the whole model)")
    a = ap.parse_args()

    import llama_cpp.llama_cpp as lc
    from llama_cpp import Llama

    if not a.repack:
        # llama.cpp's CPU backend repacks Q4_K weights into its own buffers (anonymous memory,
        # the whole model: killed by the 8 GB cgroup at load, measured). llama-cli's --no-repack
        # is the same switch; llama-cpp-python has no argument for it, so patch the defaults.
        default_params = lc.llama_model_default_params

        def no_repack():
            p = default_params()
            p.use_extra_bufts = False
            return p

        lc.llama_model_default_params = no_repack

    t0 = time.perf_counter()
    llm = Llama(model_path=a.model, n_threads=a.threads, n_threads_batch=a.threads, n_ctx=a.n_prompt + a.n_gen + 8,
                n_batch=64, use_mmap=True, verbose=False)
    print("llama.cpp: loaded %s in %.2f s" % (a.model, time.perf_counter() - t0), file=sys.stderr)
    rng = random.Random(1)
    vocab = llm.n_vocab()
    prompt = [rng.randrange(vocab) for _ in range(a.n_prompt)]
    rb0 = read_bytes()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t_prompt = time.perf_counter() - t0
    half = a.n_gen // 2
    t1 = time.perf_counter()
    t_half, rb_half = t1, read_bytes()
    for i in range(a.n_gen):
        if i == half:
            t_half, rb_half = time.perf_counter(), read_bytes()
        llm.eval([rng.randrange(vocab)])
    t_end, rb_end = time.perf_counter(), read_bytes()
    n2 = a.n_gen - half
    print("llama.cpp: prompt %d tokens in %.2f s; generation: %d tokens in %.2f s (%.2f tok/s); read %.2f GB "
          "(process read_bytes)" % (a.n_prompt, t_prompt, a.n_gen, t_end - t1, a.n_gen / (t_end - t1), (rb_end - rb0) / 1e9),
          file=sys.stderr)
    print("llama.cpp steady state (second half of the decode, tokens %d-%d): %.2f tok/s; read %.1f MB/token, %.0f MB/s"
          % (half + 1, a.n_gen, n2 / (t_end - t_half), (rb_end - rb_half) / n2 / 1e6, (rb_end - rb_half) / (t_end - t_half) / 1e6),
          file=sys.stderr)


if __name__ == "__main__":
    main()
