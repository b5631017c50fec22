#!/usr/bin/env python3
"""bench/stream/cache_sim.py: replay a routing trace against expert-cache policies and print the
hit rate each would get at a given budget, next to the best possible (Belady's MIN).

The trace comes from `sluice run ... --routing-trace-out FILE` (one expert request per line:
"layer e1 e2 ..."). Every bundle has the same size in the models this is for (all experts of a
layer share their shapes and types), so the budget is a bundle count: --budget-bundles N, or
--budget-bytes B with --bundle-bytes S. Requests are served in trace order; a miss inserts the
bundle, evicting by the policy. Hit rate counts every requested (layer, expert) once per line.

  python3 bench/stream/cache_sim.py trace.txt --budget-bytes 5G --bundle-bytes 3211264 --skip-lines 48

Policies: lru; slru (Sluice's ExpertCache: probation -> protected on the second use, protected
capped at 3/4 of the budget); lfu (evict the fewest uses so far, ties by recency); min (Belady:
evict the bundle whose next request is furthest away; needs the future, an upper bound only).
"""
import argparse
import collections
import heapq


def parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def read_trace(path: str):
    reqs = []
    for line in open(path):
        parts = line.split()
        if parts:
            layer = int(parts[0])
            reqs.append([(layer, int(e)) for e in parts[1:]])
    return reqs


def sim_lru(reqs, cap, count_from):
    cache, hits, total = collections.OrderedDict(), 0, 0
    for i, line in enumerate(reqs):
        for k in line:
            hit = k in cache
            if hit:
                cache.move_to_end(k)
            else:
                if len(cache) >= cap:
                    cache.popitem(last=False)
                cache[k] = True
            if i >= count_from:
                hits += hit
                total += 1
    return hits, total


def sim_slru(reqs, cap, count_from):
    prob, prot = collections.OrderedDict(), collections.OrderedDict()
    prot_cap = cap * 3 // 4
    hits = total = 0
    for i, line in enumerate(reqs):
        for k in line:
            hit = k in prob or k in prot
            if k in prot:
                prot.move_to_end(k)
            elif k in prob:
                del prob[k]
                prot[k] = True
                while len(prot) > prot_cap:
                    d, _ = prot.popitem(last=False)
                    prob[d] = True
            else:
                if len(prob) + len(prot) >= cap:
                    if prob:
                        prob.popitem(last=False)
                    else:
                        prot.popitem(last=False)
                prob[k] = True
            if i >= count_from:
                hits += hit
                total += 1
    return hits, total


def sim_lfu(reqs, cap, count_from):
    uses = collections.Counter()  # over the whole run, evicted or not (a perfect-memory LFU)
    cache = {}  # key -> last request index
    hits = total = 0
    t = 0
    for i, line in enumerate(reqs):
        for k in line:
            t += 1
            uses[k] += 1
            hit = k in cache
            if not hit and len(cache) >= cap:
                victim = min(cache, key=lambda c: (uses[c], cache[c]))
                del cache[victim]
            cache[k] = t
            if i >= count_from:
                hits += hit
                total += 1
    return hits, total


def sim_cyclic(reqs, cap, count_from):
    # Decode sweeps the layers in order, so a bundle of layer l next gets a chance when layer l
    # comes round again: d lines away (1..L), used then with probability p (its share of its
    # layer's requests so far), else a sweep later, and so on. Evict the largest expected
    # distance to the next use, d + L(1 - p)/p: Belady's rule with the future replaced by the
    # routing frequencies.
    L = max(l for line in reqs for l, _ in line) + 1
    n_exp = max(e for line in reqs for _, e in line) + 1
    uses, lines_of = collections.Counter(), collections.Counter()
    cache = set()
    hits = total = 0
    for i, line in enumerate(reqs):
        c = line[0][0] if line else 0
        lines_of[c] += 1
        k_used = len(line)
        for k in line:
            uses[k] += 1
        for k in line:
            hit = k in cache
            if not hit and len(cache) >= cap:
                def expected(b):
                    l = b[0]
                    if l == c and b in line:
                        return -1.0  # needed now
                    d = (l - c - 1) % L + 1
                    p = (uses[b] + k_used / n_exp) / (lines_of[l] + 1)
                    return d + L * (1 - p) / p
                victim = max(cache, key=expected)
                cache.discard(victim)
            cache.add(k)
            if i >= count_from:
                hits += hit
                total += 1
    return hits, total


def sim_min(reqs, cap, count_from):
    flat = [(i, k) for i, line in enumerate(reqs) for k in line]
    nxt = [0] * len(flat)
    last = {}
    for j in range(len(flat) - 1, -1, -1):
        k = flat[j][1]
        nxt[j] = last.get(k, float("inf"))
        last[k] = j
    cache = {}  # key -> next use index
    heap = []  # (-next use, key), lazily invalidated
    hits = total = 0
    for j, (i, k) in enumerate(flat):
        hit = k in cache
        if not hit and len(cache) >= cap:
            while True:
                nu, v = heapq.heappop(heap)
                if v in cache and cache[v] == -nu:
                    del cache[v]
                    break
        cache[k] = nxt[j]
        heapq.heappush(heap, (-nxt[j], k))
        if i >= count_from:
            hits += hit
            total += 1
    return hits, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--budget-bundles", type=int)
    ap.add_argument("--budget-bytes", help="e.g. 5G (with --bundle-bytes)")
    ap.add_argument("--bundle-bytes", type=int, help="bytes per (layer, expert) bundle as the cache counts them")
    ap.add_argument("--skip-lines", type=int, default=0, help="count hits only after this many lines (warm-up)")
    ap.add_argument("--policies", default="lru,slru,lfu,min")
    a = ap.parse_args()
    if a.budget_bundles is None:
        if not (a.budget_bytes and a.bundle_bytes):
            ap.error("give --budget-bundles, or --budget-bytes with --bundle-bytes")
        a.budget_bundles = parse_size(a.budget_bytes) // a.bundle_bytes
    reqs = read_trace(a.trace)
    distinct = len({k for line in reqs for k in line})
    print(f"{a.trace}: {len(reqs)} requests (lines), {sum(map(len, reqs))} bundle uses, {distinct} distinct bundles; "
          f"budget {a.budget_bundles} bundles; hits counted after line {a.skip_lines}")
    sims = {"lru": sim_lru, "slru": sim_slru, "lfu": sim_lfu, "cyclic": sim_cyclic, "min": sim_min}
    print(f"| policy | hit rate |\n|---|---|")
    for p in a.policies.split(","):
        h, t = sims[p](reqs, a.budget_bundles, a.skip_lines)
        print(f"| {p} | {100.0 * h / max(1, t):.1f}% |")


if __name__ == "__main__":
    main()
