"""OpenTelemetry export (issue 12): OTLP/JSON files, OTLP/HTTP to a real receiver, live from ``supervise``.

The receiver is a small HTTP server in the test that decodes what the official
exporter sent with the OpenTelemetry protocol's own message class
(``ExportTraceServiceRequest``): nothing of the exporter is mocked.
"""

from __future__ import annotations

import base64
import gzip
import http.server
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from supervisor.core import rundir
from supervisor.core.events import read_events
from supervisor.core.journal_reader import JournalReader
from supervisor.export.otlp import id_key, span_id, trace_id

from ..conftest import ROOT, clean_env, wait_for

AGENT = ROOT / "tests" / "integration" / "usage_agent.py"
SAMPLES = sorted(p for p in (ROOT / "sample_runs" / "runs").iterdir() if p.is_dir())
HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


# ---------------------------------------------------------------- helpers


class Receiver:
    """An OTLP/HTTP traces endpoint: decodes each POST into ExportTraceServiceRequest; answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.status = status
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                with outer.lock:
                    if outer.status == 200:
                        outer.requests.append(req)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    assert self.path == "/v1/traces", self.path
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def spans(self) -> list[Any]:
        with self.lock:
            return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def spans_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def key_of(run: Path) -> str:
    """What the run's ids derive from: its run.json's uid (a sample run from before uids: its name)."""
    return id_key(rundir.read_run_json(run), run.name)


def is_attempt(name: str) -> bool:
    """An attempt's own span (``attempt N``), not its ``attempt N started`` span."""
    return name.startswith("attempt ") and not name.endswith(" started")


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in span.get("attributes", []):
        (kind, v), = a["value"].items()
        if kind == "arrayValue":
            v = [x["stringValue"] for x in v["values"]]
        out[a["key"]] = int(v) if kind == "intValue" else v
    return out


def pb_attrs(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        v = getattr(kv.value, which)
        out[kv.key] = [x.string_value for x in v.values] if which == "array_value" else v
    return out


def check_otlp_json(doc: dict[str, Any], run_id: str) -> list[dict[str, Any]]:
    """The OTLP/JSON rules: lowercase hex ids, required fields, one root, parents present; and it parses
    as an ExportTraceServiceRequest (ids turned into protobuf JSON's base64, the one difference)."""
    spans = spans_of(doc)
    ids = {s["spanId"] for s in spans}
    assert len(ids) == len(spans), "span ids are unique"
    roots = [s for s in spans if not s.get("parentSpanId")]
    assert len(roots) == 1
    for s in spans:
        assert HEX32.match(s["traceId"]) and s["traceId"] == trace_id(run_id)
        assert HEX16.match(s["spanId"]) and s["spanId"] != "0" * 16
        if s.get("parentSpanId"):
            assert HEX16.match(s["parentSpanId"]) and s["parentSpanId"] in ids
        assert s["name"] and s["kind"] in (1, 3)
        start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
        assert 1_600_000_000 * 10**9 < start <= end
        assert s["status"]["code"] in (0, 1, 2)
        for e in s.get("events", []):
            assert e["name"] and int(e["timeUnixNano"]) > 0
    as_pb = orjson.loads(orjson.dumps(doc))
    for s in spans_of(as_pb):
        for k in ("traceId", "spanId", "parentSpanId"):
            if k in s:
                s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    json_format.ParseDict(as_pb, ExportTraceServiceRequest())  # strict: an unknown field or a bad type raises
    return spans


def usage_run(tmp_path: Path, *extra: str) -> Path:
    """The usage agent, crashed hard in its third model call, then resumed (two real processes)."""
    run = tmp_path / "run"
    args = [sys.executable, str(AGENT), str(run), "--crash-in", "model:local-llama",
            "--crash-marker", str(tmp_path / "crashed"), *extra]
    assert subprocess.run(args, capture_output=True, env=clean_env(), timeout=30).returncode == 1
    r = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    return run


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``agent-supervisor ARGS`` in this process (the real parser and exporter; no interpreter start)."""
    from supervisor.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def export_json(run: Path, out: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    from supervisor.cli.main import main

    if env:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            assert main(["export", str(run), "--otlp", str(out), *extra]) == 0
    else:
        assert main(["export", str(run), "--otlp", str(out), *extra]) == 0
    return orjson.loads(out.read_bytes())  # type: ignore[no-any-return]


# ---------------------------------------------------------------- OTLP/JSON files


@pytest.mark.parametrize("run", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample_run_exports_valid_otlp_json(run: Path, tmp_path: Path) -> None:
    doc = export_json(run, tmp_path / "t.json")
    spans = check_otlp_json(doc, key_of(run))
    entries = [e for e in JournalReader(run).load() if isinstance(e, dict)]
    steps = [e for e in entries if e.get("kind") == "step"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    starts = [e for e in entries if e.get("kind") == "start"]
    attempts = [s for s in spans if is_attempt(s["name"])]
    started = {s["name"].removesuffix(" started"): s for s in spans if s["name"].endswith(" started")}
    assert len(attempts) == len(starts) == len(started)
    root = next(s for s in spans if not s.get("parentSpanId"))
    assert root["spanId"] == span_id(run.name, "run") and root["name"] == f"run {run.name}"
    assert all(a["parentSpanId"] == root["spanId"] for a in attempts)
    assert all(started[a["name"]]["parentSpanId"] == a["spanId"] for a in attempts)
    step_spans = [s for s in spans if s not in attempts and s is not root and s not in started.values()]
    assert all(s["parentSpanId"] in {a["spanId"] for a in started.values()} for s in step_spans)
    if run.name == "clean":
        assert len(step_spans) == len(steps) and all(s["status"]["code"] == 0 for s in spans if s is not root)
        assert root["status"]["code"] == 1  # OK: the run succeeded
    if run.name == "crashed-resumed":
        # attempt 1 crashed in search:q2: an ERROR attempt, and the begun step interrupted
        a1 = by_name["attempt 1"][0]
        assert a1["status"]["code"] == 2 and "exit code 1" in a1["status"]["message"]
        assert attrs(a1)["process.exit.code"] == 1 and attrs(a1)["agent_supervisor.resume"] is False
        assert "restart" in [e["name"] for e in a1["events"]]
        a2 = by_name["attempt 2"][0]
        assert attrs(a2)["agent_supervisor.resume"] is True and attrs(a2)["agent_supervisor.replayed_steps"] == 2
        assert a2["status"]["code"] == 0
        q2 = sorted(by_name["search:q2"], key=lambda s: int(s["startTimeUnixNano"]))
        assert [s["status"]["code"] for s in q2] == [2, 0] and q2[0]["parentSpanId"] == started["attempt 1"]["spanId"]
        assert len(step_spans) == len(steps) + 1
    if run.name == "rolled-back":
        failed = [s for s in step_spans if s["status"]["code"] == 2]
        assert len(failed) == 3 and all(attrs(s)["agent_supervisor.abandoned"] is True for s in failed)
        assert all([e["name"] for e in s["events"]] == ["exception"] for s in failed)
        assert all(attrs(s)["error.type"] == "FakeModelError" for s in failed)
        a3 = by_name["attempt 3"][0]
        assert "rollback" in [e["name"] for e in a3["events"]]  # the SDK's rollback record
        assert a3["status"]["code"] == 0  # exit 75 asks for the restart: not a crash
        assert "backoff" in [e["name"] for e in by_name["attempt 2"][0]["events"]]
        assert len(step_spans) == len(steps)
    # checkpoints are events of their attempt
    n_cp = sum(1 for e in entries if e.get("kind") == "checkpoint")
    assert sum(1 for s in attempts for e in s.get("events", []) if e["name"] == "checkpoint") == n_cp


def test_genai_spans_tokens_cost_and_failed_tool(tmp_path: Path) -> None:
    run = usage_run(tmp_path, "--fail", "tool:search")
    doc = export_json(run, tmp_path / "t.json")
    spans = check_otlp_json(doc, key_of(run))
    names = [s["name"] for s in spans]
    for n in ("chat gpt-4o", "chat claude-sonnet-4-5", "chat gpt-4o-mini", "execute_tool write"):
        assert names.count(n) == 1, n
    assert names.count("execute_tool search") == 2  # failed once, then succeeded
    assert names.count("chat local-llama") == 2  # interrupted by the crash, then done
    gpt = attrs(next(s for s in spans if s["name"] == "chat gpt-4o"))
    assert next(s for s in spans if s["name"] == "chat gpt-4o")["kind"] == 3  # CLIENT
    assert gpt["gen_ai.operation.name"] == "chat" and gpt["gen_ai.provider.name"] == "openai"
    assert gpt["gen_ai.request.model"] == "gpt-4o" and gpt["gen_ai.response.model"] == "gpt-4o"
    assert gpt["gen_ai.usage.input_tokens"] == 1200 and gpt["gen_ai.usage.output_tokens"] == 300
    assert gpt["gen_ai.usage.cache_read.input_tokens"] == 200
    assert gpt["agent_supervisor.cost_usd"] == pytest.approx((1000 * 2.50 + 200 * 1.25 + 300 * 10.0) / 1e6)
    assert all("agent_supervisor.cost_usd" not in attrs(s) for s in spans if s["name"] == "chat local-llama")
    tools = [s for s in spans if s["name"] == "execute_tool search"]
    failed = next(s for s in tools if s["status"]["code"] == 2)
    ok = next(s for s in tools if s["status"]["code"] == 0)
    assert attrs(ok)["gen_ai.tool.name"] == "search" and attrs(ok)["gen_ai.tool.call.id"] == "call_1"
    assert attrs(ok)["gen_ai.operation.name"] == "execute_tool" and ok["kind"] == 1
    (exc,) = failed["events"]
    assert exc["name"] == "exception"
    assert attrs(exc)["exception.type"] == "RuntimeError" and attrs(exc)["exception.message"] == "tool:search failed"
    assert "Traceback" in attrs(exc)["exception.stacktrace"] or "line" in attrs(exc)["exception.stacktrace"]
    # without --content no inputs nor outputs leave the machine
    assert b"prompt 0" not in (tmp_path / "t.json").read_bytes()
    root = attrs(next(s for s in spans if not s.get("parentSpanId")))
    # the run's totals under keys of their own: a backend summing gen_ai.usage.* over the trace counts each call once
    assert "gen_ai.usage.input_tokens" not in root
    assert root["gen_ai.aggregated_usage.input_tokens"] == 9000 and root["agent_supervisor.saved.input_tokens"] == 3200
    assert root["agent_supervisor.unpriced_steps"] == 1
    # the crashed model call: interrupted under attempt 1, then done under attempt 2
    llama = sorted((s for s in spans if s["name"] == "chat local-llama"), key=lambda s: int(s["startTimeUnixNano"]))
    assert [s["status"]["code"] for s in llama] == [2, 0]
    key = key_of(run)
    assert llama[0]["parentSpanId"] == span_id(key, "attempt:1:started")
    assert llama[1]["parentSpanId"] == span_id(key, "attempt:2:started")


def test_export_twice_gives_the_same_ids(tmp_path: Path) -> None:
    run = ROOT / "sample_runs" / "runs" / "rolled-back"
    a = spans_of(export_json(run, tmp_path / "a.json"))
    b = spans_of(export_json(run, tmp_path / "b.json"))
    assert [(s["traceId"], s["spanId"], s.get("parentSpanId")) for s in a] == [
        (s["traceId"], s["spanId"], s.get("parentSpanId")) for s in b]
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_content_only_with_the_flag_and_redacted(tmp_path: Path) -> None:
    secret = "hunter2-very-secret-value"
    run = usage_run(tmp_path, "--secret", secret)
    assert secret.encode() in (run / "journal.jsonl").read_bytes()  # the agent did not know it was one
    plain = tmp_path / "plain.json"
    export_json(run, plain, env={"TEST_API_KEY": secret})
    assert secret.encode() not in plain.read_bytes() and b"prompt 1" not in plain.read_bytes()
    full = tmp_path / "full.json"
    doc = export_json(run, full, "--content", env={"TEST_API_KEY": secret})
    assert secret.encode() not in full.read_bytes()
    gpt = attrs(next(s for s in spans_of(doc) if s["name"] == "chat gpt-4o"))
    assert "[REDACTED]" in gpt["agent_supervisor.inputs"] and "prompt 0" in gpt["agent_supervisor.inputs"]
    assert "[REDACTED]" in gpt["agent_supervisor.output"]
    write = attrs(next(s for s in spans_of(doc) if s["name"] == "execute_tool write"))
    assert "prompt 5" in write["gen_ai.tool.call.arguments"] and "answer of tool:write" in write["gen_ai.tool.call.result"]
    assert (full.stat().st_mode & 0o777) == 0o600


def test_export_user_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run = ROOT / "sample_runs" / "runs" / "clean"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    code, _, err = cli(capsys, "export", str(run))
    assert code == 2 and "--otlp FILE.json" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "export", str(tmp_path / "nope"), "--otlp", str(tmp_path / "t.json"))
    assert code == 2 and "no such run directory" in err
    code, _, err = cli(capsys, "export", str(run), "--otlp", str(tmp_path / "missing" / "t.json"))
    assert code == 2 and "does not exist" in err
    # the [otlp] extra missing (an import of it fails): say what to install
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    code, _, err = cli(capsys, "export", str(run), "--otlp-endpoint", "http://127.0.0.1:9")
    assert code == 2 and "pip install 'agent-supervisor-tui[otlp]'" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---------------------------------------------------------------- OTLP/HTTP


def test_otlp_http_sends_the_same_spans_to_a_receiver(tmp_path: Path, receiver: Receiver,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = usage_run(tmp_path)
    doc = export_json(run, tmp_path / "t.json")
    code, out, err = cli(capsys, "export", str(run), "--otlp-endpoint", receiver.url)
    assert code == 0, err
    assert f"to {receiver.url}/v1/traces" in out
    got = receiver.spans()
    want = spans_of(doc)
    assert len(got) == len(want)
    ids = {s.span_id.hex(): s for s in got}
    assert set(ids) == {s["spanId"] for s in want}
    assert {s.trace_id.hex() for s in got} == {trace_id(key_of(run))}
    for w in want:  # same parent links, names, kinds, times and attributes as the file
        g = ids[w["spanId"]]
        assert g.parent_span_id.hex() == w.get("parentSpanId", "")
        assert g.name == w["name"] and g.kind == w["kind"] and g.status.code == w["status"]["code"]
        assert (g.start_time_unix_nano, g.end_time_unix_nano) == (int(w["startTimeUnixNano"]), int(w["endTimeUnixNano"]))
        assert pb_attrs(g) == attrs(w)
        assert [e.name for e in g.events] == [e["name"] for e in w.get("events", [])]
    res = {kv.key: kv.value.string_value for kv in receiver.requests[0].resource_spans[0].resource.attributes}
    assert res["service.name"] == "agent-supervisor" and res["agent_supervisor.run.id"] == "run"
    # again: the same trace and span ids (idempotent)
    first = sorted(ids)
    receiver.requests.clear()
    assert cli(capsys, "export", str(run), "--otlp-endpoint", receiver.url)[0] == 0
    assert sorted(s.span_id.hex() for s in receiver.spans()) == first
    assert {s.trace_id.hex() for s in receiver.spans()} == {trace_id(key_of(run))}


def test_otlp_http_from_the_environment_with_headers(tmp_path: Path, receiver: Receiver,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run = ROOT / "sample_runs" / "runs" / "crashed-resumed"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=agents")
    code, _out, err = cli(capsys, "export", str(run))
    assert code == 0, err
    assert len(receiver.spans()) == 11 and receiver.headers[0].get("x-team") == "agents"


def test_otlp_http_failure_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = Receiver(status=400)  # a non-retryable answer: fails at once
    try:
        code, _, err = cli(capsys, "export", str(ROOT / "sample_runs" / "runs" / "clean"), "--otlp-endpoint", bad.url)
    finally:
        bad.close()
    assert code == 2 and "could not send the spans to" in err and "400" in err
    assert len(err.strip().splitlines()) == 1


def test_an_attempt_that_died_before_its_start_record(tmp_path: Path) -> None:
    """Attempt 2 died before the SDK wrote its start: three attempt spans, each with its own exit."""
    run = tmp_path / "r"
    run.mkdir()
    ts = "2026-11-30T10:00:0{}.000Z".format
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [
        {"kind": "start", "attempt": 1, "resume": False, "ts": ts(0)},
        {"kind": "step", "step": "a", "output": 1, "attempt": 1, "ts": ts(1)},
        {"kind": "start", "attempt": 3, "resume": True, "ts": ts(5)},
        {"kind": "step", "step": "b", "output": 2, "attempt": 3, "ts": ts(6)},
    ]))
    (run / "supervisor.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [
        {"event": "spawn", "attempt": 1, "ts": ts(0), "resume": False},
        {"event": "exit", "attempt": 1, "ts": ts(2), "code": 1, "signal": None},
        {"event": "spawn", "attempt": 2, "ts": ts(3), "resume": True},
        {"event": "exit", "attempt": 2, "ts": ts(4), "code": None, "signal": "SIGKILL"},
        {"event": "spawn", "attempt": 3, "ts": ts(5), "resume": True},
        {"event": "exit", "attempt": 3, "ts": ts(7), "code": 0, "signal": None},
    ]))
    spans = check_otlp_json(export_json(run, tmp_path / "t.json"), "r")
    attempts = {s["name"]: s for s in spans if is_attempt(s["name"])}
    assert sorted(attempts) == ["attempt 1", "attempt 2", "attempt 3"]
    assert attempts["attempt 2"]["status"] == {"code": 2, "message": "killed by signal SIGKILL"}
    assert attempts["attempt 3"]["status"]["code"] == 0 and attrs(attempts["attempt 3"])["process.exit.code"] == 0
    b = next(s for s in spans if s["name"] == "b")
    assert attempts["attempt 3"]["spanId"] == span_id("r", "attempt:3")
    assert b["parentSpanId"] == span_id("r", "attempt:3:started")


def test_hand_written_journal_exports_valid_otlp_json(tmp_path: Path) -> None:
    """No start records, no ts, aliases, a line that is not JSON, a begin never finished."""
    run = tmp_path / "hand"
    run.mkdir()
    (run / "journal.jsonl").write_text("\n".join([
        '{"step": "a", "output": 1}',
        "a line that is not JSON",
        '{"step": "b", "error": "boom"}',
        '{"action": "c", "result": 2, "usage": [{"model": "gpt-4o", "input_tokens": 100, "output_tokens": 10}]}',
        '{"kind": "begin", "step": "d"}',
    ]) + "\n")
    spans = check_otlp_json(export_json(run, tmp_path / "t.json"), "hand")
    by = {s["name"]: s for s in spans}
    assert set(by) == {"a", "b", "c", "d", "run hand"}
    assert all(s["parentSpanId"] == span_id("hand", "run") for s in spans if s["name"] != "run hand")
    assert by["b"]["status"] == {"code": 2, "message": "boom"} and by["b"]["events"][0]["name"] == "exception"
    assert attrs(by["c"])["gen_ai.usage.input_tokens"] == 100
    assert attrs(by["c"])["agent_supervisor.cost_usd"] == pytest.approx((100 * 2.5 + 10 * 10.0) / 1e6)
    assert attrs(by["d"])["agent_supervisor.in_flight"] is True and by["d"]["status"]["code"] == 0


# ---------------------------------------------------------------- live from supervise


def _supervise(run: Path, endpoint: str, *agent: str, quiet: bool = True) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), *(["-q"] if quiet else []),
           "--backoff-initial", "0.05",
           "--otlp-endpoint", endpoint, "--", sys.executable, str(AGENT), str(run), *agent]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT)


def test_supervise_exports_finished_steps_live(tmp_path: Path, receiver: Receiver) -> None:
    run = tmp_path / "live"
    go = tmp_path / "go"
    p = _supervise(run, receiver.url, "--crash-in", "model:claude-sonnet-4-5", "--crash-marker", str(tmp_path / "m"),
                   "--wait-after", "model:local-llama", "--wait-file", str(go))
    try:
        # attempt 1 crashed; attempt 2 waits after local-llama: the spans of steps before its checkpoint are out
        # while the agent still runs, under attempt 2's started span (a live tree, no orphans)
        def claude_of_attempt_2() -> bool:
            by_id = {s.span_id.hex(): s for s in receiver.spans()}
            return any(s.name == "chat claude-sonnet-4-5" and s.parent_span_id.hex() in by_id
                       and by_id[s.parent_span_id.hex()].name == "attempt 2 started" for s in by_id.values())

        wait_for(claude_of_attempt_2, timeout=30, what="the live span of a finished step")
        assert p.poll() is None
        names = [s.name for s in receiver.spans()]
        assert "attempt 1" in names  # exported when attempt 2 was spawned
        assert f"run {run.name}" not in names  # the root goes out at the end, with the final status
        # local-llama ran after the checkpoint: held while a rollback could abandon it (issue 29, item 3)
        assert "chat local-llama" not in names
        go.touch()
        _out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err
    got = receiver.spans()
    doc = export_json(run, tmp_path / "t.json")  # the file export of the same run: the same span ids
    want = {s["spanId"]: s for s in spans_of(doc)}
    live = {s.span_id.hex(): s for s in got}
    assert len(live) == len(got)  # no span sent twice
    assert set(live) == set(want)
    for sid, s in live.items():
        assert s.parent_span_id.hex() == want[sid].get("parentSpanId", "") and s.name == want[sid]["name"]
    a1 = next(s for s in got if s.name == "attempt 1")
    assert a1.status.code == 2 and pb_attrs(a1)["process.exit.code"] == 1
    root = next(s for s in got if not s.parent_span_id)
    assert pb_attrs(root)["gen_ai.aggregated_usage.input_tokens"] == 9000
    # sent once run.json said how the run ended (issue 29, item 2): never "running" and UNSET
    assert pb_attrs(root)["agent_supervisor.run.status"] == "succeeded" and root.status.code == 1
    assert pb_attrs(root)["gen_ai.operation.name"] == "invoke_workflow"
    assert pb_attrs(a1)["gen_ai.operation.name"] == "invoke_agent" and pb_attrs(a1)["gen_ai.agent.name"] == "usage_agent"
    assert pb_attrs(a1)["session.id"] == pb_attrs(root)["gen_ai.conversation.id"] == rundir.read_run_json(run)["uid"]


def test_supervise_export_failure_is_reported_once_never_fatal(tmp_path: Path) -> None:
    bad = Receiver(status=400)  # refuses every batch at once (not retryable)
    run = tmp_path / "live"
    go = tmp_path / "go"
    try:
        p = _supervise(run, bad.url, "--wait-after", "model:gpt-4o", "--wait-file", str(go), quiet=False)
        try:
            wait_for(lambda: bad.headers, timeout=30, what="a first live batch")  # refused while the agent runs
            go.touch()
            _out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
    finally:
        bad.close()
    assert p.returncode == 0, err  # the run succeeded all the same
    assert len(bad.headers) >= 2  # the export went on after the failure (the last batch, the root)
    assert err.count("could not export spans to") == 1 and "400" in err
    events = [e for e in read_events(run) if e.get("event") == "export-error"]
    assert len(events) == 1 and "400" in events[0]["error"] and events[0]["endpoint"] == f"{bad.url}/v1/traces"
    assert rundir.read_run_json(run)["status"] == "succeeded"


def test_a_later_supervisor_root_span_counts_the_whole_run(tmp_path: Path, receiver: Receiver) -> None:
    """A run made earlier (crash, resume by hand), supervised again with live export: the new attempt
    serves every step; the root span sent live carries the whole run's totals, as export's does."""
    run = usage_run(tmp_path)
    p = _supervise(run, receiver.url)
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    live_root = next(s for s in receiver.spans() if not s.parent_span_id)
    names = sorted(s.name for s in receiver.spans())
    # no step ran: all were served from the journal. The supervisor goes on from the attempts the agent
    # made by hand (1 and 2, in the journal's start records): its attempt is 3
    assert names == ["attempt 3", "attempt 3 started", "run run"]
    attempt = next(s for s in receiver.spans() if s.name == "attempt 3")
    assert attempt.span_id.hex() == span_id(key_of(run), "attempt:3")
    doc = export_json(run, tmp_path / "t.json")
    assert {s["spanId"] for s in spans_of(doc)} >= {s.span_id.hex() for s in receiver.spans()}  # the same ids
    assert sum(1 for s in spans_of(doc) if is_attempt(s["name"])) == 3
    file_root = next(s for s in spans_of(doc) if not s.get("parentSpanId"))
    want = attrs(file_root)
    got = pb_attrs(live_root)
    for k in ("gen_ai.aggregated_usage.input_tokens", "agent_supervisor.saved.input_tokens", "agent_supervisor.cost_usd",
              "agent_supervisor.saved.cost_usd", "agent_supervisor.saved.steps"):
        assert got[k] == pytest.approx(want[k]), k
    assert want["agent_supervisor.saved.steps"] == 4  # each once: attempt 2 served 2 model steps, attempt 3 all 4


def test_a_large_run_is_sent_in_batches_with_progress(tmp_path: Path, receiver: Receiver,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """20,002 spans in one request took MLflow 100 s and failed the export (issue 29, item 4): requests of at
    most 500 spans, every span once, progress on stderr."""
    from supervisor.export.otlp_http import BATCH

    run = tmp_path / "big"
    run.mkdir()
    lines = [{"kind": "start", "attempt": 1, "pid": 1, "ts": "2026-12-01T10:00:00.000Z"}]
    lines += [{"step": f"s{i}", "output": i, "ts": f"2026-12-01T10:00:{i // 1000:02d}.{i % 1000:03d}Z"} for i in range(1300)]
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    code, _out, err = cli(capsys, "export", str(run), "--otlp-endpoint", receiver.url)
    assert code == 0, err
    sizes = [sum(len(ss.spans) for rs in r.resource_spans for ss in rs.scope_spans) for r in receiver.requests]
    assert len(sizes) >= 3 and max(sizes) <= BATCH
    assert len({s.span_id.hex() for s in receiver.spans()}) == len(receiver.spans()) == sum(sizes) >= 1300
    assert f"sent {sum(sizes)} of {sum(sizes)} spans" in err


def test_a_refused_connection_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The failure text did not say "connection refused" (issue 29, item 6)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = cli(capsys, "export", str(ROOT / "sample_runs" / "runs" / "clean"), "--otlp-endpoint",
                       f"http://127.0.0.1:{port}")
    assert code == 2 and "connection refused" in err.lower(), err
