"""One trace with the agent's own spans (issue 29): ``supervise`` gives each attempt a W3C ``TRACEPARENT``, the
SDK makes it the active context, and a span the agent starts itself nests under its attempt's span."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from supervisor.export.otlp import attempt_span_context
from supervisor.sdk import trace_context

from ..conftest import ROOT, clean_env

AGENT = textwrap.dedent("""
    import json, os, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from supervisor import Run

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    out, crash_first = sys.argv[1], sys.argv[2] == "crash"
    with Run.open() as run:
        with trace.get_tracer("agent").start_as_current_span("own work"):
            run.step("work", lambda: 1)
        (own,) = spans.get_finished_spans()
        seen = {"attempt": run.attempt, "env": os.environ.get("TRACEPARENT"),
                "tracestate": os.environ.get("TRACESTATE"),
                "trace": format(own.context.trace_id, "032x"),
                "parent": format(own.parent.span_id, "016x") if own.parent else None}
        with open(out, "a") as f:
            f.write(json.dumps(seen) + "\\n")
        if crash_first and run.attempt == 1:
            os._exit(3)
""")
USER_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def supervise(tmp_path: Path, *opts: str, crash: bool = False, env: dict[str, str] | None = None) -> tuple[Path, list[dict[str, Any]]]:
    agent, out, run = tmp_path / "agent.py", tmp_path / "seen.jsonl", tmp_path / "run"
    agent.write_text(AGENT)
    base = {k: v for k, v in clean_env().items() if k not in ("TRACEPARENT", "TRACESTATE")}
    p = subprocess.run(
        [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q", "--backoff-initial", "0.05",
         *opts, "--", sys.executable, str(agent), str(out), "crash" if crash else "-"],
        capture_output=True, text=True, timeout=60, env={**base, **(env or {})}, cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    return run, [json.loads(line) for line in out.read_text().splitlines()]


def test_each_attempt_gets_its_span_and_the_agents_spans_nest_under_it(tmp_path: Path) -> None:
    run, seen = supervise(tmp_path, "--traceparent", "on", crash=True, env={"TRACESTATE": "other=1"})
    assert [s["attempt"] for s in seen] == [1, 2]
    for s in seen:
        trace_hex, span_hex = attempt_span_context(run, s["attempt"])
        assert s["env"] == f"00-{trace_hex}-{span_hex}-01"
        assert (s["trace"], s["parent"]) == (trace_hex, span_hex)
        assert s["tracestate"] is None  # another trace's state is not carried into ours
    assert seen[0]["parent"] != seen[1]["parent"]


@pytest.mark.parametrize(("opts", "user", "expect"), [
    ((), None, None),                                                       # auto without exporting: none
    (("--otlp-endpoint", "http://127.0.0.1:9"), None, "ours"),              # auto when exporting (dead receiver)
    (("--traceparent", "on"), USER_PARENT, USER_PARENT),                    # the user's is kept
    (("--traceparent", "replace"), USER_PARENT, "ours"),                    # unless told
    (("--traceparent", "off", "--otlp-endpoint", "http://127.0.0.1:9"), None, None),
])
def test_when_traceparent_is_set(tmp_path: Path, opts: tuple[str, ...], user: str | None, expect: str | None) -> None:
    run, (seen,) = supervise(tmp_path, *opts, env={"TRACEPARENT": user} if user else None)
    trace_hex, span_hex = attempt_span_context(run, 1)
    ours = f"00-{trace_hex}-{span_hex}-01"
    assert seen["env"] == (ours if expect == "ours" else expect)
    if seen["env"] is None:
        assert seen["parent"] is None  # no context: the agent's span is a root of its own trace
    else:
        assert seen["env"] == f"00-{seen['trace']}-{seen['parent']}-01"


def test_join_env_trace_leaves_bad_values_and_a_current_span_alone() -> None:
    from opentelemetry import context, trace
    from opentelemetry.sdk.trace import TracerProvider

    assert trace_context.join_env_trace({}) is None
    assert trace_context.join_env_trace({"TRACEPARENT": "00-nothex-01"}) is None
    with TracerProvider().get_tracer("t").start_as_current_span("mine") as mine:
        assert trace_context.join_env_trace({"TRACEPARENT": USER_PARENT}) is None
        assert trace.get_current_span() is mine
    token = trace_context.join_env_trace({"TRACEPARENT": USER_PARENT})
    assert token is not None
    try:
        assert format(trace.get_current_span().get_span_context().span_id, "016x") == "b7ad6b7169203331"
    finally:
        context.detach(token)  # type: ignore[arg-type]


def test_the_sdk_imports_no_opentelemetry_without_traceparent(tmp_path: Path) -> None:
    code = ("import sys; from supervisor import Run\n"
            f"r = Run.open({str(tmp_path / 'run')!r}); r.close('succeeded')\n"
            "print('opentelemetry' in sys.modules)")
    env = {k: v for k, v in clean_env().items() if k not in ("TRACEPARENT", "TRACESTATE")}
    without = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30, cwd=ROOT)
    with_it = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT,
                             env={**env, "TRACEPARENT": USER_PARENT})
    assert (without.stdout.strip(), with_it.stdout.strip()) == ("False", "True"), without.stderr + with_it.stderr
