"""The OpenAI Agents SDK adapter: ``durable(agent, run)`` and ``JournalTracingProcessor``.

In-process: a run twice in one directory (the second serves every model call and tool call: neither the
model nor a tool is called again, and the result equals), the records' ``call`` and ``usage`` fields,
streaming, handoffs, tracing notes. One real-process test: ``supervise`` restarts the sample agent after
it crashes with ``os._exit`` inside a tool; the model calls and the final output equal a clean run's.
Nothing reaches OpenAI: the SDK's tracing is off (or its processors replaced by ours).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import agents
import pytest
from agents import Agent, ModelResponse, Runner, function_tool
from agents.models import get_default_model
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseFunctionToolCall

from supervisor import Run
from supervisor.integrations.openai_agents import DurableModel, JournalTracingProcessor, durable

from ..conftest import ROOT, clean_env
from .supervisor_util import PY, Supervised

SAMPLE = ROOT / "sample_runs" / "openai_agents_agent.py"


def _load_sample() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openai_agents_agent", SAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # function_tool reads the module's annotations
    spec.loader.exec_module(mod)
    return mod


sample = _load_sample()


@pytest.fixture(autouse=True)
def _no_trace_export() -> Iterator[None]:
    """Offline: the SDK's default processor would send traces to OpenAI. After the test, close the event
    loop ``Runner.run_sync`` leaves open on purpose (unclosed, it warns when collected: an error here)."""
    agents.set_tracing_disabled(True)
    yield
    agents.set_tracing_disabled(True)
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:  # none is set (asyncio.run unset it)
            return
    if not loop.is_running():
        loop.close()
    policy.set_event_loop(None)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


class Counted:
    """The sample's tools with a counter of real calls (a served tool call does not count)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

        @function_tool
        def search(query: str) -> str:
            """Search; result URLs, one a line."""
            self.calls.append("search")
            return f"https://example.invalid/{query}/1\nhttps://example.invalid/{query}/2"

        @function_tool
        def fetch(url: str) -> str:
            """Fetch a page."""
            self.calls.append("fetch")
            return f"page {url.rsplit('/', 1)[-1]}"

        self.tools = [search, fetch]


def _run_once(run_dir: Path) -> tuple[Any, Any, Counted, list[str]]:
    model, tools = sample.ScriptedModel(), Counted()
    with Run.open(run_dir) as run:
        agent = Agent(name="researcher", instructions="Search, fetch, answer.", model=model, tools=tools.tools)
        result = Runner.run_sync(durable(agent, run, provider="scripted"), sample.PROMPT)
        replayed = list(run.replayed)
    return result, model, tools, replayed


def test_second_run_serves_every_step_and_the_records_say_what_was_called(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first, model1, tools1, replayed1 = _run_once(run_dir)
    assert model1.calls == 3 and sorted(tools1.calls) == ["fetch", "fetch", "search"] and replayed1 == []
    second, model2, tools2, replayed2 = _run_once(run_dir)
    # served: neither the model nor a tool was called, and the result is the same
    assert model2.calls == 0 and tools2.calls == []
    assert len(replayed2) == 6
    assert second.final_output == first.final_output == "Answer: page 1 | page 2"
    # the served model responses are the SDK's own objects again, equal to the live ones
    assert second.raw_responses == first.raw_responses
    assert all(type(r) is ModelResponse for r in second.raw_responses)
    assert type(second.raw_responses[0].output[0]) is ResponseFunctionToolCall
    assert second.context_wrapper.usage.input_tokens == first.context_wrapper.usage.input_tokens > 0

    recs = _records(run_dir)
    # in call order: the two parallel fetches commit in either order (their records are paired by pos)
    steps = sorted((r for r in recs if r.get("kind") == "step"), key=lambda r: r["pos"])
    # a model call's step is named after its agent (the model is in ``call``)
    assert [s["step"] for s in steps] == [
        "model:researcher", "tool:search", "model:researcher", "tool:fetch", "tool:fetch", "model:researcher",
    ]
    for s in [s for s in steps if s["step"].startswith("model:")]:
        assert s["call"] == {"kind": "model", "model": "scripted-research-1", "provider": "scripted", "agent": "researcher"}
        (u,) = s["usage"]
        assert u["model"] == "scripted-research-1" and u["provider"] == "scripted"
        assert u["input_tokens"] > 0 and u["output_tokens"] > 0 and u["cached_tokens"] == u["input_tokens"] // 2
    first_model, last_model = steps[0]["inputs"]["kwargs"], steps[-1]["inputs"]["kwargs"]
    # a model call's inputs: the request's digest, its number of items and the last item (not the conversation)
    assert first_model["items"] == 1 and first_model["last"] == {"content": sample.PROMPT, "role": "user"}
    assert last_model["items"] == 7 and last_model["last"]["type"] == "function_call_output"
    assert len(first_model["digest"]) == 16 and first_model["digest"] != last_model["digest"]
    tool_steps = [s for s in steps if s["step"].startswith("tool:")]
    assert [s["call"] for s in tool_steps] == [
        {"kind": "tool", "tool": "search", "call_id": "call_search_1", "agent": "researcher"},
        {"kind": "tool", "tool": "fetch", "call_id": "call_fetch_1", "agent": "researcher"},
        {"kind": "tool", "tool": "fetch", "call_id": "call_fetch_2", "agent": "researcher"},
    ]
    assert tool_steps[0]["inputs"] == {"kwargs": {"query": "durable agents"}}  # the tool's arguments
    assert tool_steps[1]["output"] == "page 1"
    # the begin records carry the call too, and nothing was reported as changed on resume
    assert all("call" in r for r in recs if r.get("kind") == "begin")
    assert not [r for r in recs if r.get("kind") == "note"]


def test_a_changed_request_is_told_on_resume(tmp_path: Path) -> None:
    """The recorded digest covers the whole request: another prompt on resume is a 'changed inputs' note."""
    run_dir = tmp_path / "run"
    _run_once(run_dir)
    with Run.open(run_dir) as run:
        agent = Agent(name="researcher", instructions="Search, fetch, answer.", model=sample.ScriptedModel(),
                      tools=Counted().tools)
        Runner.run_sync(durable(agent, run, provider="scripted"), "another question")
    notes = [r for r in _records(run_dir) if r.get("kind") == "note"]
    # every model request holds the prompt; the tools' arguments did not change (served without a word)
    assert [(n["message"], n["step"], n["pos"], n["action"]) for n in notes] == [
        ("changed inputs", "model:researcher", p, "served") for p in (0, 2, 5)
    ]


def test_async_runner_and_the_original_agent_is_unchanged(tmp_path: Path) -> None:
    model, tools = sample.ScriptedModel(), Counted()
    agent = Agent(name="researcher", instructions="x", model=model, tools=tools.tools)

    async def main(run: Run) -> Any:
        return await Runner.run(durable(agent, run), sample.PROMPT)

    with Run.open(tmp_path / "run") as run:
        result = asyncio.run(main(run))
    assert result.final_output == "Answer: page 1 | page 2"
    assert agent.model is model and agent.tools == tools.tools  # durable() cloned it
    # the framework alone gives the same answer and sees the same inputs (the fake counts tokens from them:
    # a journaled response round-trips with the same fields set, so the next request is the same)
    bare = Runner.run_sync(agent, sample.PROMPT)
    assert bare.final_output == result.final_output and bare.raw_responses == result.raw_responses
    steps = [r for r in _records(tmp_path / "run") if r.get("kind") == "step"]
    assert "provider" not in steps[0]["call"]  # a fake model's provider is not guessed


def test_a_streamed_run_is_journaled_and_served(tmp_path: Path) -> None:
    calls: list[int] = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add."""
        calls.append(1)
        return a + b

    def script() -> ScriptedModel:
        return ScriptedModel([
            ModelStep(output=[function_call("add", {"a": 2, "b": 3}, call_id="c-add")]),
            ModelStep(output=[assistant_message("five")]),
        ])

    async def main(model: ScriptedModel) -> tuple[Any, list[str]]:
        with Run.open(tmp_path / "run") as run:
            res = Runner.run_streamed(durable(Agent(name="a", model=model, tools=[add]), run), "2+3?")
            kinds = [ev.type async for ev in res.stream_events()]
            return res, kinds

    m1, m2 = script(), script()
    r1, kinds1 = asyncio.run(main(m1))
    r2, kinds2 = asyncio.run(main(m2))
    assert len(m1.calls) == 2 and len(m2.calls) == 0 and calls == [1]
    assert r1.final_output == r2.final_output == "five" and kinds1 == kinds2
    steps = [r for r in _records(tmp_path / "run") if r.get("kind") == "step"]
    assert [s["step"] for s in steps] == ["model:a", "tool:add", "model:a"]
    assert steps[1]["output"] == 5 and steps[1]["call"]["call_id"] == "c-add"


def test_a_tool_error_the_model_was_told_is_journaled_as_its_output(tmp_path: Path) -> None:
    raised: list[int] = []

    @function_tool
    def boom(x: int) -> int:
        """Fails."""
        raised.append(x)
        raise ValueError("no such page")

    def run_once() -> Any:
        model = ScriptedModel([[function_call("boom", {"x": 1}, call_id="c1")], [assistant_message("gave up")]])
        with Run.open(tmp_path / "run") as run:
            return Runner.run_sync(durable(Agent(name="a", model=model, tools=[boom]), run), "go")

    first, second = run_once(), run_once()
    assert raised == [1] and first.final_output == second.final_output == "gave up"
    step = next(r for r in _records(tmp_path / "run") if r.get("step") == "tool:boom" and r.get("kind") == "step")
    assert step["output"].startswith("An error occurred while running the tool") and "error" not in step  # as the model saw it
    outputs = [i.output for i in second.new_items if i.type == "tool_call_output_item"]
    assert outputs == [step["output"]]


def test_handoff_targets_are_durable_too(tmp_path: Path) -> None:
    def models() -> tuple[ScriptedModel, ScriptedModel]:
        front = ScriptedModel([[function_call("transfer_to_expert", {}, call_id="h1")]])
        return front, ScriptedModel([[assistant_message("expert answer")]])

    def run_once(front: ScriptedModel, back: ScriptedModel) -> Any:
        expert = Agent(name="expert", model=back)
        triage = Agent(name="triage", model=front, handoffs=[expert])
        with Run.open(tmp_path / "run") as run:
            d = durable(triage, run)
            assert isinstance(d.handoffs[0], Agent) and isinstance(d.handoffs[0].model, DurableModel)
            return Runner.run_sync(d, "hi")

    f1, b1 = models()
    assert run_once(f1, b1).final_output == "expert answer" and len(b1.calls) == 1
    f2, b2 = models()
    assert run_once(f2, b2).final_output == "expert answer" and len(f2.calls) == len(b2.calls) == 0
    names = [r["step"] for r in _records(tmp_path / "run") if r.get("kind") == "step"]
    assert names == ["model:triage", "model:expert"]


def test_tracing_processor_journals_spans_as_notes(tmp_path: Path) -> None:
    with Run.open(tmp_path / "run") as run:
        agents.set_trace_processors([JournalTracingProcessor(run)])  # instead of the OpenAI exporter
        agents.set_tracing_disabled(False)
        try:
            Runner.run_sync(sample.build_agent(), sample.PROMPT)  # observed only: no steps
        finally:
            agents.set_tracing_disabled(True)
            agents.set_trace_processors([])
    notes = [r for r in _records(tmp_path / "run") if r.get("kind") == "note"]
    spans = [n for n in notes if n["message"] == "span"]
    types = [s["span"]["type"] for s in spans]
    assert types.count("function") == 3 and "agent" in types
    fn = next(s for s in spans if s["span"]["type"] == "function")
    assert fn["span"]["name"] in ("search", "fetch") and fn["trace_id"] and fn["span_id"] and fn["ended_at"]
    agent_span = next(s for s in spans if s["span"]["type"] == "agent")
    assert agent_span["span"]["name"] == "researcher"
    by_id = {s["span_id"]: s for s in spans}
    chain = [fn]
    while chain[-1]["parent_id"] is not None:  # the parents are journaled too, through the agent's span
        chain.append(by_id[chain[-1]["parent_id"]])
    assert agent_span in chain
    (trace,) = [n for n in notes if n["message"] == "trace"]
    assert trace["trace_id"] == fn["trace_id"] and trace["name"]
    assert not [r for r in _records(tmp_path / "run") if r.get("kind") == "step"]


def test_model_names_and_providers_without_calling_anything(tmp_path: Path) -> None:
    with Run.open(tmp_path / "run") as run:
        def named(m: Any, **kw: Any) -> tuple[str, str | None]:
            d = DurableModel(m, run, **kw)
            return d.model_name, d.provider

        assert named("gpt-4.1") == ("gpt-4.1", "openai")  # a name is resolved only at the first call
        assert named("litellm/anthropic/claude-x") == ("litellm/anthropic/claude-x", "anthropic")
        assert named(None) == (get_default_model(), "openai")
        assert named(sample.ScriptedModel()) == ("scripted-research-1", None)
        assert named(sample.ScriptedModel(), provider="acme") == ("scripted-research-1", "acme")
        assert named(ScriptedModel([])) == ("ScriptedModel", None)


def test_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "supervisor.integrations.openai_agents")
    monkeypatch.setitem(sys.modules, "agents", None)  # import agents -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'agent-supervisor-tui\[openai-agents\]'"):
        importlib.import_module("supervisor.integrations.openai_agents")


@pytest.mark.timeout(60)
def test_supervise_restarts_a_crash_inside_a_tool_without_paying_the_model_again(tmp_path: Path) -> None:
    # the clean run, in this process: its model calls and its answer
    model = sample.ScriptedModel()
    with Run.open(tmp_path / "clean") as run:
        clean = Runner.run_sync(durable(sample.build_agent(model), run, provider="scripted"), sample.PROMPT)
    assert model.calls == 3

    calls, crash, result = tmp_path / "calls.txt", tmp_path / "crashed", tmp_path / "result.json"
    env = clean_env() | {"MODEL_CALLS_FILE": str(calls), "CRASH_ONCE_FILE": str(crash), "RESULT_FILE": str(result)}
    run_dir = tmp_path / "run"
    with Supervised(run_dir, [PY, str(SAMPLE)], env=env) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    assert crash.exists()  # it did crash inside the tool (fetch), after two model calls
    exits = sup.events("exit")
    assert [e["code"] for e in exits] == [1, 0], exits
    assert exits[0]["step"].startswith("tool:fetch")  # the other fetch may be in flight too
    assert len(calls.read_text().splitlines()) == model.calls == 3  # no model call paid twice
    assert json.loads(result.read_text()) == clean.final_output
    steps = [r for r in _records(run_dir) if r.get("kind") == "step" and "error" not in r]
    assert [s["step"] for s in steps].count("tool:search") == 1  # the search before the crash was served
