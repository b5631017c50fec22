#!/usr/bin/env python3
"""bench/serve/load_test.py: load and fault run of `sluice serve` on 127.0.0.1 (not run by CI;
tests/server/test_server_load.cpp is the short version that is).

Starts the server on a free loopback port, sends --requests requests from --concurrency clients
at once — a --malformed share of broken ones (bad JSON, wrong types, huge max_tokens, a body past
the limit, bytes that are not UTF-8), a --disconnect share that leave after their first streamed
token, the rest valid chat/completion requests (streamed, with the usage chunk) — then checks
that every valid request was answered, every malformed one got its 4xx, no slot stayed busy
(/metrics), the server is alive, and SIGTERM ends it with exit 0. Reports time to first token
(p50/p99), aggregate generated tok/s (over the wall
time, and over the time some stream was decoding) and the server's own counters. Exit 1 if a check fails.

  bench/serve/load_test.py --sluice build/release/sluice -m MODEL.gguf [--requests 2000]
      [--concurrency 32] [--parallel 8] [--threads 2] [--max-tokens 32] [--ignore-eos]
      [--malformed 0.1] [--disconnect 0.1] [--server-arg=--repack ...]

Throughput at N streams vs one: --compare N --ignore-eos [--rounds 4] [--phase-requests 3]
(equal-length generations on one server, phases of one stream and of N alternating, each
round's ratio of decode rates and their median).
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

MALFORMED = [
    (b'{"prompt": "Once upon", "max_tokens": 4', 400),
    (b'{"prompt": "Once", "max_tokens": "many"}', 400),
    (b'{"prompt": "Once", "max_tokens": 1e18}', 400),
    (b" " * (5 << 20) + b"{}", 413),
    (b'{"prompt": "Once \xfe\xff upon"}', 400),
    (b'{"messages": [{"role": "user", "content": {"x": 1}}]}', 400),
]
TOPICS = ["a red ball", "the sea", "a small dog", "rain", "a birthday cake", "the moon", "a train", "a garden"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=b"", timeout=600):
    """One request on its own connection; returns (status, head, body bytes, first-data time)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return -1, b"", b"", None
    try:
        req = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        s.sendall(req)
        data, first = b"", None
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
            if first is None and (b'"content":"' in data or b'"text":"' in data):
                first = time.monotonic() - t0
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else -1
        return status, head, rest, first
    except OSError:
        return -1, b"", b"", None
    finally:
        s.close()


def leave_after_first(port, path, body):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=600)
    except OSError:
        return False
    try:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        data = b""
        while b'"content":"' not in data and b'"text":"' not in data:
            b = s.recv(65536)
            if not b:
                return False
            data += b
        return data.startswith(b"HTTP/1.1 200")
    finally:
        s.close()  # mid-stream: the server must cancel it and free the slot


def metrics(port):
    _, _, body, _ = http(port, "GET", "/metrics")
    out = {}
    for line in body.decode(errors="replace").splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split()
            out[k] = float(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--malformed", type=float, default=0.1)
    ap.add_argument("--disconnect", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare", type=int, default=0, metavar="N",
                    help="instead of the load run: alternate phases of one stream and of N concurrent streams "
                         "(valid requests only) on one server with --parallel N, --rounds times, and report "
                         "each round's decode-rate ratio and their median")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phase-requests", type=int, default=3,
                    help="--compare: requests per stream in each phase (one stream: this many in turn)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="passed to `sluice serve` as is (repeatable), e.g. --server-arg=--repack")
    a = ap.parse_args()
    if a.compare > 0:
        a.parallel, a.concurrency = a.compare, a.compare

    port = free_port()
    log = open(f"/tmp/sluice-load-{port}.log", "w")
    srv = subprocess.Popen([a.sluice, "serve", "-m", a.model, "--port", str(port), "--threads", str(a.threads),
                            "--parallel", str(a.parallel), "--ctx", str(a.ctx), "--queue", str(a.concurrency + 8)] + a.server_arg,
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        return compare(a, srv, port, log) if a.compare > 0 else run(a, srv, port, log)
    finally:
        if srv.poll() is None:  # a failure above must not leave the server behind
            srv.kill()
            srv.wait()


def one_request(a, port, i, kind):
    """Request i of the given kind; returns (kind, answered as it should be, TTFT, tokens, decode span)."""
    chat = i % 2 == 0
    path = "/v1/chat/completions" if chat else "/v1/completions"
    if kind == "malformed":
        body, want = MALFORMED[i % len(MALFORMED)]
        st, _, resp, _ = http(port, "POST", path, body)
        return ("malformed", st == want and b'"error"' in resp, None, 0, None)
    req = {"max_tokens": a.max_tokens if kind == "valid" else 100000, "temperature": a.temperature, "seed": i,
           "stream": True, "stream_options": {"include_usage": True},
           "ignore_eos": a.ignore_eos or kind == "leave"}
    topic = TOPICS[i % len(TOPICS)]
    if chat:
        req["messages"] = [{"role": "user", "content": f"Tell me a short story about {topic}."}]
    else:
        req["prompt"] = f"Once upon a time there was {topic}"
    body = json.dumps(req).encode()
    if kind == "leave":
        return ("leave", leave_after_first(port, path, body), None, 0, None)
    t_req = time.monotonic()
    st, _, resp, first = http(port, "POST", path, body)
    t_end = time.monotonic()
    ok = st == 200 and b"data: [DONE]" in resp
    toks = 0
    for line in resp.split(b"\n"):
        if b'"usage"' in line and line.startswith(b"data: "):
            try:
                toks = json.loads(line[6:])["usage"]["completion_tokens"]
            except (ValueError, KeyError):
                ok = False
    decoding = (t_req + first, t_end) if first is not None else None
    return ("valid", ok and toks > 0, first, toks, decoding)


def run_clients(a, port, plan, concurrency, first_index=0):
    """plan[j] is the kind of request first_index + j; `concurrency` clients take them in turn.
    Returns the results in plan order and the wall time."""
    results = [None] * len(plan)
    next_j = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                j = next_j[0]
                next_j[0] += 1
            if j >= len(plan):
                return
            results[j] = one_request(a, port, first_index + j, plan[j])

    t0 = time.monotonic()
    th = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return results, time.monotonic() - t0


def decode_rate(results):
    """Tokens after each valid request's first, per second of the time in which at least one
    request was past its first token (the union of those spans): prompt processing that runs
    alone (all of it at one stream) is left out, prompt chunks sharing a step with decoding
    (continuous batching) are charged to the decode time."""
    spans = sorted(r[4] for r in results if r and r[0] == "valid" and r[4] is not None)
    busy, cur = 0.0, None
    for lo, hi in spans:
        if cur and lo <= cur[1]:
            cur[1] = max(cur[1], hi)
        else:
            busy += cur[1] - cur[0] if cur else 0.0
            cur = [lo, hi]
    busy += cur[1] - cur[0] if cur else 0.0
    after_first = sum(r[3] - 1 for r in results if r and r[0] == "valid" and r[4] is not None and r[3] > 0)
    return after_first / busy if busy > 0 else 0.0


def wait_ready(srv, port, log):
    for _ in range(600):
        if http(port, "GET", "/health", timeout=2)[0] == 200:
            return
        if srv.poll() is not None:
            sys.exit(f"the server exited at start (log {log.name})")
        time.sleep(0.05)


def stop(srv):
    """SIGTERM, then the exit status (or "killed" when it did not stop within a minute)."""
    srv.send_signal(signal.SIGTERM)
    try:
        return srv.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        return "killed"


def compare(a, srv, port, log):
    """N streams against one on the same server, phases alternating so that each ratio compares
    runs seconds apart (a shared VM's bandwidth drifts by 2x within minutes)."""
    wait_ready(srv, port, log)
    n, k = a.compare, a.phase_requests
    rows, ok, index = [], True, 0
    for r in range(a.rounds):
        rates = {}
        for streams in (1, n):
            plan = ["valid"] * (k * streams)
            results, _ = run_clients(a, port, plan, streams, first_index=index)
            index += len(plan)
            ok = ok and all(x and x[1] for x in results)
            rates[streams] = decode_rate(results)
        rows.append((rates[1], rates[n]))
        print(f"round {r + 1}: 1 stream {rates[1]:.1f} tok/s, {n} streams {rates[n]:.1f} tok/s aggregate, "
              f"{rates[n] / rates[1]:.2f}x", flush=True)
    alive = srv.poll() is None
    rc = stop(srv)
    ratios = sorted(b / a_ for a_, b in rows)
    med = ratios[len(ratios) // 2] if len(ratios) % 2 else 0.5 * (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2])
    print(f"{n} streams vs 1 (decode tok/s, --max-tokens {a.max_tokens}, {a.threads} threads): median {med:.2f}x, "
          f"range {ratios[0]:.2f}-{ratios[-1]:.2f}x over {a.rounds} rounds")
    failed = [msg for good, msg in [(ok, "a request was not answered"), (alive, "the server died"),
                                    (rc == 0, f"SIGTERM exit status {rc}")] if not good]
    for msg in failed:
        print("FAIL", msg)
    print("compare:", "FAILED" if failed else "ok", f"(server log {log.name})")
    return 1 if failed else 0


def run(a, srv, port, log):
    wait_ready(srv, port, log)

    rng = random.Random(a.seed)
    plan = []
    for i in range(a.requests):
        x = rng.random()
        plan.append("malformed" if x < a.malformed else "leave" if x < a.malformed + a.disconnect else "valid")
    results, wall = run_clients(a, port, plan, a.concurrency)

    bad = [i for i, r in enumerate(results) if not r or not r[1]]
    for _ in range(200):
        m = metrics(port)
        if m.get("sluice_slots_busy") == 0 and m.get("sluice_queue_length") == 0:
            break
        time.sleep(0.05)
    ttft = sorted(r[2] for r in results if r and r[0] == "valid" and r[2] is not None)
    toks = sum(r[3] for r in results if r and r[0] == "valid")
    n = {k: sum(1 for r in results if r and r[0] == k) for k in ("valid", "malformed", "leave")}
    alive = srv.poll() is None
    rc = stop(srv)

    pct = lambda p: 1e3 * ttft[min(len(ttft) - 1, int(len(ttft) * p))] if ttft else float("nan")
    print(f"requests {a.requests} from {a.concurrency} clients, --parallel {a.parallel}, {a.threads} threads: "
          f"{n['valid']} valid, {n['malformed']} malformed, {n['leave']} left mid-stream; {wall:.1f} s")
    print(f"TTFT p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms; {toks} tokens generated, "
          f"{toks / wall:.1f} tok/s aggregate; decode {decode_rate(results):.1f} tok/s "
          f"(tokens after the first / time with a stream decoding)")
    print(f"server: requests {m.get('sluice_requests_total')}, cancelled {m.get('sluice_requests_cancelled_total')}, "
          f"busy slots {m.get('sluice_slots_busy')}, queue {m.get('sluice_queue_length')}, "
          f"engine tok/s {m.get('sluice_generation_tokens_per_second', 0):.1f}, "
          f"prompt-cache hit ratio {m.get('sluice_prompt_cache_hit_ratio', 0):.3f}")
    checks = [
        (not bad, f"{len(bad)} request(s) not answered as they should be: {bad[:10]}"),
        (m.get("sluice_slots_busy") == 0 and m.get("sluice_queue_length") == 0, "slots left busy or queued"),
        (m.get("sluice_requests_total") == n["valid"] + n["leave"], "/metrics request count disagrees"),
        (alive, "the server died during the run"),
        (rc == 0, f"SIGTERM exit status {rc}"),
    ]
    failed = [msg for ok, msg in checks if not ok]
    for msg in failed:
        print("FAIL", msg)
    print("load test:", "FAILED" if failed else "ok", f"(server log {log.name})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
