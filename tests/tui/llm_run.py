"""A run directory with a journal of SDK steps and a hand-written ``llm.jsonl`` (the TUI tests of model calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from supervisor import Run
from supervisor.core import rundir

SYSTEM = {"role": "system", "content": "You are a careful research assistant. " * 6}
BLOB = "b" * 32


def _next_ms() -> None:
    """Return once the records' clock (milliseconds) has moved on: a wait on the clock, at most a millisecond."""
    start = rundir.utc_now()
    while rundir.utc_now() == start:
        pass


def _chunk(data: Any) -> str:
    return "data: " + orjson.dumps(data).decode()


def make_llm_run(root: Path) -> Path:
    """Three SDK steps (``plan``, ``search:q1``, ``summarise``), and four proxied calls between them: a plain
    answer whose system prompt is a blob, a streamed one, a 429 and a served note (attempt 2 served call 0),
    then a divergence note."""
    run_dir = root / "run"
    with Run(run_dir) as run:
        run.step("plan", lambda: "plan it")
        _next_ms()  # a call recorded at the step's time goes after it and before the next step's begin
        run.step("search:q1", lambda: ["a", "b"])
        _next_ms()
        run.step("summarise", lambda: "done")
    recs = [orjson.loads(line) for line in (run_dir / "journal.jsonl").read_bytes().splitlines()]
    steps = [r for r in recs if r.get("kind") == "step"]
    t_plan, t_search = steps[0]["ts"], steps[1]["ts"]
    call = {"kind": "model", "via": "proxy", "provider": "openai", "model": "gpt-4o-mini", "api": "chat", "stream": False}
    usage = [{"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 1200, "output_tokens": 34, "cached_tokens": 0}]
    lines: list[dict[str, Any]] = [
        {"kind": "step", "seq": 0, "id": "c0", "ts": t_plan, "started": t_plan, "dur_ms": 812.0,
         "step": "llm:openai:gpt-4o-mini", "attempt": 1, "call": call, "key": "k0", "k": 0,
         "inputs": {"method": "POST", "path": "/chat/completions", "headers": {},
                    "body": {"model": "gpt-4o-mini", "messages": [{"$blob": BLOB}, {"role": "user", "content": "find durable agents"}]}},
         "blobs": {BLOB: SYSTEM},
         "output": {"status": 200, "headers": {}, "body": {"model": "gpt-4o-mini", "choices": [
             {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function", "function": {"name": "web_search", "arguments": "{\"q\": \"durable\"}"}}]}}],
             "usage": {"prompt_tokens": 1200, "completion_tokens": 34}}},
         "usage": usage},
        {"kind": "step", "seq": 1, "id": "c1", "ts": t_search, "started": t_search, "dur_ms": 95.5,
         "step": "llm:openai:gpt-4o-mini", "attempt": 1, "call": {**call, "stream": True}, "key": "k1", "k": 0,
         "inputs": {"method": "POST", "path": "/chat/completions", "headers": {},
                    "body": {"model": "gpt-4o-mini", "stream": True, "messages": [
                        {"$blob": BLOB}, {"role": "user", "content": "find durable agents"},
                        {"role": "tool", "tool_call_id": "call_1", "content": "two results"}]}},
         "output": {"status": 200, "headers": {}, "events": [
             _chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Durable "}}]}),
             _chunk({"choices": [{"index": 0, "delta": {"content": "agents resume."}}]}),
             _chunk({"choices": [], "usage": {"prompt_tokens": 1300, "completion_tokens": 5}}),
             "data: [DONE]"]},
         "usage": [{**usage[0], "input_tokens": 1300, "output_tokens": 5}]},
        {"kind": "step", "seq": 2, "id": "c2", "ts": t_search, "started": t_search, "dur_ms": 40.0,
         "step": "llm:openai:gpt-4o-mini", "attempt": 1, "call": call, "key": "k2", "k": 0,
         "inputs": {"method": "POST", "path": "/chat/completions", "headers": {},
                    "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "again"}]}},
         "error": {"type": "HTTPError", "status": 429, "message": "Too Many Requests", "headers": {},
                   "body": {"error": {"type": "rate_limit_error", "message": "Rate limit reached"}}}},
        {"kind": "note", "seq": 3, "ts": t_search, "message": "llm call served", "served": 0,
         "step": "llm:openai:gpt-4o-mini", "attempt": 2},
        {"kind": "note", "seq": 4, "ts": t_search, "message": "llm call diverged", "served": 1,
         "key": "k9", "recorded_key": "k1", "step": "llm:openai:gpt-4o-mini", "attempt": 2},
    ]
    (run_dir / "llm.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    return run_dir
