#!/usr/bin/env python3
"""bench/stream/cache_sim.py: replay a routing trace against expert-cache policies and print the
hit rate each would get at a given budget, next to the best possible (Belady's MIN).

The trace comes from `sluice run ... --routing-trace-out FILE` (one expert request per line:
"layer e1 e2 ..."). The budget is a bundle count: --budget-bundles N, or --budget-bytes B with
--bundle-bytes S (one size for all: a model whose layers' bundles differ, like a Q4_K_M mix with
ffn_down in Q4_K or Q6_K, is approximated by its larger size). Requests are served in trace order; a miss inserts the
bundle, evicting by the policy. Hit rate counts every requested (layer, expert) once per line.

  python3 bench/stream/cache_sim.py trace.txt --budget-bytes 5G --bundle-bytes 3211264 --skip-lines 48

Policies: lru; slru (Sluice's ExpertCache: probation -> protected on the second use, protected
capped at 3/4 of the budget); lfu (evict the fewest uses so far, ties by recency); cyclic (the
expected distance to the next use from routing frequencies and the layer sweep); min (Belady:
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


# Each policy sees every request in order, access(key, i, line) -> whether it was cached (the
# line is the i-th request, key one of its bundles), and keeps at most `cap` bundles.


class Lru:
    def __init__(self, reqs, cap):
        self.cap, self.cache = cap, collections.OrderedDict()

    def access(self, k, i, line):
        if k in self.cache:
            self.cache.move_to_end(k)
            return True
        if len(self.cache) >= self.cap:
            self.cache.popitem(last=False)
        self.cache[k] = True
        return False


class Slru:
    def __init__(self, reqs, cap):
        self.cap, self.prot_cap = cap, cap * 3 // 4
        self.prob, self.prot = collections.OrderedDict(), collections.OrderedDict()

    def access(self, k, i, line):
        if k in self.prot:
            self.prot.move_to_end(k)
            return True
        if k in self.prob:
            del self.prob[k]
            self.prot[k] = True
            while len(self.prot) > self.prot_cap:
                d, _ = self.prot.popitem(last=False)
                self.prob[d] = True
            return True
        if len(self.prob) + len(self.prot) >= self.cap:
            (self.prob if self.prob else self.prot).popitem(last=False)
        self.prob[k] = True
        return False


class Lfu:
    # Counts over the whole run, evicted or not (a perfect-memory LFU); ties go by recency.
    def __init__(self, reqs, cap):
        self.cap, self.uses, self.cache, self.t = cap, collections.Counter(), {}, 0

    def access(self, k, i, line):
        self.t += 1
        self.uses[k] += 1
        hit = k in self.cache
        if not hit and len(self.cache) >= self.cap:
            del self.cache[min(self.cache, key=lambda c: (self.uses[c], self.cache[c]))]
        self.cache[k] = self.t
        return hit


class Cyclic:
    # Decode sweeps the layers in order, so a bundle of layer l next gets a chance when layer l
    # comes round again: d lines away (1..L), used then with probability p (its share of its
    # layer's requests so far), else a sweep later, and so on. Evict the largest expected
    # distance to the next use, d + L(1 - p)/p: Belady's rule with the future replaced by the
    # routing frequencies.
    def __init__(self, reqs, cap):
        self.cap, self.cache = cap, set()
        self.L = max(l for line in reqs for l, _ in line) + 1
        self.n_exp = max(e for line in reqs for _, e in line) + 1
        self.uses, self.lines_of, self.seen = collections.Counter(), collections.Counter(), -1

    def access(self, k, i, line):
        c = line[0][0]
        if i != self.seen:  # the first bundle of a new line: count the line and its uses
            self.seen = i
            self.lines_of[c] += 1
            self.uses.update(line)
        hit = k in self.cache
        if not hit and len(self.cache) >= self.cap:
            def expected(b):
                if b[0] == c and b in line:
                    return -1.0  # needed now
                d = (b[0] - c - 1) % self.L + 1
                p = (self.uses[b] + len(line) / self.n_exp) / (self.lines_of[b[0]] + 1)
                return d + self.L * (1 - p) / p
            self.cache.discard(max(self.cache, key=expected))
        self.cache.add(k)
        return hit


class Min:
    # Belady: evict the bundle whose next request is furthest away (needs the future).
    def __init__(self, reqs, cap):
        flat = [k for line in reqs for k in line]
        self.next, last = [0] * len(flat), {}
        for j in range(len(flat) - 1, -1, -1):
            self.next[j] = last.get(flat[j], float("inf"))
            last[flat[j]] = j
        self.cap, self.cache, self.heap, self.j = cap, {}, [], 0

    def access(self, k, i, line):
        hit = k in self.cache
        if not hit and len(self.cache) >= self.cap:
            while True:  # the heap is invalidated lazily
                nu, v = heapq.heappop(self.heap)
                if self.cache.get(v) == -nu:
                    del self.cache[v]
                    break
        self.cache[k] = self.next[self.j]
        heapq.heappush(self.heap, (-self.next[self.j], k))
        self.j += 1
        return hit


def replay(policy, reqs, count_from):
    hits = total = 0
    for i, line in enumerate(reqs):
        for k in line:
            hit = policy.access(k, i, line)
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
    ap.add_argument("--policies", default="lru,slru,lfu,min", help="comma-separated: lru, slru, lfu, cyclic (slow), min")
    a = ap.parse_args()
    if a.budget_bundles is None:
        if not (a.budget_bytes and a.bundle_bytes):
            ap.error("give --budget-bundles, or --budget-bytes with --bundle-bytes")
        a.budget_bundles = parse_size(a.budget_bytes) // a.bundle_bytes
    reqs = read_trace(a.trace)
    distinct = len({k for line in reqs for k in line})
    print(f"{a.trace}: {len(reqs)} requests (lines), {sum(map(len, reqs))} bundle uses, {distinct} distinct bundles; "
          f"budget {a.budget_bundles} bundles; hits counted after line {a.skip_lines}")
    policies = {"lru": Lru, "slru": Slru, "lfu": Lfu, "cyclic": Cyclic, "min": Min}
    print(f"| policy | hit rate |\n|---|---|")
    for p in a.policies.split(","):
        h, t = replay(policies[p](reqs, a.budget_bundles), reqs, a.skip_lines)
        print(f"| {p} | {100.0 * h / max(1, t):.1f}% |")


if __name__ == "__main__":
    main()
