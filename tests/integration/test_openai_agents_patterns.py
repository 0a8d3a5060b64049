"""The OpenAI Agents SDK adapter with the SDK's other patterns, in this process (the kill tests are beside).

A guardrail that runs a guard agent, ``agent.as_tool(...)``, a ``SQLiteSession`` across turns (served on resume,
brought back to the journal's point when it holds more or other items), a streamed response without an id, the
agent's name on every call, and ``JournalTracingProcessor``'s steps with tokens. Each test runs the agent twice
(or more) on one run directory, as a restart does; the models answer from their input (never by the order of the
calls), so a call that runs live after served ones gets the answer a clean run would.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import agents
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    Runner,
    SQLiteSession,
    function_tool,
    input_guardrail,
)
from agents.models.interface import Model
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tracing import generation_span
from pydantic import BaseModel

from supervisor import Run
from supervisor.core.usage import run_usage
from supervisor.integrations.openai_agents import (
    DurableSession,
    JournalTracingProcessor,
    SessionMismatchError,
    durable,
)

pytestmark = pytest.mark.timeout(30)  # each test: a few in-process runs of a fake-model agent


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    """No trace leaves the machine; the event loop ``Runner.run_sync`` leaves open is closed after the test."""
    agents.set_tracing_disabled(True)
    yield
    agents.set_tracing_disabled(True)
    agents.set_trace_processors([])
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running():
        loop.close()
    policy.set_event_loop(None)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def _steps(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in _records(run_dir) if r.get("kind") == "step"]


def _items(input: Any) -> list[Any]:
    return [{"role": "user", "content": input}] if isinstance(input, str) else list(input)


def _user_texts(items: list[Any]) -> list[str]:
    return [str(i.get("content")) for i in items if isinstance(i, dict) and i.get("role") == "user"]


def _outputs(items: list[Any]) -> list[str]:
    """The tool outputs after the last user message."""
    out: list[str] = []
    for i in items:
        if isinstance(i, dict) and i.get("role") == "user":
            out = []
        elif isinstance(i, dict) and i.get("type") == "function_call_output":
            out.append(str(i.get("output")))
    return out


class Answers(Model):
    """A fake model whose answer is ``answer(input items)``; ``calls`` counts the real calls."""

    def __init__(self, answer: Callable[[list[Any]], list[Any]], response_id: str | None = "resp-1") -> None:
        self.answer = answer
        self.response_id = response_id
        self.calls = 0

    def _step(self, input: Any) -> ModelStep:
        self.calls += 1
        return ModelStep(output=self.answer(_items(input)), response_id=self.response_id)

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any) -> Any:
        return await ScriptedModel([self._step(input)]).get_response(system_instructions, input, *args, **kw)

    async def stream_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        async for ev in ScriptedModel([self._step(input)]).stream_response(system_instructions, input, *args, **kw):
            yield ev


def _sync(agent: Agent[Any], input: str, **kw: Any) -> Any:
    """``Runner.run`` to its end in a loop of its own (``run_sync`` would leave its loop open beside ``asyncio.run``'s)."""
    return asyncio.run(Runner.run(agent, input, **kw))


def _says(text: Callable[[list[Any]], str]) -> Callable[[list[Any]], list[Any]]:
    return lambda items: [assistant_message(text(items))]


# ---------------------------------------------------------------------------------- guardrails
class Verdict(BaseModel):
    homework: bool


def test_a_guardrails_guard_agent_is_journaled_and_served(tmp_path: Path) -> None:
    """Fails before the change: the guard's model was called again on every run and never journaled."""

    def once() -> tuple[Any, Answers, Answers]:
        guard_model = Answers(_says(lambda items: json.dumps({"homework": "homework" in _user_texts(items)[-1]})))
        guard = Agent(name="Guardrail check", instructions="Homework?", model=guard_model, output_type=Verdict)

        @input_guardrail
        async def no_homework(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
            result = await Runner.run(guard, input, context=ctx.context)  # as the SDK's documentation shows
            return GuardrailFunctionOutput(output_info=result.final_output,
                                           tripwire_triggered=result.final_output.homework)

        main_model = Answers(_says(lambda items: f"help with {_user_texts(items)[-1]}"))
        agent = Agent(name="support", model=main_model, input_guardrails=[no_homework])
        with Run.open(tmp_path / "run") as run:
            result = Runner.run_sync(durable(agent, run), "my printer")
        return result, guard_model, main_model

    first, guard1, main1 = once()
    second, guard2, main2 = once()
    assert guard1.calls == main1.calls == 1 and guard2.calls == main2.calls == 0
    assert first.final_output == second.final_output == "help with my printer"
    assert second.input_guardrail_results[0].output.output_info == Verdict(homework=False)
    steps = _steps(tmp_path / "run")
    assert sorted(s["step"] for s in steps) == ["model:Guardrail check", "model:support"]
    guard_step = next(s for s in steps if s["step"] == "model:Guardrail check")
    assert guard_step["call"]["agent"] == "Guardrail check"
    assert not [r for r in _records(tmp_path / "run") if r.get("kind") == "note"]  # nothing changed on resume


# ---------------------------------------------------------------------------------- agents as tools
def test_an_agent_used_as_a_tool_has_its_calls_as_the_tool_steps_children(tmp_path: Path) -> None:
    """Fails before the change: the inner agent's calls were not journaled (one tool step), so never shown."""
    looked: list[str] = []

    @function_tool
    def lookup(q: str) -> str:
        """Look up."""
        looked.append(q)
        return f"kb:{q}"

    def once() -> tuple[Any, Answers, Answers]:
        inner_model = Answers(lambda items: [function_call("lookup", {"q": _user_texts(items)[-1]}, call_id="c-l")]
                              if not _outputs(items) else [assistant_message(f"found {_outputs(items)[-1]}")])
        outer_model = Answers(lambda items: [function_call("research", {"input": "printer"}, call_id="c-r")]
                              if not _outputs(items) else [assistant_message(f"so: {_outputs(items)[-1]}")])
        inner = Agent(name="researcher", model=inner_model, tools=[lookup])
        outer = Agent(name="support", model=outer_model, tools=[inner.as_tool("research", "Research.")])
        with Run.open(tmp_path / "run") as run:
            result = Runner.run_sync(durable(outer, run), "help")
        assert inner.model is inner_model  # the original agent is not changed
        return result, inner_model, outer_model

    first, inner1, outer1 = once()
    second, inner2, outer2 = once()
    assert first.final_output == second.final_output == "so: found kb:printer"
    assert (inner1.calls, outer1.calls, looked) == (2, 2, ["printer"])
    assert inner2.calls == outer2.calls == 0
    steps = _steps(tmp_path / "run")
    begins = {r["id"]: r for r in _records(tmp_path / "run") if r.get("kind") == "begin"}
    tool = next(s for s in steps if s["step"] == "tool:research")
    kids = [s for s in steps if s.get("parent")]
    assert sorted(s["step"] for s in kids) == ["model:researcher", "model:researcher", "tool:lookup"]
    assert all(begins[s["parent"]]["pos"] == tool["pos"] for s in kids)
    assert {s["call"]["agent"] for s in kids} == {"researcher"} and tool["call"]["agent"] == "support"


# ---------------------------------------------------------------------------------- sessions
def _conversation(run_dir: Path, db: Path, questions: list[str]) -> tuple[list[str], list[Any], Answers]:
    model = Answers(_says(lambda items: f"turn {len(_user_texts(items))}: {_user_texts(items)[-1]}"))
    agent = Agent(name="support", model=model)
    session = SQLiteSession("conv", db)
    try:
        with Run.open(run_dir) as run:
            d = durable(agent, run)
            answers = [str(_sync(d, q, session=session).final_output) for q in questions]
        history = asyncio.run(session.get_items())
    finally:
        session.close()
    return answers, history, model


def _notes(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in _records(run_dir) if r.get("kind") == "note"]


def test_a_session_is_served_on_resume_and_not_written_twice(tmp_path: Path) -> None:
    """Fails before the change: the replayed turn read a session that held it already (changed inputs) and wrote
    its items again (four turns in a session of two)."""
    first = _conversation(tmp_path / "run", tmp_path / "s.db", ["hi", "more"])
    second = _conversation(tmp_path / "run", tmp_path / "s.db", ["hi", "more"])
    assert first[0] == second[0] == ["turn 1: hi", "turn 2: more"]
    assert first[1] == second[1] and len(second[1]) == 4 and second[2].calls == 0
    assert not _notes(tmp_path / "run")
    names = [s["step"] for s in _steps(tmp_path / "run")]
    assert names.count("session:get_items") == 2 and names.count("session:add_items") == 4
    gets = [s for s in _steps(tmp_path / "run") if s["step"] == "session:get_items"]
    # the history is recorded once (the first read), then its length and digest: the journal grows with the writes
    assert gets[0]["output"] == {"items": []} and set(gets[1]["output"]) == {"total", "digest"}


def _raw(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db)


def test_a_session_ahead_of_the_journal_is_brought_back_before_the_first_live_call(tmp_path: Path) -> None:
    """A write whose step did not commit (the process died between the two) is taken out, the live turn then
    sees the history the journal leads to."""
    clean = _conversation(tmp_path / "clean", tmp_path / "clean.db", ["hi", "more"])
    _conversation(tmp_path / "run", tmp_path / "s.db", ["hi"])
    # an item the journal never recorded, as an add_items killed before its step committed leaves it
    stray = SQLiteSession("conv", tmp_path / "s.db")
    asyncio.run(stray.add_items([{"role": "user", "content": "more"}]))
    stray.close()
    answers, history, model = _conversation(tmp_path / "run", tmp_path / "s.db", ["hi", "more"])
    assert (answers, history) == clean[:2] and model.calls == 1
    (note,) = _notes(tmp_path / "run")
    assert note["message"] == "session restored" and (note["items"], note["found"]) == (2, 3)
    assert note["how"] == "removed the items after it"


def test_a_session_that_lost_its_history_is_rewritten_from_the_journal(tmp_path: Path) -> None:
    clean = _conversation(tmp_path / "clean", tmp_path / "clean.db", ["hi", "more"])
    _conversation(tmp_path / "run", tmp_path / "s.db", ["hi"])
    with _raw(tmp_path / "s.db") as db:
        db.execute("DELETE FROM agent_messages")  # the session lost what the journal says it holds
    answers, history, _ = _conversation(tmp_path / "run", tmp_path / "s.db", ["hi", "more"])
    assert (answers, history) == clean[:2]
    (note,) = _notes(tmp_path / "run")
    assert (note["message"], note["how"], note["found"]) == ("session restored", "rewrote it", 0)


def test_a_session_written_by_someone_else_between_turns_is_recorded_whole(tmp_path: Path) -> None:
    """The user pops the last exchange between turns (the SDK's 'correction' pattern) outside the run: the next
    read records the history it found, and a resume serves it."""

    def run(questions: list[str]) -> tuple[list[str], list[Any]]:
        model = Answers(_says(lambda items: f"turn {len(_user_texts(items))}: {_user_texts(items)[-1]}"))
        session = SQLiteSession("conv", tmp_path / "s.db")
        try:
            with Run.open(tmp_path / "run") as r:
                d = durable(Agent(name="support", model=model), r)
                answers = [str(_sync(d, questions[0], session=session).final_output)]
                if r.phase.value == "live":
                    for _ in range(2):
                        asyncio.run(session.pop_item())  # not through the run: someone else's write
                answers.append(str(_sync(d, questions[1], session=session).final_output))
            return answers, asyncio.run(session.get_items())
        finally:
            session.close()

    first = run(["wrong question", "right question"])
    second = run(["wrong question", "right question"])
    assert first == second and first[0] == ["turn 1: wrong question", "turn 1: right question"]
    gets = [s for s in _steps(tmp_path / "run") if s["step"] == "session:get_items"]
    assert [len(g["output"].get("items", [])) for g in gets] == [0, 0]  # both reads found another history


def test_a_resume_whose_session_calls_changed_is_refused_not_served_stale(tmp_path: Path) -> None:
    """The resumed agent writes an item the recorded run did not: the history its steps lead to is not the one the
    journal recorded at the next read, and that read raises instead of serving a history the session does not hold."""
    _conversation(tmp_path / "run", tmp_path / "s.db", ["hi", "more"])
    inner = SQLiteSession("conv", tmp_path / "s.db")
    try:
        with Run.open(tmp_path / "run") as run:
            d = durable(Agent(name="support", model=Answers(_says(lambda _: "x"))), run)
            s = DurableSession(inner, run)
            asyncio.run(s.add_items([{"role": "user", "content": "an extra line"}]))
            with pytest.raises(SessionMismatchError, match="fork the run before the change"):
                _sync(d, "hi", session=s)
    finally:
        inner.close()


def test_durable_session_used_directly(tmp_path: Path) -> None:
    """``DurableSession(session, run)`` by hand: pop and clear are steps too, served on resume."""

    async def main() -> list[Any]:
        inner = SQLiteSession("s", tmp_path / "s.db")
        with Run.open(tmp_path / "run") as run:
            s = DurableSession(inner, run)
            await s.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
            popped = await s.pop_item()
            got = await s.get_items(limit=5)
            await s.clear_session()
            after = await s.get_items()
        inner.close()
        return [popped, got, after]

    first = asyncio.run(main())
    assert first == [{"role": "user", "content": "b"}, [{"role": "user", "content": "a"}], []]
    assert asyncio.run(main()) == first
    names = [s["step"] for s in _steps(tmp_path / "run")]
    assert names == ["session:get_items", "session:add_items", "session:pop_item", "session:get_items",
                     "session:clear_session", "session:get_items"]


# ---------------------------------------------------------------------------------- streams
def test_a_streamed_response_without_an_id_is_journaled_and_served(tmp_path: Path) -> None:
    """Fails before the change: reading its own journaled events back raised a pydantic ValidationError live."""

    async def once() -> tuple[Any, list[Any], Answers]:
        model = Answers(_says(lambda items: "five"), response_id=None)
        with Run.open(tmp_path / "run") as run:
            res = Runner.run_streamed(durable(Agent(name="a", model=model), run), "2+3?")
            events = [ev async for ev in res.stream_events()]
        return res, events, model

    r1, ev1, m1 = asyncio.run(once())
    r2, ev2, m2 = asyncio.run(once())
    assert r1.final_output == r2.final_output == "five" and (m1.calls, m2.calls) == (1, 0)
    raw1 = [e.data for e in ev1 if e.type == "raw_response_event"]
    raw2 = [e.data for e in ev2 if e.type == "raw_response_event"]
    assert raw1 == raw2 and raw1[-1].type == "response.completed" and raw1[-1].response.id is None
    assert r1.raw_responses[0].response_id is None and r1.raw_responses == r2.raw_responses


# ---------------------------------------------------------------------------------- observing
class Traced(Model):
    """A fake model traced as the SDK's chat model is: a ``generation`` span with the model and the usage."""

    model = "traced-1"

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        with generation_span(model=self.model, model_config={}) as span:
            span.span_data.usage = {"input_tokens": 100 * self.calls, "output_tokens": 7,
                                    "input_tokens_details": {"cached_tokens": 10}}
        return await ScriptedModel([[assistant_message("ok")]]).get_response(system_instructions, input, *args, **kw)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        raise NotImplementedError("not streamed here")
        yield


def _observed(run_dir: Path, agent: Agent[Any], *, as_durable: bool = False) -> None:
    with Run.open(run_dir) as run:
        agents.set_trace_processors([JournalTracingProcessor(run)])
        agents.set_tracing_disabled(False)
        try:
            Runner.run_sync(durable(agent, run) if as_durable else agent, "hi")
        finally:
            agents.set_tracing_disabled(True)
            agents.set_trace_processors([])


def test_the_tracing_processor_journals_each_model_call_it_saw_as_a_step_with_tokens(tmp_path: Path) -> None:
    """Fails before the change: an observed run had no step and no tokens for status and the dashboard."""
    _observed(tmp_path / "run", Agent(name="writer", model=Traced()))
    (step,) = _steps(tmp_path / "run")
    assert step["step"] == "model:writer" and step["inputs"]["kwargs"]["span_id"]
    assert step["call"] == {"kind": "model", "model": "traced-1", "agent": "writer", "observed": True}
    assert step["usage"] == [{"model": "traced-1", "input_tokens": 100, "output_tokens": 7, "cached_tokens": 10}]
    gen = next(n for n in _notes(tmp_path / "run") if n.get("span", {}).get("type") == "generation")
    assert gen["span_id"] == step["inputs"]["kwargs"]["span_id"]  # the step names the span it saw
    # a second attempt calls the model again (the agent is not durable): its call is a step of its own, not served
    _observed(tmp_path / "run", Agent(name="writer", model=Traced()))
    steps = _steps(tmp_path / "run")
    assert [s["step"] for s in steps] == ["model:writer", "model:writer (attempt 2)"]
    assert run_usage(_records(tmp_path / "run")).tokens.input == 200


def test_the_tracing_processor_leaves_a_durable_agents_calls_to_their_steps(tmp_path: Path) -> None:
    model = Traced()
    _observed(tmp_path / "run", Agent(name="writer", model=model), as_durable=True)
    assert model.calls == 1
    (step,) = _steps(tmp_path / "run")
    assert step["step"] == "model:writer" and "observed" not in step["call"]  # the durable step, counted once


def test_a_plain_run_after_a_durable_one_is_not_journaled(tmp_path: Path) -> None:
    """``durable`` wraps the SDK's default runner; runs outside a durable one pass through it unchanged."""
    with Run.open(tmp_path / "run") as run:
        Runner.run_sync(durable(Agent(name="a", model=Answers(_says(lambda _: "x"))), run), "hi")
        plain = Answers(_says(lambda _: "y"))
        assert Runner.run_sync(Agent(name="b", model=plain), "hi").final_output == "y"
    assert plain.calls == 1 and [s["step"] for s in _steps(tmp_path / "run")] == ["model:a"]
