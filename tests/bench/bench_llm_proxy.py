"""Benchmark of the model-call proxy (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_llm_proxy.py [--n 300] [--concurrent 64] [--turns 200]

Three processes, as in use: a fake OpenAI-compatible upstream (aiohttp), the proxy (``agent-supervisor
llm-proxy RUN_DIR``, as a user runs it) and this client (``http.client``, one kept-alive connection). Every
figure is printed beside its floor measured in the same run: the same client talking to the same upstream
directly, and a raw ``O_APPEND`` write + ``fdatasync`` of one line.

- added latency per non-streamed call (p50, p90), the proxy's fsync included (target p50 <= 1.5 ms);
- streaming: time to the first event, through the proxy and directly (target: <= 1 ms added at p50);
- 64 streamed calls at once: how long each waited after its last upstream event for its record's sync,
  against one raw sync (target: no call waits longer than one group commit, i.e. about one sync);
- resume: 1,000 recorded calls served again (target p50 <= 0.5 ms a call);
- storage: bytes of ``llm.jsonl`` for a conversation of ``--turns`` turns against the sum of its distinct
  messages and answers (target <= 2x).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.bench.benchutil import raw_sync_floor  # noqa: E402

UPSTREAM = r'''
import asyncio, sys, time, orjson
from aiohttp import web
async def chat(req):
    body = await req.json()
    n = len(body["messages"])
    text = "answer %d: " % n + "lorem ipsum " * 8
    if body.get("stream"):
        r = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await r.prepare(req)
        for i in range(0, len(text), 16):
            delta = {"model": body["model"], "choices": [{"delta": {"content": text[i:i+16]}}]}
            await r.write(b"data: " + orjson.dumps(delta) + b"\n\n")
        usage = {"model": body["model"], "choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 9}}
        await r.write(b"data: " + orjson.dumps(usage) + b"\n\n")
        await r.write(b"data: [DONE]\n\n")
        return r
    return web.json_response({"model": body["model"], "choices": [{"message": {"role": "assistant", "content": text}}],
                              "usage": {"prompt_tokens": n, "completion_tokens": 9}})
app = web.Application(client_max_size=1 << 30)
app.router.add_post("/v1/chat/completions", chat)
async def main():
    runner = web.AppRunner(app, access_log=None); await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0); await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
'''


class Client:
    """One kept-alive HTTP/1.1 connection to ``base`` (``http://host:port/prefix``)."""

    def __init__(self, base: str) -> None:
        rest = base.split("://", 1)[1]
        hostport, _, prefix = rest.partition("/")
        host, port = hostport.split(":")
        self.prefix = "/" + prefix if prefix else ""
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def post(self, body: dict[str, Any], *, first_event: bool = False) -> tuple[float, float, bytes]:
        """(seconds to the first body bytes, seconds to the end, the body)."""
        t0 = time.perf_counter()
        self.conn.request("POST", f"{self.prefix}/chat/completions", body=orjson.dumps(body),
                          headers={"Content-Type": "application/json", "Authorization": "Bearer sk-bench"})
        resp = self.conn.getresponse()
        if first_event:
            first = resp.read1(65536)
            t1 = time.perf_counter()
            data = first + resp.read()
        else:
            data = resp.read()
            t1 = time.perf_counter()
        return t1 - t0, time.perf_counter() - t0, data

    def close(self) -> None:
        self.conn.close()


def msgs(turn: int, prefix: str = "") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a research agent. " * 40}]
    for i in range(turn):
        out.append({"role": "user", "content": f"{prefix}question {i}: " + "context " * 120})
        out.append({"role": "assistant", "content": f"answer {2 * i + 2}: " + "lorem ipsum " * 8})
    out.append({"role": "user", "content": f"{prefix}question {turn}: " + "context " * 120})
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def start_proxy(run_dir: Path, upstream_port: int) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{upstream_port}/v1", "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "supervisor", "llm-proxy", str(run_dir)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    assert p.stdout is not None
    for line in p.stdout:
        if line.startswith("export OPENAI_BASE_URL="):
            return p, line.split("=", 1)[1].strip().strip("'")
    raise SystemExit("the proxy did not start")


def stop(p: subprocess.Popen[str]) -> None:
    p.terminate()
    p.wait(30)


def latency(base_direct: str, base_proxy: str, n: int) -> None:
    for label, stream in (("non-streamed call", False), ("streamed call, first event", True)):
        d, via = Client(base_direct), Client(base_proxy)
        direct: list[float] = []
        proxied: list[float] = []
        for i in range(n):  # interleaved: the machine's noise falls on both
            body = {"model": "bench", "messages": msgs(1, prefix=f"{label} {i} "), "stream": stream}
            direct.append(d.post(body, first_event=stream)[0])
            proxied.append(via.post(body, first_event=stream)[0])
        d.close()
        via.close()
        added = [p - q for p, q in zip(proxied, direct, strict=True)]
        print(f"{label:28s} direct p50 {pct(direct, .5) * 1e3:6.2f} ms   via proxy p50 {pct(proxied, .5) * 1e3:6.2f} ms"
              f"   added p50 {statistics.median(added) * 1e3:5.2f} ms, p90 {pct(added, .9) * 1e3:5.2f} ms")


def concurrent(base_proxy: str, k: int, floor_s: float) -> None:
    ends: list[float] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        c = Client(base_proxy)
        try:
            t0 = time.perf_counter()
            c.conn.request("POST", f"{c.prefix}/chat/completions", body=orjson.dumps(
                {"model": "bench", "messages": msgs(1, prefix=f"conc {i} {time.time()} "), "stream": True}),
                headers={"Content-Type": "application/json"})
            resp = c.conn.getresponse()
            data = b""
            last_before_done = 0.0
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                if b"[DONE]" not in chunk:
                    last_before_done = time.perf_counter()
                data += chunk
            ends.append(time.perf_counter() - max(last_before_done, t0))
        except BaseException as e:  # reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{k} streamed calls at once: the final event came after the one before it by p50 "
          f"{pct(ends, .5) * 1e3:.2f} ms, max {max(ends) * 1e3:.2f} ms (one raw sync: {floor_s * 1e3:.2f} ms; "
          f"max/sync {max(ends) / floor_s:.1f}x){'; errors: ' + repr(errors[:2]) if errors else ''}")


def group_commit(upstream_port: int, tmp: Path, k: int) -> None:
    """The proxy in this process, its syncs counted and timed: how long each call's record waited for its sync."""
    from supervisor.supervise.llm_proxy import LlmProxy

    proxy = LlmProxy(tmp / "group", upstreams={"openai": f"http://127.0.0.1:{upstream_port}/v1"})
    proxy.start()
    w = proxy._writer  # the bench looks inside: the figure is the writer's own
    assert w is not None
    syncs: list[float] = []
    real = w._datasync

    def timed(fd: int) -> None:
        t = time.perf_counter()
        real(fd)
        syncs.append(time.perf_counter() - t)

    w._datasync = timed
    # how many syncs each record waited for, from its write to the sync that covered it (group commit: at most
    # the one in progress when it was written, then its own: 2)
    rounds: list[int] = []
    real_write, real_future = w.write, w.synced_future
    begun_at: dict[int, int] = {}

    def write(rec: Any) -> int:
        end = real_write(rec)
        begun_at[end] = len(syncs)  # syncs finished before it was written
        return end

    def synced_future(end: int) -> Any:
        fut = real_future(end)
        if fut is None:
            rounds.append(len(syncs) - begun_at[end])
        else:
            fut.add_done_callback(lambda _f: rounds.append(len(syncs) - begun_at[end]))
        return fut

    w.write = write  # type: ignore[method-assign]
    w.synced_future = synced_future  # type: ignore[method-assign]
    waits: list[float] = []
    record = proxy._record

    async def timed_record(*a: Any) -> None:
        t = time.perf_counter()
        await record(*a)
        waits.append(time.perf_counter() - t)

    proxy._record = timed_record  # type: ignore[method-assign]
    syncs.clear()
    concurrent(proxy.env()["OPENAI_BASE_URL"], k, raw_sync_floor(tmp / "floor2.jsonl"))
    proxy.close()
    print(f"  in the proxy: {len(waits)} records, {len(syncs)} syncs; syncs a record waited for from its write to "
          f"the one that covered it: max {max(rounds)}, p50 {pct([float(r) for r in rounds], .5):.0f} (group commit: "
          f"<= 2, the one in progress and its own); a record's write + sync wait p50 {pct(waits, .5) * 1e3:.2f} ms, "
          f"max {max(waits) * 1e3:.2f} ms (this process also runs the {k} clients); the longest sync "
          f"{max(syncs) * 1e3:.2f} ms")


def served(upstream_port: int, tmp: Path) -> None:
    run = tmp / "serve"
    p, base = start_proxy(run, upstream_port)
    c = Client(base)
    bodies = [{"model": "bench", "messages": msgs(1, prefix=f"serve {i} ")} for i in range(1000)]
    for b in bodies:
        c.post(b)
    c.close()
    stop(p)
    p, base = start_proxy(run, upstream_port)
    c = Client(base)
    times = [c.post(b)[1] for b in bodies]
    c.close()
    stop(p)
    print(f"resume: 1,000 recorded calls served: p50 {pct(times, .5) * 1e3:.3f} ms, p90 {pct(times, .9) * 1e3:.3f} ms a call")


def storage(upstream_port: int, tmp: Path, turns: int) -> None:
    run = tmp / "store"
    p, base = start_proxy(run, upstream_port)
    c = Client(base)
    conversation: list[dict[str, Any]] = [{"role": "system", "content": "You are a research agent. " * 40}]
    distinct = len(orjson.dumps(conversation[0]))
    answers = 0
    for i in range(turns):
        user = {"role": "user", "content": f"question {i}: " + "context " * 120}
        conversation.append(user)
        distinct += len(orjson.dumps(user))
        _, _, data = c.post({"model": "bench", "messages": conversation})
        answers += len(data)
        reply = json.loads(data)["choices"][0]["message"]
        conversation.append(reply)
        distinct += len(orjson.dumps(reply))
    c.close()
    stop(p)
    written = (run / "llm.jsonl").stat().st_size
    naive = sum(len(orjson.dumps(conversation[: 2 * i + 2])) for i in range(turns)) + answers
    print(f"storage, {turns} turns: llm.jsonl {written / 1e6:.2f} MB; distinct messages + answers "
          f"{(distinct + answers) / 1e6:.2f} MB: {written / (distinct + answers):.2f}x (target <= 2x); "
          f"every request written whole would be {naive / 1e6:.1f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--concurrent", type=int, default=64)
    ap.add_argument("--turns", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    up = subprocess.Popen([sys.executable, "-c", UPSTREAM], stdout=subprocess.PIPE, text=True)
    try:
        assert up.stdout is not None
        port = int(up.stdout.readline())
        floor = raw_sync_floor(tmp / "floor.jsonl")
        print(f"floor: one raw O_APPEND write + fdatasync {floor * 1e3:.3f} ms")
        p, base = start_proxy(tmp / "lat", port)
        try:
            latency(f"http://127.0.0.1:{port}/v1", base, args.n)
            concurrent(base, args.concurrent, floor)
        finally:
            stop(p)
        group_commit(port, tmp, args.concurrent)
        served(port, tmp)
        storage(port, tmp, args.turns)
    finally:
        up.terminate()
        up.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
