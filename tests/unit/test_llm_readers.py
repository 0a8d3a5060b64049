"""Each reader of the proxy's ``llm.jsonl``, on hand-written files: a call using a blob another line defined, a
streamed call, a failed one (an ``error`` record), a ``llm call served`` note, a call on a branch a rollback
abandoned; ``log`` (text, ``--json``, ``--tail``, the filters, ``--all``), usage and cost, OTLP spans, fork,
and the replay verdict of a proxied agent."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.cli.log_text import answer_text
from supervisor.cli.main import main
from supervisor.core import llm_calls, rundir
from supervisor.core.fork import fork
from supervisor.core.journal_reader import JournalReader
from supervisor.core.usage import UsageFold, run_usage
from supervisor.export.otlp import build_spans
from supervisor.replay.runner import EXIT_AGENT_FAILED, EXIT_DIVERGED, EXIT_OK, ReplayResult, format_result
from supervisor.replay.session import ReplayMode

pytestmark = pytest.mark.timeout(30)

SYSTEM = {"role": "system", "content": "s" * 200}
T = "2026-12-02T10:00:0{}Z".format


def call(seq: int, ts: str, started: str, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "kind": "step", "seq": seq, "id": f"c{seq}", "ts": ts, "started": started,
        "step": "llm:openai:gpt-4o-mini", "attempt": 1, "dur_ms": 20.0,
        "call": {"kind": "model", "via": "proxy", "provider": "openai", "model": "gpt-4o-mini", "api": "chat",
                 "stream": False},
        "key": f"{seq:032x}", "k": 0, "match": "m" * 32, "km": seq,
        "inputs": {"method": "POST", "path": "/chat/completions", "headers": {},
                   "body": {"model": "gpt-4o-mini", "messages": [{"$blob": "b" * 32}, {"role": "user", "content": f"q{seq}"}]}},
    }
    rec.update(extra)
    return rec


def write(path: Path, recs: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Journal: attempt 1 with a step ``think`` (a call inside it), a checkpoint, a step, a rollback to the
    checkpoint (a call on the abandoned branch), attempt 2 (a served note)."""
    d = tmp_path / "run"
    d.mkdir()
    rundir.write_run_json(d, {"id": "r", "format": 1, "created": T("0.000")})
    write(d / "journal.jsonl", [
        {"kind": "start", "seq": 0, "id": "j0", "ts": T("0.000"), "attempt": 1, "pid": 1},
        {"kind": "begin", "seq": 1, "id": "j1", "ts": T("0.100"), "step": "think", "pos": 0},
        {"kind": "step", "seq": 2, "id": "j2", "ts": T("1.000"), "step": "think", "pos": 0, "output": "ok"},
        {"kind": "checkpoint", "seq": 3, "id": "j3", "ts": T("2.000"), "name": "cp", "pos": 1},
        {"kind": "step", "seq": 4, "id": "j4", "ts": T("3.600"), "step": "act", "pos": 1, "output": "done"},
        {"kind": "rollback", "seq": 5, "id": "j5", "ts": T("4.000"), "checkpoint": "cp", "checkpoint_seq": 3,
         "reason": "retry"},
        {"kind": "start", "seq": 6, "id": "j6", "ts": T("5.000"), "attempt": 2, "pid": 2, "resume": True},
    ])
    write(d / llm_calls.CALLS, [
        call(0, T("0.500"), T("0.200"), blobs={"b" * 32: SYSTEM},
             output={"status": 200, "headers": {}, "body": {"choices": [{"message": {"content": "hello there"}}]}},
             usage=[{"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 100, "output_tokens": 10,
                     "cached_tokens": 40}]),
        call(1, T("1.500"), T("1.400"), call={"kind": "model", "via": "proxy", "provider": "openai",
                                               "model": "gpt-4o-mini", "api": "chat", "stream": True},
             output={"status": 200, "headers": {}, "events": [
                 'data: {"choices":[{"delta":{"content":"str"}}]}', 'data: {"choices":[{"delta":{"content":"eam"}}]}',
                 'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}', "data: [DONE]"]},
             usage=[{"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 7, "output_tokens": 3}]),
        call(2, T("1.800"), T("1.700"), error={"type": "HTTPError", "status": 429, "message": "slow down"}),
        call(3, T("3.500"), T("3.400"),  # after the checkpoint, before the rollback: abandoned
             output={"status": 200, "headers": {}, "body": {"choices": [{"message": {"content": "lost"}}]}},
             usage=[{"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 1000, "output_tokens": 1}]),
        {"kind": "note", "seq": 4, "ts": T("5.500"), "message": llm_calls.SERVED_NOTE, "served": 0,
         "step": "llm:openai:gpt-4o-mini", "attempt": 2},
    ])
    return d


def log(monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[list[str], int]:
    out = io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    rc = main(["log", *argv])
    stdout.flush()
    return out.getvalue().decode().splitlines(), rc


# ---------------------------------------------------------------- log
def test_log_text_merges_the_calls_by_time(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, rc = log(monkeypatch, str(run))
    assert rc == 0
    assert [ln.split()[0] for ln in lines] == ["0", "1", "-", "2", "-", "-", "3", "5", "6", "-"], lines
    first = lines[2]
    assert "llm:openai:gpt-4o-mini  -> 200 hello there  [100 in (40 cached), 10 out" in first
    assert first.endswith("  20 ms  (llm.jsonl #0)")
    assert "-> 200 stream  [7 in, 3 out" in lines[4] and lines[4].endswith("  20 ms  streamed  (llm.jsonl #1)")
    assert "ERROR HTTPError 429: slow down" in lines[5] and lines[5].endswith("(llm.jsonl #2)")
    assert "llm call served: #0 llm:openai:gpt-4o-mini to attempt 2" in lines[9]
    assert not any("lost" in ln for ln in lines)  # the abandoned call: only with --all


def test_log_all_marks_the_abandoned_call(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, _ = log(monkeypatch, "--all", str(run))
    lost = [ln for ln in lines if "lost" in ln]
    assert len(lost) == 1 and lost[0].startswith("~ ") and lost[0].endswith("(llm.jsonl #3)")


def test_log_json_adds_the_source_and_expands_blobs(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, _ = log(monkeypatch, "--json", str(run))
    recs = [orjson.loads(x) for x in lines]
    calls = [r for r in recs if r.get("source") == "llm"]
    assert [r["seq"] for r in calls] == [0, 1, 2, 4]
    assert calls[0]["inputs"]["body"]["messages"][0] == SYSTEM and "blobs" not in calls[0]
    assert "error" in calls[2] and calls[3]["kind"] == "note"
    lines, _ = log(monkeypatch, "--json", "--all", str(run))
    lost = [orjson.loads(x) for x in lines if b'"lost"' in x.encode()]
    assert lost[0]["abandoned"] is True and lost[0]["source"] == "llm"


def test_log_filters_and_tail_see_the_one_timeline(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, _ = log(monkeypatch, "--tail", "3", str(run))
    assert [ln.split()[0] for ln in lines] == ["5", "6", "-"]
    lines, _ = log(monkeypatch, "--step", "llm:*", "--tail", "2", str(run))
    assert [ln.rsplit("#", 1)[1] for ln in lines] == ["2)", "4)"]
    lines, _ = log(monkeypatch, "--kind", "note", str(run))
    assert len(lines) == 1 and "llm call served" in lines[0]
    lines, _ = log(monkeypatch, "--since", "2", str(run))  # a seq is the journal's: the calls from there on
    assert [ln.split()[0] for ln in lines] == ["2", "-", "-", "3", "5", "6", "-"]
    lines, _ = log(monkeypatch, "--since", "2026-12-02T10:00:01.4Z", str(run))
    assert lines[0].endswith("(llm.jsonl #1)")


def test_log_of_a_run_with_only_calls(tmp_path: Path, run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "only"
    d.mkdir()
    (d / "run.json").write_bytes((run / "run.json").read_bytes())
    (d / llm_calls.CALLS).write_bytes((run / llm_calls.CALLS).read_bytes())
    lines, rc = log(monkeypatch, str(d))
    assert rc == 0 and len(lines) == 5 and all(ln.split()[0] == "-" for ln in lines)


# ---------------------------------------------------------------- usage
def test_usage_counts_every_call_and_saves_the_served_one(run: Path) -> None:
    u = run_usage(JournalReader(run).load(lazy=True), calls=llm_calls.read_calls(run))
    assert (u.tokens.input, u.tokens.output, u.tokens.cached) == (1107, 14, 40)  # the abandoned call was paid
    assert (u.saved_tokens.input, u.saved_tokens.output, u.saved_steps) == (100, 10, 1)
    assert u.steps == 3 and u.by_model["gpt-4o-mini"].input == 1107


def test_usage_note_before_its_call_and_priced_calls() -> None:
    fold = UsageFold(price=lambda rec: 0.5)
    fold.add_call({"kind": "note", "message": llm_calls.SERVED_NOTE, "served": 7})
    fold.add_call({"kind": "step", "seq": 7, "usage": [{"input_tokens": 3, "output_tokens": 1}]})
    fold.add_call({"kind": "note", "message": llm_calls.SERVED_NOTE, "served": 99})  # no such call: nothing
    fold.add_call({"kind": "step", "seq": 8, "error": {"type": "HTTPError"}})  # no usage
    u = fold.result
    assert (u.tokens.total, u.saved_tokens.total, u.cost_usd, u.saved_cost_usd) == (4, 4, 0.5, 0.5)


def test_status_prints_the_calls_tokens(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["status", str(run)]) == 0
    assert "tokens     1,107 in (40 cached), 14 out" in out.getvalue()
    assert "saved by resume 100 in, 10 out" in out.getvalue()


# ---------------------------------------------------------------- export
def test_spans_of_the_calls(run: Path) -> None:
    _, spans = build_spans(run)
    by = {s.attributes.get("agent_supervisor.llm.seq", s.name): s for s in spans}
    think = next(s for s in spans if s.name == "think")
    first = by[0]
    assert first.name == "chat gpt-4o-mini" and first.parent_id == think.span_id
    assert first.attributes["gen_ai.usage.input_tokens"] == 100
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 40
    assert first.attributes["agent_supervisor.source"] == "llm"
    assert first.end_ns - first.start_ns == 300_000_000  # started .. ts
    attempt1 = next(s for s in spans if s.name == "attempt 1 started")  # the parent of the attempt's steps
    assert by[1].parent_id == attempt1.span_id  # made between steps
    assert by[2].status_code == 2 and by[2].events[0].name == "exception"
    assert by[3].attributes["agent_supervisor.abandoned"] is True
    attempt2 = next(s for s in spans if s.name == "attempt 2")
    assert [e.name for e in attempt2.events] == [llm_calls.SERVED_NOTE]
    root = spans[-1]
    assert root.attributes["gen_ai.aggregated_usage.input_tokens"] == 1107
    assert root.attributes["agent_supervisor.saved.input_tokens"] == 100
    assert len({s.span_id for s in spans}) == len(spans)


def test_a_call_in_an_interrupted_step_is_its_child(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "journal.jsonl", [
        {"kind": "start", "seq": 0, "ts": T("0.000"), "attempt": 1},
        {"kind": "begin", "seq": 1, "ts": T("0.100"), "step": "think", "pos": 0},
    ])
    write(d / llm_calls.CALLS, [call(0, T("0.500"), T("0.200"), output={"status": 200, "body": {}})])
    _, spans = build_spans(d)
    think = next(s for s in spans if s.name == "think")
    assert next(s for s in spans if s.name.startswith("chat")).parent_id == think.span_id


# ---------------------------------------------------------------- fork
def test_fork_copies_the_calls_of_the_history(run: Path, tmp_path: Path) -> None:
    orig = llm_calls.read_calls(run)
    new = fork(run, 6, tmp_path / "f")  # the end: after the rollback
    got = llm_calls.read_calls(new)
    assert [c["origin_seq"] for c in got] == [0, 1, 2]  # not the abandoned one, not the note of after the end
    assert [{k: v for k, v in c.items() if k not in ("seq", "origin_seq")} for c in got] == [
        {k: v for k, v in c.items() if k != "seq"} for c in orig[:3]]
    assert [c["seq"] for c in got] == [0, 1, 2]
    raw = [orjson.loads(x) for x in (new / llm_calls.CALLS).read_bytes().splitlines()]
    assert len(raw[0]["blobs"]) == 1 and "blobs" not in raw[1]  # defined once, where the copy first uses it


def test_fork_before_a_call_and_its_note(run: Path, tmp_path: Path) -> None:
    new = fork(run, 1, tmp_path / "f1")  # the begin of think: before the first call
    assert not (new / llm_calls.CALLS).exists()
    # fork inside the branch later abandoned: its call is the fork's
    new = fork(run, 4, tmp_path / "f4")
    assert [c["origin_seq"] for c in llm_calls.read_calls(new)] == [0, 1, 2, 3]
    write(run / llm_calls.CALLS, [*llm_calls.read_calls(run)[:1], {"kind": "note", "seq": 1, "ts": T("0.600"),
          "message": llm_calls.SERVED_NOTE, "served": 0}])
    got = llm_calls.read_calls(fork(run, 2, tmp_path / "f2"))
    assert [(c["kind"], c.get("served")) for c in got] == [("step", None), ("note", 0)]


# ---------------------------------------------------------------- replay verdict
def result(llm: dict[str, Any] | None, report: dict[str, Any] | None = None, rc: int = 0) -> ReplayResult:
    return ReplayResult(ReplayMode("strict"), Path("/r"), ["agent"], rc, 0.1, report, llm=llm)


def test_replay_verdict_of_a_proxied_agent() -> None:
    ok = result({"recorded": 2, "served": 2, "mismatch": None})
    assert ok.exit_code == EXIT_OK and "2 of 2 recorded model calls served" in format_result(ok)[-1]
    bad = result({"recorded": 2, "served": 1, "mismatch": {
        "route": "openai", "method": "POST", "path": "/chat/completions", "model": "gpt-4o-mini", "key": "k" * 32,
        "k": 0, "recorded_seq": 1, "expected_body": {"messages": ["hi"]}, "actual_body": {"messages": ["hello"]}}}, rc=2)
    lines = format_result(bad)
    assert bad.exit_code == EXIT_DIVERGED and bad.divergences[0]["kind"] == "llm"
    assert lines[0].startswith("DIVERGED at a model call (after 1 served): POST /openai/chat/completions")
    assert "the recorded call 1 of llm.jsonl" in lines[1] and '"hi" -> "hello"' in lines[2]
    assert result({"recorded": 2, "served": 0, "mismatch": None}).exit_code == EXIT_AGENT_FAILED  # made no call
    assert result({"recorded": 2, "served": 2, "mismatch": None}, rc=1).exit_code == EXIT_AGENT_FAILED
    sdk = result({"recorded": 1, "served": 1, "mismatch": None},
                 report={"divergences": [], "replayed": 3, "journal_steps": 3})
    assert sdk.exit_code == EXIT_OK and format_result(sdk)[-1].endswith("every call the agent made was served")
    assert result(None).exit_code == EXIT_AGENT_FAILED  # no report, no calls: as before


def test_log_warns_of_a_bad_line_in_llm_jsonl(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with (run / llm_calls.CALLS).open("ab") as f:
        f.write(b"not json\n")
    err = io.StringIO()
    lines, rc = log(monkeypatch, str(run))
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    assert main(["log", str(run)]) == 0
    assert rc == 0 and len(lines) == 10
    assert f"{run / llm_calls.CALLS}:6: skipped, not JSON" in err.getvalue()


def test_log_reads_the_text_of_each_apis_answer() -> None:
    responses = {"object": "response", "output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "zulu bravo", "annotations": []}]},
        {"type": "function_call", "name": "lookup", "arguments": "{}"}]}
    assert answer_text({"status": 200, "body": responses}) == "zulu bravo"
    assert answer_text({"status": 200, "body": {"output_text": "from an SDK's dump"}}) == "from an SDK's dump"
    chat = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
    assert answer_text({"status": 200, "body": chat}) == "hello"
    anthropic = {"type": "message", "content": [{"type": "text", "text": "hi "}, {"type": "tool_use", "name": "x"}]}
    assert answer_text({"status": 200, "body": anthropic}) == "hi "
    assert answer_text({"status": 200, "body": {"choices": [{"message": {"tool_calls": []}}]}}) is None
