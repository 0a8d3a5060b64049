"""The fake upstream and the agents without any proxy: each agent runs to completion straight against it,
twice with equal answers, and the server counts what the agent asked for."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ...conftest import wait_for
from . import fake_upstream
from .fake_upstream import FakeUpstream
from .util import AGENTS, ANTHROPIC_KEY, OPENAI_KEY, UpstreamProcess, direct_reference, key_sha, run_direct, served


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


OAI = {"Authorization": f"Bearer {OPENAI_KEY}"}
ANT = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def events(raw: bytes) -> list[str]:
    return [e for e in raw.decode().split("\n\n") if e]


@pytest.mark.timeout(30)
def test_answers_are_deterministic_and_counted(tmp_path: Path) -> None:
    count_file = tmp_path / "counts.json"
    with FakeUpstream(count_file) as up:
        s1, _, a = post(f"{up.url}/v1/chat/completions", chat("hello"), OAI)
        s2, _, b = post(f"{up.url}/v1/chat/completions", chat("hello"), OAI)
        s3, _, c = post(f"{up.url}/v1/chat/completions", chat("hello there"), OAI)
        assert (s1, s2, s3) == (200, 200, 200)
        assert a == b and a != c
        body = json.loads(a)
        assert body["choices"][0]["message"]["content"].startswith("[")
        usage = body["usage"]
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert "cached_tokens" in usage["prompt_tokens_details"]
        assert "reasoning_tokens" in usage["completion_tokens_details"]
        # no credentials: 401, counted too
        assert post(f"{up.url}/v1/chat/completions", chat("hello"))[0] == 401
        assert post(f"{up.url}/v1/chat/completions", chat("hello"), {"Authorization": "Bearer nope"})[0] == 401
        assert post(f"{up.url}/v1/messages", chat("hello"))[0] == 401
        status, _, raw = post(f"{up.url}/v1/messages", {**chat("hello"), "max_tokens": 5}, ANT)
        assert status == 200
        msg = json.loads(raw)
        assert msg["type"] == "message" and msg["content"][0]["type"] == "text"
        assert set(msg["usage"]) == {"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
        status, _, raw = post(f"{up.url}/v1/responses", {"model": "m", "input": "hello"}, OAI)
        assert status == 200 and json.loads(raw)["output"][0]["content"][0]["type"] == "output_text"
        with urllib.request.urlopen(f"{up.url}/_counts", timeout=10) as r:
            live = json.loads(r.read())
        on_disk = json.loads(count_file.read_bytes())
    assert live == on_disk == up.counts()
    assert live["total"] == 8
    assert live["by_path"] == {"/v1/chat/completions": 5, "/v1/messages": 2, "/v1/responses": 1}
    assert [r["status"] for r in live["requests"]] == [200, 200, 200, 401, 401, 401, 200, 200]
    assert live["requests"][0]["body_sha"] == live["requests"][1]["body_sha"] != live["requests"][2]["body_sha"]
    assert live["requests"][0]["key_sha"] == key_sha(OPENAI_KEY)
    assert live["requests"][6]["key_sha"] == key_sha(ANTHROPIC_KEY)
    assert all(r["state"] == "done" for r in live["requests"])


@pytest.mark.timeout(30)
def test_fail_once_tools_and_streams(tmp_path: Path) -> None:
    with FakeUpstream() as up:
        url = f"{up.url}/v1/chat/completions"
        status, headers, raw = post(url, chat("x FAIL429-ONCE:t1"), OAI)
        assert status == 429 and headers["retry-after"] == "0"
        assert json.loads(raw)["error"]["type"] == "rate_limit_error"
        assert post(url, chat("x FAIL429-ONCE:t1"), OAI)[0] == 200
        assert post(url, chat("x FAIL429-ONCE:t2"), OAI)[0] == 429  # another tag: once more
        assert post(f"{up.url}/v1/messages", chat("y FAIL429-ONCE:t3"), ANT)[0] == 429

        tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
        _, _, raw = post(url, chat("use it", tools=tools), OAI)
        call = json.loads(raw)["choices"][0]
        assert call["finish_reason"] == "tool_calls"
        tc = call["message"]["tool_calls"][0]
        assert tc["function"]["name"] == "lookup" and "query" in json.loads(tc["function"]["arguments"])
        after = chat("use it", tools=tools)
        after["messages"] += [call["message"], {"role": "tool", "tool_call_id": tc["id"], "content": "found"}]
        _, _, raw = post(url, after, OAI)
        assert json.loads(raw)["choices"][0]["message"]["content"]

        _, _, raw = post(f"{up.url}/v1/messages", {**chat("use it"), "max_tokens": 9,
                                                   "tools": [{"name": "lookup", "input_schema": {"type": "object"}}]}, ANT)
        assert json.loads(raw)["content"][0]["type"] == "tool_use"

        status, headers, raw = post(url, chat("stream", stream=True, stream_options={"include_usage": True}), OAI)
        evs = events(raw)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        assert evs[-1] == "data: [DONE]"
        assert json.loads(evs[-2].removeprefix("data: "))["usage"]["completion_tokens"] > 0
        deltas = [json.loads(e.removeprefix("data: "))["choices"] for e in evs[1:-2]]
        assert sum(1 for d in deltas if d and d[0]["delta"].get("content")) == fake_upstream.CHUNKS
        no_usage = events(post(url, chat("stream", stream=True), OAI)[2])
        assert all("usage" not in json.loads(e.removeprefix("data: ")) for e in no_usage[:-1])

        _, _, raw = post(f"{up.url}/v1/messages", {**chat("stream"), "max_tokens": 9, "stream": True}, ANT)
        names = [e.split("\n")[0].removeprefix("event: ") for e in events(raw)]
        assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
        assert names.count("content_block_delta") == fake_upstream.CHUNKS

        _, _, raw = post(f"{up.url}/v1/responses", {"model": "m", "input": "stream", "stream": True}, OAI)
        names = [e.split("\n")[0].removeprefix("event: ") for e in events(raw)]
        assert names[0] == "response.created" and names[-1] == "response.completed"
        assert "response.output_text.delta" in names
        done = json.loads(events(raw)[-1].split("\n")[1].removeprefix("data: "))
        assert done["response"]["usage"]["output_tokens"] > 0


@pytest.mark.timeout(30)
def test_a_slow_stream_shows_in_the_counts_while_it_runs(tmp_path: Path) -> None:
    """What the torture test waits on: a SLOW request is counted ``started`` at its arrival, ``done`` at its end."""
    with UpstreamProcess(tmp_path) as up:
        body = json.dumps({**chat("SLOW please"), "max_tokens": 9, "stream": True}).encode()
        req = urllib.request.Request(f"{up.url}/v1/messages", data=body, method="POST",
                                     headers={"content-type": "application/json", **ANT})
        with urllib.request.urlopen(req, timeout=10) as r:
            first = r.readline()
            assert first.startswith(b"event: message_start")
            (entry,) = up.counts()["requests"]
            assert entry["slow"] and entry["stream"] and entry["state"] == "started"
            rest = r.read()
        assert rest.count(b"event: content_block_delta") == fake_upstream.SLOW_CHUNKS
        wait_for(lambda: up.counts()["requests"][0]["state"] == "done", timeout=10, what="the request's end")
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=10) == 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", list(AGENTS))
def test_agent_runs_straight_against_the_upstream(name: str, tmp_path: Path,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    agent = AGENTS[name]
    if (why := agent.missing()) is not None:
        pytest.skip(why)
    first = direct_reference(agent, tmp_path_factory)  # the proxy tests' reference too: run once
    second = run_direct(agent, tmp_path / "two")
    assert first.output == second.output, "the same agent against a fresh upstream answered differently"
    assert len(first.output.splitlines()) == agent.calls
    assert "done" in first.stdout
    for run in (first, second):
        c = run.counts
        assert c["by_path"] == agent.requests
        assert sorted(r["status"] for r in c["requests"] if r["status"] != 200) == sorted(agent.statuses)
        assert all(r["state"] == "done" for r in c["requests"])
        want = {"/v1/messages": key_sha(ANTHROPIC_KEY)}
        assert all(r["key_sha"] == want.get(r["path"], key_sha(OPENAI_KEY)) for r in c["requests"])
        assert sum(1 for r in c["requests"] if r["slow"]) == (1 if agent.slow else 0)
    assert served(first.counts) == served(second.counts)
