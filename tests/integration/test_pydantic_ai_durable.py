"""The Pydantic AI adapter's durable-agent surface, in-process: sub-agents, streaming, ``iter``/``override``,
prices and telemetry.

- A tool that delegates to another agent (``sample_runs/pydantic_ai_delegate.py``), with both agents wrapped or
  only the outer one: run twice, the second run serves every call and counts the sub-agent's usage as the first;
  cut off inside the sub-agent (a ``BaseException`` from the fake model, as a kill leaves the journal), the resumed
  run pays only the call cut off and the tool steps around it.
- Streaming (``sample_runs/pydantic_ai_stream.py``): ``run_stream_events``, ``run_stream`` and
  ``event_stream_handler`` journal each streamed request whole; a second run streams what the first did without a
  model call, and the output and usage equal an unjournaled run's.
- ``iter`` and ``override`` of ``DurableAgent``; toolsets and models given to the run, dynamic toolsets without
  an ``id``, journaled; a ``FunctionModel`` named like a real model priced as it; the spans of served calls left
  out of Pydantic AI's traces.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, FunctionToolset
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import DynamicToolset

from supervisor import Run
from supervisor.export import pricing
from supervisor.integrations.pydantic_ai import DurableAgent, ToolRaised, ToolUsed, priced_as

from ..conftest import ROOT

SAMPLES = ROOT / "sample_runs"


def sample(name: str) -> ModuleType:
    """A sample agent's module, imported once under its own name."""
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, SAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def records(run_dir: Path, kind: str = "step") -> list[dict[str, Any]]:
    return [r for r in map(orjson.loads, (run_dir / "journal.jsonl").read_bytes().splitlines())
            if r.get("kind", "step") == kind]


def paid(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@pytest.fixture(autouse=True)
def _close_the_run_sync_loop() -> Iterator[None]:
    """Pydantic AI's ``run_sync`` leaves its event loop set on the thread, open: close it after each test (as
    ``test_integration_pydantic_ai`` does; an unclosed loop is an error at the end of the session)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:  # none set
            return
    loop.close()
    asyncio.set_event_loop(None)


class Crash(BaseException):
    """What a kill does to the agent, in-process: the step in flight never commits (no ``step`` record)."""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("wrap", ["both", "outer"])
def test_a_sub_agent_run_twice_is_served_whole_and_counted_in_the_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrap: str
) -> None:
    """The second run serves the tool steps (their sub-agent steps are never visited) and adds the usage the first
    run's sub-agent calls recorded: ``requests`` is 4 + 6 x 3, as in the first run (before: 4)."""
    mod = sample("pydantic_ai_delegate")
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LEDGER_FILE", str(ledger))
    reports = []
    for _ in range(2):
        with Run.open(tmp_path / "run") as run:
            reports.append(asyncio.run(mod.desk_run(run, wrap=wrap)))
            counts = (len(run.executed), len(run.replayed))
    assert counts == (0, 4 + 6)  # the second run: the desk's 4 model steps and 6 tool steps, served
    assert len(paid(ledger)) == 4 + 6 + 6 * 5  # each call paid once, in the first run
    assert reports[1] == reports[0]
    assert reports[0]["requests"] == 4 + 6 * 3 and reports[0]["tool_calls"] == 6 + 6 * 2
    steps = records(tmp_path / "run")
    begins = {r["id"]: r for r in records(tmp_path / "run", "begin")}
    expert = [s for s in steps if s["step"] == "model:openai:gpt-4o-mini"]
    assert len(expert) == 18 and all(begins[s["parent"]]["step"] == "tool:ask_expert" for s in expert)
    assert expert[0]["call"] == {"kind": "model", "model": "gpt-4o-mini", "provider": "openai"}
    asks = [s for s in steps if s["step"] == "tool:ask_expert"]
    assert all(s["output_type"].endswith(":ToolUsed") and s["output"]["usage"]["requests"] == 3 for s in asks)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("wrap", ["both", "outer"])
def test_a_crash_inside_the_sub_agent_pays_only_the_call_cut_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrap: str
) -> None:
    """The expert's third model call of ``topic 0`` is cut off: resumed, the tool steps it was in run again, the
    expert's committed calls are served (before, with only the outer agent wrapped: paid again), and the report
    and usage equal a clean run's."""
    mod = sample("pydantic_ai_delegate")
    monkeypatch.setenv("LEDGER_FILE", str(tmp_path / "clean.jsonl"))
    with Run.open(tmp_path / "clean") as run:
        clean = asyncio.run(mod.desk_run(run, wrap=wrap, rounds=1))
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LEDGER_FILE", str(ledger))
    pay = mod.Ledger.paid

    def paid_or_crash(self: Any, call: str) -> None:
        pay(self, call)
        if call == "expert:model:topic 0:2" and self.run.attempt == 1:
            raise Crash(call)

    monkeypatch.setattr(mod.Ledger, "paid", paid_or_crash)
    with pytest.raises(Crash), Run.open(tmp_path / "run") as run:
        asyncio.run(mod.desk_run(run, wrap=wrap, rounds=1))
    first = len(paid(ledger))
    with Run.open(tmp_path / "run") as run:
        resumed = asyncio.run(mod.desk_run(run, wrap=wrap, rounds=1))
    assert resumed == clean and resumed["requests"] == 2 + 2 * 3
    again = Counter(e["call"] for e in paid(ledger)[first:])
    assert again == Counter({"ask_expert:topic 0": 1, "ask_expert:topic 1": 1, "expert:model:topic 0:2": 1,
                             "desk:model:2": 1}), again
    assert sorted({e["call"] for e in paid(ledger)}) == sorted(e["call"] for e in paid(tmp_path / "clean.jsonl"))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["events", "stream", "handler"])
def test_a_streamed_run_is_recorded_whole_and_replayed_as_a_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Each streamed model request is one step (``call.stream``) with the whole response; the second run streams
    what the first did, from the journal; output and usage equal those of the agent run bare (not journaled)."""
    mod = sample("pydantic_ai_stream")
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LEDGER_FILE", str(ledger))
    reports = []
    for _ in range(2):
        with Run.open(tmp_path / "run") as run:
            reports.append(asyncio.run(mod.scribe_run(run, mode=mode, notes=3)))
    assert reports[1] == reports[0]
    assert len(paid(ledger)) == 4 + 3  # the second run paid nothing
    assert reports[0]["output"] == "Summary: note0 note1 note2 "
    models = [s for s in records(tmp_path / "run") if s["step"].startswith("model:")]
    assert len(models) == 4 and all(s["call"]["stream"] is True for s in models)
    assert models[-1]["output"]["parts"] == [{"content": "Summary: note0 note1 note2 ", "part_kind": "text"}]
    if mode != "stream":
        assert reports[0]["streamed"][:3] == ["start:tool-call:note", 'call:note:{"n":0}', "result:note0"]

        async def ignore(ctx: Any, events: Any) -> None:
            async for _ in events:
                pass

        async def bare() -> Any:  # streamed too (the stream function is the model's only one)
            with Run.open(tmp_path / "unused") as run:  # for the ledger's run.key; nothing is journaled
                return await mod.build(run, notes=3).run("Take your notes, then sum them up.", event_stream_handler=ignore)

        result = asyncio.run(bare())
        assert (result.output, result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (
            reports[0]["output"], reports[0]["requests"], reports[0]["input_tokens"], reports[0]["output_tokens"])


def _tool_agent(model_name: str | None = None, **kw: Any) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        got = [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]
        if not got:
            return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"})])
        return ModelResponse(parts=[TextPart(f"it is {got[0].content}")])

    agent = Agent(FunctionModel(model, model_name=model_name), **kw)

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


@pytest.mark.timeout(30)
def test_iter_and_override_are_journaled(tmp_path: Path) -> None:
    async def go() -> tuple[list[str], str, str, int]:
        with Run.open(tmp_path / "run") as run:
            durable = DurableAgent(_tool_agent(), run)
            async with durable.iter("weather?") as agent_run:
                nodes = [type(node).__name__ async for node in agent_run]
            assert agent_run.result is not None
            with durable.override(model=TestModel(custom_output_text="overridden", model_name="anthropic:claude-sonnet-4-5")):
                overridden = (await durable.run("again")).output
            return nodes, agent_run.result.output, overridden, len(run.executed)

    first, second = asyncio.run(go()), asyncio.run(go())
    assert first[:3] == second[:3] and first[1] == "it is sunny in Paris" and first[2] == "overridden"
    assert first[3] == 3 + 3 and second[3] == 0  # two model requests and a tool call, twice; then all served
    assert first[0] == ["UserPromptNode", "ModelRequestNode", "CallToolsNode", "ModelRequestNode", "CallToolsNode", "End"]
    steps = [s["step"] for s in records(tmp_path / "run")]
    assert steps[3:] == ["model:anthropic:claude-sonnet-4-5", "tool:weather", "model:anthropic:claude-sonnet-4-5"]
    assert records(tmp_path / "run")[3]["call"] == {"kind": "model", "model": "claude-sonnet-4-5", "provider": "anthropic"}


@pytest.mark.timeout(30)
def test_run_time_toolsets_models_and_unnamed_dynamic_toolsets_are_journaled(tmp_path: Path) -> None:
    """What an engine on ``pydantic_ai.durable_exec`` refuses or leaves unjournaled (README, "Pydantic AI"): a
    toolset given to the run, a dynamic toolset without an ``id``, a model instance given to the run."""
    extra, dynamic = FunctionToolset(), FunctionToolset()

    @extra.tool_plain
    def lookup(q: str) -> str:
        return "e"

    @dynamic.tool_plain
    def listed(q: str) -> str:
        return "d"

    for _ in range(2):
        with Run.open(tmp_path / "run") as run:
            agent = Agent(TestModel(), toolsets=[DynamicToolset(lambda ctx: dynamic)])
            out = DurableAgent(agent, run).run_sync("x", toolsets=[extra], model=TestModel(model_name="other")).output
            counts = (list(run.executed), len(run.replayed))
        assert out == '{"listed":"d","lookup":"e"}'
    assert counts == ([], 4)
    steps = [s["step"] for s in records(tmp_path / "run")]
    # the two tool calls of one answer run at once: their records are in the order they finished
    assert len(steps) == 4, steps
    assert steps[0] == steps[3] == "model:other" and sorted(steps[1:3]) == ["tool:listed", "tool:lookup"], steps


@pytest.mark.timeout(30)
def test_an_offline_model_named_like_a_real_one_is_priced_as_it(tmp_path: Path) -> None:
    assert priced_as("openai:gpt-4o", "function") == ("gpt-4o", "openai")
    assert priced_as("anthropic:claude-sonnet-4-5", "test") == ("claude-sonnet-4-5", "anthropic")
    assert priced_as("function:fake_model:", "function") == ("function:fake_model:", "function")
    assert priced_as("test", "test") == ("test", "test")
    assert priced_as("gpt-4o", "openai") == ("gpt-4o", "openai")  # a real model: as it names itself
    with Run.open(tmp_path / "run") as run:
        DurableAgent(_tool_agent("openai:gpt-4o"), run).run_sync("weather?")
        DurableAgent(_tool_agent(), run).run_sync("weather?")
    named, *_, unnamed = [s for s in records(tmp_path / "run") if s["step"].startswith("model:")]
    assert named["step"] == "model:openai:gpt-4o"  # the step's name, its identity, is the model's name as before
    assert named["call"] == {"kind": "model", "model": "gpt-4o", "provider": "openai"}
    assert [(u["model"], u["provider"]) for u in named["usage"]] == [("gpt-4o", "openai")]
    assert unnamed["call"]["provider"] == "function" and pricing.step_cost(unnamed) is None  # never a wrong figure
    if pricing.available():
        cost = pricing.step_cost(named)
        assert cost is not None and cost > 0


@pytest.mark.timeout(30)
def test_served_calls_leave_no_spans_in_pydantic_ai_traces(tmp_path: Path) -> None:
    """Pydantic AI's replay-safe telemetry (``durable_exec.replay_scope``, ``record_durable_unit``): a resumed run
    whose calls were all served exports none of their spans, nor the agent run's."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = []
    for _ in range(2):
        with Run.open(tmp_path / "run") as run:
            agent = _tool_agent(capabilities=[Instrumentation(InstrumentationSettings(tracer_provider=provider))])
            DurableAgent(agent, run).run_sync("weather?")
        spans.append(sorted(s.name for s in exporter.get_finished_spans()))
        exporter.clear()
    assert spans[0] == ["chat function:model:", "chat function:model:", "execute_tool weather", "invoke_agent agent"]
    assert spans[1] == []


def test_tool_outputs_with_usage_round_trip() -> None:
    used = ToolUsed([1, 2], "tuple[json]", {"requests": 2})
    assert used.returned("tool:x") == (1, 2)
    raised = ToolRaised("ModelRetry", message="again", usage={"requests": 1})
    assert str(raised.exception_again()) == "again"
