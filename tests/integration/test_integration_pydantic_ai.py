"""The Pydantic AI adapter (``supervisor.integrations.pydantic_ai``): every model request and tool call a step.

In-process: the sample agent run twice in one run directory (the second run serves every step: the model
function and the tools are not called, the output is equal), the records' ``call``/``usage``/inputs, tool
answers Pydantic AI raises (``ModelRetry``) journaled as outputs, the response codec, a missing framework. One real-process
test: ``supervise`` restarts the sample agent after it crashed with ``os._exit`` inside a tool, and the model was
asked exactly as often as in a clean run, for the same report.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import runpy
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from supervisor import Run
from supervisor.integrations.pydantic_ai import (
    DurableAgent,
    JournalCapability,
    ToolRaised,
    dump_response,
    load_response,
)

from ..conftest import ROOT, clean_env
from .supervisor_util import PY, Supervised

SAMPLE = ROOT / "sample_runs" / "pydantic_ai_agent.py"


def sample() -> ModuleType:
    """The sample agent's module, imported once under its own name (the codec finds its ``Page`` class there)."""
    mod = sys.modules.get("pydantic_ai_agent")
    if mod is None:
        spec = importlib.util.spec_from_file_location("pydantic_ai_agent", SAMPLE)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["pydantic_ai_agent"] = mod
        spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _close_the_run_sync_loop() -> Iterator[None]:
    """Pydantic AI's ``run_sync`` leaves its event loop set on the thread, open, for the next call: close it after
    each test (a later ``asyncio.run`` would orphan it: an "unclosed event loop" warning, an error here)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:  # none set (closed after an earlier test)
            return
    loop.close()
    asyncio.set_event_loop(None)


def records(run_dir: Path, kind: str = "step") -> list[dict[str, Any]]:
    return [r for r in map(orjson.loads, (run_dir / "journal.jsonl").read_bytes().splitlines()) if r.get("kind", "step") == kind]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_second_run_serves_every_step_and_records_calls_and_usage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = sample()
    calls = tmp_path / "model_calls"
    monkeypatch.setenv("MODEL_CALLS_FILE", str(calls))
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        first = DurableAgent(mod.build_agent(), run).run_sync("report")
        assert (len(run.executed), len(run.replayed)) == (6, 0)
    assert lines(calls) == 3
    with Run.open(run_dir) as run:
        second = DurableAgent(mod.build_agent(), run).run_sync("report")
        assert (len(run.executed), len(run.replayed)) == (0, 6)
    assert lines(calls) == 3  # the model function was not called again
    assert isinstance(second.output, mod.Report) and second.output == first.output
    assert second.output.words == 280 and len(second.output.sources) == 2  # built from Page objects served as Page
    assert second.usage == first.usage  # the served responses carry their usage

    # in call order: the two parallel fetches commit in either order (their records are paired by pos)
    steps = sorted(records(run_dir), key=lambda r: r["pos"])
    assert [s["step"] for s in steps] == [
        "model:function:fake_model:", "tool:search", "model:function:fake_model:", "tool:fetch", "tool:fetch",
        "model:function:fake_model:",
    ]
    assert [s.get("k", 0) for s in steps] == [0, 0, 1, 0, 1, 2]
    for s in (steps[0], steps[2], steps[5]):
        assert s["call"] == {"kind": "model", "model": "function:fake_model:", "provider": "function"}
        (u,) = s["usage"]
        assert u["model"] == "function:fake_model:" and u["provider"] == "function"
        assert u["input_tokens"] > 0 and u["output_tokens"] > 0 and u["cached_tokens"] == 0
        assert s["output"]["kind"] == "response" and "output_type" not in s
    assert steps[0]["inputs"]["kwargs"]["request"]["parts"] == [{"content": "report", "part_kind": "user-prompt"}]
    search, fetch1, fetch2 = steps[1], steps[3], steps[4]
    assert search["inputs"] == {"kwargs": {"query": "durable agents"}} and "usage" not in search
    assert search["output"] == ["https://example.invalid/durable-agents/1", "https://example.invalid/durable-agents/2"]
    tool_call_ids = [p["tool_call_id"] for p in steps[2]["output"]["parts"]]
    for s, call_id in zip((fetch1, fetch2), tool_call_ids, strict=True):
        assert s["call"] == {"kind": "tool", "tool": "fetch", "call_id": call_id}
        assert s["output_type"] == "pydantic:pydantic_ai_agent:Page"
    # the resumed run's inputs equal the recorded ones: no "changed inputs" note (times and run ids are left out)
    assert records(run_dir, "note") == []


def test_async_run_with_a_tool_that_asks_for_retries(tmp_path: Path) -> None:
    """``ModelRetry`` from a tool is the tool's answer, not a failed step: four in a row neither make the SDK roll
    back (max_failures=3) nor run the tool again on resume, where the same retry prompts reach the model."""
    tool_calls: list[int] = []
    model_calls: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        model_calls.append(1)
        retried = [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]
        if any(p.outcome == "success" for p in retried):
            return ModelResponse(parts=[TextPart(f"got it after {len(retried) - 1} retries")])
        return ModelResponse(parts=[ToolCallPart("flaky", {"n": len(retried)})])

    def build() -> Agent[None, str]:
        agent = Agent(FunctionModel(model))

        @agent.tool_plain(retries=5)
        async def flaky(n: int) -> str:
            tool_calls.append(n)
            if n < 4:
                raise ModelRetry(f"try again ({n})")
            return "ok"

        return agent

    async def go() -> tuple[str, list[str]]:
        with Run.open(tmp_path / "run") as run:
            result = await DurableAgent(build(), run).run("go")
            return result.output, list(run.replayed)

    out1, replayed1 = asyncio.run(go())
    assert out1 == "got it after 4 retries" and tool_calls == [0, 1, 2, 3, 4] and len(model_calls) == 6
    assert replayed1 == []
    out2, replayed2 = asyncio.run(go())
    assert out2 == out1 and tool_calls == [0, 1, 2, 3, 4] and len(model_calls) == 6 and len(replayed2) == 11
    tools = [s for s in records(tmp_path / "run") if s["step"] == "tool:flaky"]
    assert all("error" not in s for s in tools)
    assert tools[0]["output"] == {"exception": "ModelRetry", "message": "try again (0)", "metadata": None, "kind": None,
                                  "usage": None}
    assert tools[-1]["output"] == "ok"


def test_model_response_round_trips_with_its_part_kinds() -> None:
    """The SDK's dataclass codec cannot tell a ``ToolCallPart`` from a look-alike part kind; Pydantic AI's own
    schema can: the step output is that JSON, and a served response equals the live one."""
    r = ModelResponse(
        parts=[ThinkingPart("hmm"), TextPart("hi"), ToolCallPart("search", {"q": "x"}, tool_call_id="c1")],
        usage=RequestUsage(input_tokens=3, output_tokens=4, cache_read_tokens=2),
        model_name="m",
        provider_name="p",
    )
    data = dump_response(r)
    assert orjson.loads(orjson.dumps(data)) == data  # plain JSON
    assert "provider_response_id" not in data and "tool_kind" not in data["parts"][2]  # None fields left out
    back = load_response(data)
    assert back == r and type(back.parts[2]) is ToolCallPart
    assert ToolRaised.of(ModelRetry("again")).exception_again() == ModelRetry("again")


def test_a_journal_capability_given_to_the_agent_and_a_missing_framework(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Agent(capabilities=[JournalCapability(run)])`` journals every run of the agent, once each (a
    ``DurableAgent`` around it too); without Pydantic AI the import says what to install."""
    with Run.open(tmp_path / "run") as run:
        agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])), capabilities=[JournalCapability(run)])
        assert agent.run_sync("a").output == "x" and DurableAgent(agent, run).run_sync("b").output == "x"
        assert list(run.executed) == ["model:function:<lambda>:", "model:function:<lambda>:"]
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    monkeypatch.delitem(sys.modules, "supervisor.integrations.pydantic_ai")
    with pytest.raises(ImportError, match=r"pip install 'agent-supervisor-tui\[pydantic-ai\]'"):
        importlib.import_module("supervisor.integrations.pydantic_ai")


@pytest.mark.timeout(60)
def test_supervise_resumes_a_crash_inside_a_tool_without_asking_the_model_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_file = tmp_path / "crashed"
    env = {**clean_env(), "MODEL_CALLS_FILE": str(tmp_path / "sup.calls"), "RESULT_FILE": str(tmp_path / "sup.json"),
           "CRASH_ONCE_FILE": str(crash_file)}
    with Supervised(tmp_path / "sup", [PY, str(SAMPLE)], env=env) as sup:
        # meanwhile a clean run of the same agent, in this process (it has Pydantic AI imported already)
        monkeypatch.setenv("MODEL_CALLS_FILE", str(tmp_path / "clean.calls"))
        with Run.open(tmp_path / "clean") as run:
            clean_report = sample().research(run).model_dump()
        assert sup.wait(40) == 0, sup.stderr()
    assert crash_file.exists()
    exits = sup.events("exit")
    assert [e["code"] for e in exits] == [1, 0], exits
    assert exits[0]["step"].startswith("tool:fetch")  # it died inside the tool (two calls in flight)
    assert [s["attempt"] for s in sup.events("spawn")] == [1, 2]
    # two model requests before the crash, one after it: as many as the clean run made
    assert lines(tmp_path / "sup.calls") == lines(tmp_path / "clean.calls") == 3
    report = json.loads((tmp_path / "sup.json").read_text())
    assert report == clean_report and report["words"] == 280
    models = [r["attempt"] for r in records(tmp_path / "sup") if r["step"].startswith("model:")]
    assert models == [1, 1, 2]  # each committed model step served on resume, never asked again


def test_the_readme_example_resumes_as_the_readme_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The "Pydantic AI" example of docs/adapters.md run twice as ``agent.py`` (in this process): the second run serves all."""
    readme = (ROOT / "docs" / "adapters.md").read_text()
    section = readme[readme.index("## Pydantic AI"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    (tmp_path / "agent.py").write_text(block[: block.index("```")])
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        runpy.run_path(str(tmp_path / "agent.py"), run_name="__main__")
    first, second = capsys.readouterr().out.splitlines()
    assert first == '{"weather":"sunny in a"} replayed 0, ran 3'
    assert second == '{"weather":"sunny in a"} replayed 3, ran 0'
