"""The proxy's calls in every CLI reader (issue 23): a run directory made by a real :class:`LlmProxy` in front of a
small aiohttp upstream on loopback, then ``log``, ``log --json``, ``status`` (tokens, saved by resume), ``fork``
(its proxy serves the copied calls) and ``replay --verify`` (a matching agent passes, a changed prompt diverges)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from supervisor.core import llm_calls, rundir
from supervisor.supervise.llm_proxy import LlmProxy

from ..conftest import run_cli

pytestmark = pytest.mark.timeout(90)

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 10}  # long: stored once, as a blob


class Upstream:
    """A tiny OpenAI-compatible server: chat completions (streamed or not), model ``fail`` answers 429."""

    def __init__(self) -> None:
        self.calls = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    async def chat(self, req: web.Request) -> web.StreamResponse:
        self.calls += 1
        body = await req.json()
        if body["model"] == "fail":
            return web.json_response({"error": {"message": "slow down"}}, status=429)
        text = f"answer-{len(json.dumps(body)) % 97}"
        if body.get("stream"):
            r = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await r.prepare(req)
            for i in range(3):
                chunk = {"model": body["model"], "choices": [{"delta": {"content": text[i::3]}}]}
                await r.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            usage = {"model": body["model"], "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
            await r.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
            await r.write(b"data: [DONE]\n\n")
            return r
        return web.json_response({"model": body["model"], "choices": [{"message": {"role": "assistant", "content": text}}],
                                  "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                            "prompt_tokens_details": {"cached_tokens": 1}}})

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    u = Upstream()
    yield u
    u.close()


def post(base: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def ask(prompt: str, *, stream: bool = False, model: str = "gpt-4o-mini") -> dict[str, Any]:
    return {"model": model, "messages": [SYSTEM, {"role": "user", "content": prompt}], **({"stream": True} if stream else {})}


def next_ms() -> None:
    """Wait for the clock's next millisecond: records are placed in the one timeline by their ``ts`` (milliseconds),
    the journal's first at equal times, so each event of the fixture gets a millisecond of its own."""
    now = rundir.utc_now()
    while rundir.utc_now() == now:
        pass


def journal_line(run_dir: Path, rec: dict[str, Any]) -> None:
    next_ms()
    path = run_dir / rundir.JOURNAL
    seq = len(path.read_bytes().splitlines()) if path.exists() else 0
    with path.open("ab") as f:
        f.write(orjson.dumps({"kind": rec.pop("kind"), "seq": seq, "id": f"j{seq}", "ts": rundir.utc_now(), **rec}) + b"\n")
    next_ms()


AGENT = """\
import json, os, sys, urllib.request, urllib.error
base = os.environ["OPENAI_BASE_URL"]
system = {"role": "system", "content": "You are a careful assistant. " * 10}
for prompt, stream in ((sys.argv[1], False), ("and then?", True)):
    body = {"model": "gpt-4o-mini", "messages": [system, {"role": "user", "content": prompt}]}
    if stream:
        body["stream"] = True
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=20).read()
    except urllib.error.HTTPError as e:
        print("model call refused:", e.code, e.read().decode(), file=sys.stderr)
        sys.exit(2)
"""


@pytest.fixture
def proxied_run(tmp_path: Path, upstream: Upstream) -> Path:
    """Attempt 1: a step around a call, a streamed call, a failed one; attempt 2 is served the first call."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    rundir.write_run_json(run_dir, {"id": "llm-run", "created": rundir.utc_now(), "format": rundir.FORMAT,
                                    "command": [sys.executable, str(agent), "hello"], "cwd": str(tmp_path)})
    proxy = LlmProxy(run_dir, upstreams={"openai": upstream.url})
    proxy.start()
    try:
        base = proxy.env()["OPENAI_BASE_URL"]
        journal_line(run_dir, {"kind": "start", "attempt": 1, "pid": 1})
        journal_line(run_dir, {"kind": "begin", "step": "think", "pos": 0})
        assert post(base, ask("hello"))[0] == 200
        journal_line(run_dir, {"kind": "step", "step": "think", "pos": 0, "output": "thought"})
        assert post(base, ask("and then?", stream=True))[0] == 200
        assert post(base, ask("x", model="fail"))[0] == 429
        journal_line(run_dir, {"kind": "start", "attempt": 2, "pid": 2, "resume": True})
        proxy.new_attempt(2)
        assert post(base, ask("hello"))[0] == 200  # served: the upstream is not called
    finally:
        proxy.close()
    assert upstream.calls == 3
    return run_dir


def test_log_text_and_json_show_the_calls_in_the_timeline(proxied_run: Path) -> None:
    r = run_cli("log", str(proxied_run))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    kinds = [line.split()[2] for line in lines]
    assert kinds == ["start", "begin", "step", "step", "step", "step", "start", "note"], r.stdout
    call = lines[2]
    assert "llm:openai:gpt-4o-mini  -> 200 answer-" in call and "[5 in (1 cached), 2 out" in call
    assert " ms" in call and "(llm.jsonl #0)" in call and "streamed" not in call
    assert "streamed" in lines[4] and "[7 in, 3 out" in lines[4] and "(llm.jsonl #1)" in lines[4]
    assert "ERROR HTTPError 429: slow down" in lines[5] and "(llm.jsonl #2)" in lines[5]
    assert "llm call served: #0 llm:openai:gpt-4o-mini to attempt 2" in lines[7]

    r = run_cli("log", "--json", str(proxied_run))
    recs = [orjson.loads(x) for x in r.stdout.splitlines()]
    assert [x.get("source") for x in recs] == [None, None, "llm", None, "llm", "llm", None, "llm"]
    assert recs[2]["inputs"]["body"]["messages"][0] == SYSTEM  # the blob expanded
    assert recs[2]["call"]["via"] == "proxy"

    r = run_cli("log", "--tail", "2", "--step", "llm:*", str(proxied_run))
    assert [x.split()[-1] for x in r.stdout.splitlines()] == ["#2)", "#3)"], r.stdout


def test_status_counts_the_calls_and_what_serving_saved(proxied_run: Path) -> None:
    r = run_cli("status", "--json", str(proxied_run))
    assert r.returncode == 0, r.stderr
    st = orjson.loads(r.stdout)
    assert st["tokens"] == {"input": 12, "output": 5, "cached": 1, "total": 17}
    assert st["saved_tokens"] == {"input": 5, "output": 2, "cached": 1, "total": 7}
    r = run_cli("status", str(proxied_run))
    assert "tokens     12 in (1 cached), 5 out" in r.stdout and "saved by resume 5 in, 2 out" in r.stdout


def test_export_puts_a_call_under_the_step_it_was_made_in(proxied_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    r = run_cli("export", str(proxied_run), "--otlp", str(out))
    assert r.returncode == 0, r.stderr
    spans = orjson.loads(out.read_bytes())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = [{a["key"]: next(iter(a["value"].values())) for a in s["attributes"]} for s in spans]
    by_name = {(s["name"], a.get("agent_supervisor.llm.seq")): (s, a) for s, a in zip(spans, attrs, strict=True)}
    think, _ = by_name[("think", None)]
    first, a0 = by_name[("chat gpt-4o-mini", "0")]
    assert first["parentSpanId"] == think["spanId"] and a0["gen_ai.usage.input_tokens"] == "5"
    second, _ = by_name[("chat gpt-4o-mini", "1")]
    assert second["parentSpanId"] != think["spanId"]
    root = attrs[-1]
    assert root["gen_ai.aggregated_usage.input_tokens"] == "12" and root["agent_supervisor.saved.input_tokens"] == "5"


def test_fork_copies_the_calls_and_its_proxy_serves_them(proxied_run: Path, tmp_path: Path, upstream: Upstream) -> None:
    fork_dir = tmp_path / "fork"
    r = run_cli("fork", str(proxied_run), "--at", "2", "--to", str(fork_dir))  # after the step "think"
    assert r.returncode == 0, r.stderr
    orig = llm_calls.read_calls(proxied_run)
    copied = llm_calls.read_calls(fork_dir)
    assert [{k: v for k, v in c.items() if k != "origin_seq"} for c in copied] == orig[:1]
    raw = [orjson.loads(x) for x in (fork_dir / llm_calls.CALLS).read_bytes().splitlines()]
    assert raw[0]["blobs"]  # the copy defines the blob it uses
    proxy = LlmProxy(fork_dir, upstreams={"openai": upstream.url})
    proxy.start()
    try:
        before = upstream.calls
        assert post(proxy.env()["OPENAI_BASE_URL"], ask("hello"))[0] == 200
        assert upstream.calls == before  # served from the fork's copy
    finally:
        proxy.close()


def test_replay_verify_serves_the_calls_and_reports_a_changed_prompt(proxied_run: Path, tmp_path: Path, upstream: Upstream) -> None:
    before = {p.name: p.read_bytes() for p in proxied_run.iterdir() if p.is_file()}
    calls = upstream.calls
    r = run_cli("replay", str(proxied_run), "--verify", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay verified" in r.stdout and "2 of 2 recorded model calls served" in r.stdout
    agent = tmp_path / "agent.py"
    r = run_cli("replay", str(proxied_run), "--verify", "--", sys.executable, str(agent), "good morning", timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIVERGED at a model call" in r.stdout and "POST /openai/chat/completions" in r.stdout
    assert "'gpt-4o-mini'" in r.stdout and "the recorded call 0 of llm.jsonl" in r.stdout
    assert '~ /messages/1/content: "hello" -> "good morning"' in r.stdout
    r = run_cli("replay", str(proxied_run), "--verify", "--json", "--", sys.executable, str(agent), "good morning", timeout=60)
    res = orjson.loads(r.stdout)
    assert res["exit_code"] == 1 and res["divergences"][0]["kind"] == "llm" and res["llm"]["mismatch"]["path"] == "/chat/completions"
    assert upstream.calls == calls  # nothing went upstream
    assert {p.name: p.read_bytes() for p in proxied_run.iterdir() if p.is_file()} == before  # no note was written
