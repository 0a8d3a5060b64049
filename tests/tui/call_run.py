"""A run whose records the call view reads: a hand-written model step with a long conversation, a tool call that
failed once and was retried, plain steps with long values (an assertion, a module name past the pane's edge)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from supervisor.tui.app import SupervisorApp

ANSWER = (
    "## Plan\n\n- search the **journal** format\n- fetch the two pages\n\n"
    "The answer ends with the marker ZEBRA-END."
)
LONG_MODULE = "ModuleNotFoundError: No module named 'agent_plugins.retrieval.vector_stores.qdrant_hybrid_backend'"
ASSERTION = "AssertionError: assert normalise(slug_of(title)) == 'hello-world'"


def _ts(i: int) -> str:
    return f"2026-11-29T10:00:{i:02d}.000Z"


def _conversation(n: int) -> list[dict[str, Any]]:
    """``n`` chat messages: a system prompt, then user / assistant (a tool call) / tool turns; the last two new."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful research assistant."}]
    i = 0
    while len(msgs) < n - 2:
        msgs.append({"role": "user", "content": f"question {i}: what about durable agents part {i}?"})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "search", "arguments": f'{{"q": "part {i}"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"result of part {i}"})
        i += 1
    msgs = msgs[: n - 2]
    msgs.append({"role": "assistant", "content": "I have enough for a first plan."})
    msgs.append({"role": "user", "content": "Now write the plan, NEWEST-MESSAGE."})
    return msgs


def records() -> list[dict[str, Any]]:
    tb = ("Traceback (most recent call last):\n  File \"agent.py\", line 12, in search\n    raise TimeoutError(q)\n"
          "TimeoutError: search timed out after 30s")
    model_call = {"kind": "model", "model": "gpt-4o-mini", "provider": "openai"}
    recs: list[dict[str, Any]] = [
        {"kind": "start", "attempt": 1, "pid": 4000, "resume": False, "replayable_steps": 0, "argv": ["agent.py"]},
        {"kind": "step", "step": "setup", "pos": 0, "attempt": 1, "inputs": {"args": ["plugins"]},
         "inputs_hash": "94b266eb06179852", "output": {"loaded": LONG_MODULE}, "dur_ms": 2.0, "key": "calls:0"},
        {"kind": "step", "step": "model:plan", "pos": 1, "attempt": 1,
         "inputs": {"kwargs": {"model": "gpt-4o-mini", "messages": _conversation(75)}},
         "inputs_hash": "0c1d2e3f40516273", "dur_ms": 812.0, "key": "calls:1", "call": model_call,
         "usage": [{"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 1200, "output_tokens": 34,
                    "cached_tokens": 0}],
         "output": {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini", "choices": [
             {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": ANSWER, "tool_calls": [
                 {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": '{"q": "journal format"}'}},
                 {"id": "call_b", "type": "function", "function": {"name": "fetch", "arguments": '{"url": "https://x.invalid/1"}'}},
             ]}}]}},
        {"kind": "step", "step": "tool:search", "pos": 2, "attempt": 1, "inputs": {"kwargs": {"q": "journal format"}},
         "inputs_hash": "1111111111111111", "error": {"type": "TimeoutError", "message": "search timed out after 30s",
                                                        "traceback": tb},
         "transient": True, "dur_ms": 30000.0, "key": "calls:2", "call": {"kind": "tool", "tool": "search", "call_id": "call_a"}},
        {"kind": "step", "step": "tool:search", "pos": 2, "attempt": 1, "inputs": {"kwargs": {"q": "journal format"}},
         "inputs_hash": "1111111111111111", "output": ["journal.jsonl: one JSON object per line"], "dur_ms": 40.0,
         "key": "calls:2", "call": {"kind": "tool", "tool": "search", "call_id": "call_a"}},
        {"kind": "step", "step": "check", "pos": 3, "attempt": 1, "inputs": {"args": ["Hello World"]},
         "inputs_hash": "2222222222222222", "error": {"type": "AssertionError", "message": ASSERTION.split(": ", 1)[1]},
         "dur_ms": 1.0, "key": "calls:3"},
    ]
    for seq, r in enumerate(recs):
        r.update(seq=seq, id=f"c{seq:04d}", ts=_ts(seq))
    return recs


def make_call_run(dst: Path) -> Path:
    run = dst / "call_run"
    run.mkdir(mode=0o700)
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records()))
    (run / "agent.log").write_text(f"starting\nTraceback: {LONG_MODULE} (while loading the retrieval plugins)\n")
    (run / "run.json").write_bytes(orjson.dumps({"id": "calls", "format": 1, "created": _ts(0), "status": "failed",
                                                 "command": ["python", "agent.py"], "cwd": "."}))
    return run


def call_app() -> SupervisorApp:
    """The snapshot entry: the app on a fresh copy of the run, with settings of its own."""
    from supervisor.tui.app import make_app  # the unit tests take the records only: no Textual

    tmp = Path(tempfile.mkdtemp(prefix="snap-calls-"))
    atexit.register(shutil.rmtree, tmp, True)
    return make_app(make_call_run(tmp), settings_path=tmp / "settings.json")
