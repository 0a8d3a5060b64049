"""The model-call proxy in this process against a fake upstream on loopback: what it records, serves and refuses."""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from supervisor.core import llm_calls, rundir

from ..conftest import wait_for

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from supervisor.supervise.llm_proxy import LlmProxy  # noqa: E402

pytestmark = pytest.mark.timeout(60)
KEY = "sk-test-0123456789abcdefghijklmnopqrstuv"


class Upstream:
    """An OpenAI-compatible server that counts what it serves; ``FAIL429`` in a prompt fails its first try,
    ``SLOW`` streams slowly."""

    def __init__(self) -> None:
        self.count = 0
        self.seen: set[str] = set()
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        self.loop.close()

    async def _chat(self, req: web.Request) -> web.StreamResponse:
        self.count += 1
        assert req.headers.get("Authorization") == f"Bearer {KEY}"
        body = await req.json()
        last = body["messages"][-1]["content"]
        if "FAIL429" in last and last not in self.seen:
            self.seen.add(last)
            return web.json_response({"error": {"message": "slow down"}}, status=429)
        text = f"answer to {last!r} #{len(json.dumps(body)) % 1000}"
        if body.get("stream"):
            r = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await r.prepare(req)
            for i in range(0, len(text), 4):
                chunk = {"model": body["model"], "choices": [{"delta": {"content": text[i:i + 4]}}]}
                await r.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
                if "SLOW" in last:
                    await asyncio.sleep(0.05)
            usage = {"model": body["model"], "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 5}}
            await r.write(b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n")
            return r
        return web.json_response({"model": body["model"], "choices": [{"message": {"role": "assistant", "content": text}}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": 4}})

    def __enter__(self) -> Upstream:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as u:
        yield u


def post(base: str, body: dict[str, Any], *, stop_after: int = 0) -> tuple[int, bytes]:
    """POST ``body`` to ``base/chat/completions``; ``stop_after``: close after that many bytes of the answer."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    conn.request("POST", f"{u.path}/chat/completions", body=orjson.dumps(body),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "Cookie": "s=1"})
    resp = conn.getresponse()
    data = resp.read(stop_after) if stop_after else resp.read()
    conn.close()
    return resp.status, data


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": [{"role": "system", "content": "Be brief. " * 20},
                                              {"role": "user", "content": text}], **extra}


def proxy_for(run_dir: Path, upstream: Upstream, **kw: Any) -> LlmProxy:
    p = LlmProxy(run_dir, upstreams={"openai": f"http://127.0.0.1:{upstream.port}/v1"}, stderr=kw.pop("stderr", None), **kw)
    p.start()
    return p


def calls(run_dir: Path) -> list[dict[str, Any]]:
    return llm_calls.step_calls(run_dir)


def test_answers_are_recorded_then_served_on_the_next_attempt(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        first = [post(base, chat("one")), post(base, chat("two", stream=True, stream_options={"include_usage": True}))]
        assert upstream.count == 2 and all(s == 200 for s, _ in first)
        recs = calls(tmp_path)
        assert [r["call"]["stream"] for r in recs] == [False, True]
        assert recs[1]["output"]["events"][-1] == "data: [DONE]"
        assert recs[0]["usage"][0]["input_tokens"] == 10 and recs[1]["usage"][0]["output_tokens"] == 5
        p.new_attempt(2)
        again = [post(base, chat("one")), post(base, chat("two", stream=True, stream_options={"include_usage": True}))]
        assert upstream.count == 2, "a recorded answer was paid again"
        assert again[0][0] == 200 and orjson.loads(again[0][1]) == orjson.loads(first[0][1])  # JSON-equal
        assert again[1] == first[1]  # a stream: the same events, byte for byte
        assert post(base, chat("three"))[0] == 200 and upstream.count == 3  # a new call goes live
    finally:
        p.close()
    notes = [r for r in llm_calls.read_calls(tmp_path) if r.get("message") == llm_calls.SERVED_NOTE]
    assert [n["served"] for n in notes] == [0, 1]


def test_identical_calls_repeat_by_their_count(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        post(base, chat("same"))
        post(base, chat("same"))
        assert [r["k"] for r in calls(tmp_path)] == [0, 1]
        p.new_attempt(2)
        post(base, chat("same"))
        post(base, chat("same"))
        assert upstream.count == 2
        post(base, chat("same"))  # a third: not recorded yet
        assert upstream.count == 3
    finally:
        p.close()


def test_a_429_is_recorded_and_never_served(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        assert post(base, chat("FAIL429 please"))[0] == 429
        assert post(base, chat("FAIL429 please"))[0] == 200  # the agent's retry: the same occurrence
        recs = calls(tmp_path)
        assert "error" in recs[0] and recs[0]["error"]["status"] == 429 and "output" not in recs[0]
        assert [r["k"] for r in recs] == [0, 0]
        p.new_attempt(2)
        assert post(base, chat("FAIL429 please"))[0] == 200
        assert upstream.count == 2  # the success was served; the 429 never is
    finally:
        p.close()


def test_the_secret_is_required_and_no_credential_is_written(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        wrong = base.replace(p.secret, "0" * 32)
        assert post(wrong, chat("x"))[0] == 403
        assert post(f"http://127.0.0.1:{p.port}", chat("x"))[0] == 403
        assert upstream.count == 0
        post(base, chat(f"my key is {KEY}"))  # a secret in a body is redacted too (a token shape)
        assert upstream.count == 1
    finally:
        p.close()
    for f in tmp_path.iterdir():
        data = f.read_bytes()
        assert KEY.encode() not in data and b"s=1" not in data and b"uthorization" not in data, f.name


def test_order_mode_serves_a_changed_prompt_and_notes_the_divergence(tmp_path: Path, upstream: Upstream) -> None:
    err = io.StringIO()
    p = proxy_for(tmp_path, upstream, match="order", stderr=err)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        s1, a1 = post(base, chat(f"now is {time.time()}"))
        p.new_attempt(2)
        s2, a2 = post(base, chat(f"now is {time.time() + 1}"))
        assert s2 == s1 == 200 and orjson.loads(a2) == orjson.loads(a1) and upstream.count == 1
    finally:
        p.close()
    notes = [r for r in llm_calls.read_calls(tmp_path) if r.get("message") == llm_calls.DIVERGED_NOTE]
    assert len(notes) == 1 and notes[0]["served"] == 0
    assert "differs from the recorded one" in err.getvalue()


def test_a_rollback_abandons_the_calls_after_its_checkpoint(tmp_path: Path, upstream: Upstream) -> None:
    from supervisor import Run

    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        run = Run.open(tmp_path)
        post(base, chat("before"))
        run.checkpoint("cp")
        cp_ts = rundir.utc_now()  # at or after the checkpoint record's time
        # the records' times have milliseconds: the call after the checkpoint must be in a later one
        wait_for(lambda: rundir.utc_now() > cp_ts, timeout=5, what="the next millisecond")
        post(base, chat("after"))
        run.close()
        from supervisor.supervise.rollback import append_rollback

        append_rollback(tmp_path, "cp", reason="test", by="test")
        p.new_attempt(2)
        post(base, chat("before"))
        assert upstream.count == 2
        post(base, chat("after"))
        assert upstream.count == 3, "a call of the abandoned branch was served"
    finally:
        p.close()


def test_an_agent_gone_mid_stream_still_gets_the_answer_recorded(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        status, part = post(base, chat("SLOW story", stream=True), stop_after=40)
        assert status == 200 and part.startswith(b"data: ")
        wait_for(lambda: calls(tmp_path), timeout=20, what="the record of the stream the agent left")
        rec = calls(tmp_path)[0]
        assert rec["output"]["events"][-1] == "data: [DONE]"
        p.new_attempt(2)
        status, whole = post(base, chat("SLOW story", stream=True))
        assert status == 200 and whole.endswith(b"data: [DONE]\n\n") and upstream.count == 1
    finally:
        p.close()


def test_a_stream_ends_only_once_its_record_is_written(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    try:
        base = p.env()["OPENAI_BASE_URL"]
        _, data = post(base, chat("tell", stream=True))
        assert data.endswith(b"data: [DONE]\n\n")
        assert len(calls(tmp_path)) == 1  # read right after the last event arrived: already on disk
    finally:
        p.close()


def test_not_live_refuses_an_unrecorded_call_and_names_it(tmp_path: Path, upstream: Upstream) -> None:
    p = proxy_for(tmp_path, upstream)
    post(p.env()["OPENAI_BASE_URL"], chat("known"))
    p.close()
    q = proxy_for(tmp_path, upstream, live=False)
    try:
        base = q.env()["OPENAI_BASE_URL"]
        assert post(base, chat("known"))[0] == 200
        assert post(base, chat("unknown"))[0] == 409
        assert q.mismatch is not None and q.mismatch["path"] == "/chat/completions" and upstream.count == 1
    finally:
        q.close()


def test_a_second_proxy_on_the_same_run_is_refused(tmp_path: Path, upstream: Upstream) -> None:
    from supervisor.errors import JournalLockedError

    p = proxy_for(tmp_path, upstream)
    try:
        with pytest.raises(JournalLockedError, match=r"llm\.jsonl"):
            proxy_for(tmp_path, upstream)
    finally:
        p.close()
